"""One contract, every durable event log: SQLite (a file) and PostgreSQL (a real server, see
tests/_postgres.py), with the same results. What a plan relies on: an append returns once
it is durable and readable by anyone, a plan whose seq does not follow on is refused alone,
one supervisor per plan across processes, and a lease whose holder dies is free again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from _helpers import validation_completed as event
from gategraph.runtime import ConfigError, PlanStatus, RuntimeFault, load_graph, run_plan
from gategraph.runtime._base._exceptions import PlanBusyError
from gategraph.runtime._storage._eventlog import BatchedEventLog, SQLiteEventLog

pytestmark = pytest.mark.timeout(120)

Opener = Callable[[], BatchedEventLog]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Opener]:
    """The backend's name, and how to open (another instance of) one log on it."""
    if request.param == "sqlite":
        path = tmp_path / "events.db"
        return str(path), lambda: SQLiteEventLog(path)
    from gategraph.runtime._storage._postgres import PostgresEventLog

    url: str = request.getfixturevalue("postgres_url")
    return url, lambda: PostgresEventLog(url)


@pytest.mark.anyio
async def test_appends_are_durable_ordered_and_readable_by_another_log(
    backend: tuple[str, Opener],
) -> None:
    _, open_log = backend
    async with open_log() as log:
        async with anyio.create_task_group() as group:
            for seq in range(1, 201):
                group.start_soon(log.append, event("p", seq))
        log.append_nowait(event("q", 1))
        await log.flush()
        # Another connection (another process, another host) sees them all now.
        async with open_log() as other:
            assert [e.seq for e in await other.read("p")] == list(range(1, 201))
            assert [e.seq for e in await other.read("p", after=198)] == [199, 200]
            assert await other.plans() == ["p", "q"]
    async with open_log() as reopened:
        events = await reopened.read("p")
        assert events[0].result.passed is True and len(events) == 200


@pytest.mark.anyio
async def test_a_plan_whose_seq_does_not_follow_is_refused_alone(
    backend: tuple[str, Opener],
) -> None:
    _, open_log = backend
    async with open_log() as log:
        await log.append(event("a", 1))
        with pytest.raises(RuntimeFault, match="event seq 1 does not follow 1"):
            await log.append(event("a", 1))
        await log.append(event("b", 1))
        await log.append(event("b", 2))
        with pytest.raises(RuntimeFault, match="does not follow"):
            await log.flush("a")
        assert [e.seq for e in await log.read("b")] == [1, 2]


@pytest.mark.anyio
async def test_a_second_writer_continues_where_the_first_stopped(
    backend: tuple[str, Opener],
) -> None:
    """A resumed plan (another process) appends after what is stored, and a seq that is
    stored already is refused: the log is never doubled."""
    _, open_log = backend
    async with open_log() as first:
        await first.append_many([event("p", 1), event("p", 2)])
    async with open_log() as second:
        await second.append(event("p", 3))
        with pytest.raises(RuntimeFault, match="does not follow 3"):
            await second.append(event("p", 2))
        assert [e.seq for e in await second.read("p")] == [1, 2, 3]


@pytest.mark.anyio
async def test_a_new_writer_asks_the_store_where_the_plan_stands(
    backend: tuple[str, Opener],
) -> None:
    """A log that never wrote the plan (another process, another host) refuses a seq the
    store already holds, from its first append."""
    _, open_log = backend
    async with open_log() as first:
        await first.append_many([event("p", 1), event("p", 2)])
    async with open_log() as fresh:
        with pytest.raises(RuntimeFault, match="event seq 2 does not follow 2"):
            await fresh.append(event("p", 2))


@pytest.mark.anyio
async def test_an_empty_log_reads_as_no_plans(backend: tuple[str, Opener]) -> None:
    """Read before anything was written (no table yet, for PostgreSQL): nothing, not an
    error; a closed log reads too, holding nothing open."""
    _, open_log = backend
    log = open_log()
    if isinstance(log, SQLiteEventLog):
        async with log:
            pass  # the file, with its table
    assert await log.plans() == []
    assert await log.read("p") == []


@pytest.mark.anyio
async def test_a_cancelled_log_still_closes_its_connection(backend: tuple[str, Opener]) -> None:
    _, open_log = backend
    log = open_log()
    with anyio.move_on_after(0.2):
        async with log:
            await log.append(event("p", 1))
            await anyio.sleep(5)
    assert log._db is None  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_a_log_must_be_opened(backend: tuple[str, Opener]) -> None:
    _, open_log = backend
    with pytest.raises(RuntimeFault, match="event log is not open: use `async with`"):
        await open_log().append(event("p", 1))


def test_one_lease_per_plan_across_logs(backend: tuple[str, Opener]) -> None:
    _, open_log = backend
    one, two = open_log(), open_log()
    with one.lease("p1"):  # type: ignore[attr-defined]
        with pytest.raises(PlanBusyError, match="plan p1 is being run by another process"):
            with two.lease("p1"):  # type: ignore[attr-defined]
                pass
        with two.lease("p2"):  # type: ignore[attr-defined]
            pass
    with two.lease("p1"):  # type: ignore[attr-defined]
        pass


def test_a_lease_whose_holder_is_killed_is_free_again(
    backend: tuple[str, Opener], tmp_path: Path
) -> None:
    """The holder is SIGKILLed with the lease held: the next one takes it at once."""
    where, open_log = backend
    opener = (
        f"SQLiteEventLog({where!r})"
        if not where.startswith("postgresql")
        else f"PostgresEventLog({where!r})"
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from gategraph.runtime._storage._eventlog import SQLiteEventLog
                from gategraph.runtime._storage._postgres import PostgresEventLog
                with {opener}.lease("p"):
                    print("held", flush=True)
                    time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(PlanBusyError):
            with open_log().lease("p"):  # type: ignore[attr-defined]
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(30)
        for _ in range(100):  # the server notices the dropped connection within moments
            try:
                with open_log().lease("p"):  # type: ignore[attr-defined]
                    break
            except PlanBusyError:
                time.sleep(0.1)
        else:
            pytest.fail("the lease stayed held after its holder was killed")
    finally:
        holder.kill()
        holder.wait(30)
        assert holder.stdout is not None
        holder.stdout.close()


@pytest.mark.anyio
async def test_a_plan_runs_on_the_log_and_its_events_read_back(
    backend: tuple[str, Opener], tmp_path: Path
) -> None:
    where, open_log = backend
    (tmp_path / "repo").mkdir()
    graph = load_graph(
        {
            "version": 1,
            "name": "on-the-log",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path / "repo")}},
            "nodes": [{"id": "syntax", "validation": "python_syntax"}],
            "lifecycle": {
                "executor": {
                    "uses": "gategraph.runtime.testing:ScriptedExecutor",
                    "arguments": {"steps": [{"files": {"a.py": "x = 1\n"}}]},
                }
            },
        }
    )
    async with open_log() as log:
        outcome = await run_plan(graph, event_log=log)
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    async with open_log() as log:
        tags = [type(e).__name__ for e in await log.read(outcome.plan_id)]
        assert await log.plans() == [outcome.plan_id]
    assert tags[0] == "PlanStarted" and tags[-1] == "PlanFinished"
    assert (tmp_path / "repo" / "a.py").read_text() == "x = 1\n"
    if where.startswith("postgresql"):
        # The round's inputs are kept in the same database: any host can read them back.
        from gategraph.runtime import ContentStore

        store = ContentStore(where)
        try:
            assert store.keeps_copies and store.pinned(outcome.plan_id)
        finally:
            store.close()


@pytest.mark.anyio
async def test_a_server_that_cannot_be_reached_is_one_line(postgres_server: str) -> None:
    import socket

    from gategraph.runtime._storage._postgres import PostgresEventLog

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://gategraph:secret@127.0.0.1:{port}/nowhere"
    with pytest.raises(ConfigError, match="cannot open the PostgreSQL event log") as caught:
        async with PostgresEventLog(url):
            pass
    shown = str(caught.value)
    assert "secret" not in shown and "\n" not in shown.strip()
    assert f"postgresql://gategraph:***@127.0.0.1:{port}/nowhere" in shown
    with pytest.raises(ConfigError, match="is not a PostgreSQL URL") as caught:
        PostgresEventLog("host=db password=hunter2")
    assert "hunter2" not in str(caught.value)


def test_a_lease_outlives_the_servers_idle_session_timeout(postgres_url: str) -> None:
    """A server that ends idle sessions after a second would end the lease's connection,
    and free the lease, while a plan waits: the lease's connection is exempt."""
    import psycopg
    from gategraph.runtime._storage._postgres import PostgresEventLog

    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET idle_session_timeout = '1s'")
    first, second = PostgresEventLog(postgres_url), PostgresEventLog(postgres_url)
    with first.lease("P1"):
        time.sleep(2.5)  # idle past the timeout
        with pytest.raises(PlanBusyError), second.lease("P1"):
            pass


@pytest.mark.anyio
async def test_taking_a_lease_never_stalls_the_event_loop() -> None:
    """A lease in a database connects first: against a server that never answers, that
    waits out the connect timeout in a worker thread while the event loop goes on."""
    import socket

    from gategraph.runtime._storage._eventlog import holding_lease
    from gategraph.runtime._storage._postgres import PostgresEventLog

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.05)

    with socket.socket() as silent:  # accepts connections, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        log = PostgresEventLog(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=2")
        async with anyio.create_task_group() as group:
            group.start_soon(tick)
            with pytest.raises(ConfigError, match="cannot open the PostgreSQL event log"):
                async with holding_lease(log, "P1"):
                    pass
            group.cancel_scope.cancel()
    assert ticks > 5  # a loop blocked by the connect would have ticked once


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@h:5/db", "postgresql://u:***@h:5/db"),
        (
            "postgresql://u@h/db?password=pw&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        ("postgresql://u:pw@[::1]:5/db", "postgresql://u:***@[::1]:5/db"),
        ("postgresql://u:pw@h1:1,h2:2/db", "postgresql://u:***@h1:1,h2:2/db"),
        ("postgresql://h/db", "postgresql://h/db"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    from gategraph.runtime._storage._postgres import shown_url

    assert shown_url(url) == shown


def test_a_url_that_cannot_be_read_shows_nothing_of_itself() -> None:
    from gategraph.runtime._storage._postgres import _secret_free, shown_url

    assert shown_url("postgresql://u:pw@[bad/db") == "postgresql://***"
    assert _secret_free("pw", "postgresql://u:pw@[bad/db") == "the URL cannot be read"
    assert _secret_free("no pw: pw", "postgresql://u:pw@h/db") == "no ***: ***"


@pytest.mark.anyio
async def test_without_the_driver_the_extra_is_named(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gategraph.runtime._storage._postgres import PostgresEventLog

    log = PostgresEventLog(postgres_url)
    assert log.url == postgres_url  # no password to hide
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what a base install looks like
    with pytest.raises(ConfigError, match=r"pip install 'gategraph\[postgres\]'"):
        async with log:
            pass


@pytest.mark.anyio
async def test_a_role_that_may_not_make_the_tables_is_told_so(postgres_url: str) -> None:
    """No table yet, and no CREATE on the schema: one line naming the reason."""
    import psycopg
    from gategraph.runtime._storage._postgres import PostgresEventLog

    role = f"reader_{os.urandom(4).hex()}"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN")
        db.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        limited = postgres_url.replace("postgres@", f"{role}@", 1)
        with pytest.raises(ConfigError, match=r"cannot use the event log's table: .*permission"):
            async with PostgresEventLog(limited):
                pass
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"DROP ROLE {role}")


@pytest.mark.anyio
async def test_a_role_that_may_not_create_tables_uses_those_there(postgres_url: str) -> None:
    """The tables made once by an owner; a role that may only read and write them (no
    CREATE on the schema, PostgreSQL 15's default) opens the log and writes."""
    import psycopg
    from gategraph.runtime._storage._postgres import PostgresEventLog

    async with PostgresEventLog(postgres_url) as owner:
        await owner.append(event("p", 1))
    role = f"writer_{os.urandom(4).hex()}"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN")
        db.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        db.execute(f"GRANT SELECT, INSERT ON event_segments TO {role}")
    try:
        limited = postgres_url.replace("postgres@", f"{role}@", 1)
        async with PostgresEventLog(limited) as log:
            await log.append(event("p", 2))
            assert [e.seq for e in await log.read("p")] == [1, 2]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"DROP OWNED BY {role}")
            db.execute(f"DROP ROLE {role}")


@pytest.fixture
def own_server(postgres_server: str) -> Iterator[tuple[str, Path]]:
    """A PostgreSQL server of the test's own (stopping it cuts no other test's
    connections): its URL and its folder."""
    from _postgres import private_server

    # Not under pytest's own temporary folder: the server's user must be able to enter it.
    folder = Path(tempfile.mkdtemp(prefix="gategraph-postgres-"))
    folder.chmod(0o755)
    try:
        with private_server(folder / "server") as url:
            yield url, folder / "server"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.anyio
async def test_a_server_lost_mid_plan_loses_no_event_and_resume_finishes_the_plan(
    own_server: tuple[str, Path], tmp_path: Path
) -> None:
    """The server stops while a validation runs (its connections cut): the run stops with
    the log's error, what was committed is a whole prefix of the plan's events, and a
    resume once the server is back continues the plan to its end, doubling nothing."""
    from _postgres import start_server, stop_server
    from gategraph.runtime import resume_plan
    from gategraph.runtime._storage._postgres import PostgresEventLog

    url, server = own_server
    repo = tmp_path / "repo"
    repo.mkdir()
    graph = load_graph(
        {
            "version": 1,
            "name": "cut",
            "resources": {"repo": {"kind": "directory", "path": str(repo)}},
            "validations": [{"name": "slow", "entrypoint": "gategraph.runtime.testing:sleeping"}],
            "nodes": [{"id": "s", "validation": "slow", "arguments": {"seconds": 2}}],
            "lifecycle": {
                "executor": {
                    "uses": "gategraph.runtime.testing:ScriptedExecutor",
                    "arguments": {"steps": [{"files": {"a.py": "x = 1\n"}}]},
                }
            },
        }
    )

    async def cut_after_a_second() -> None:
        await anyio.sleep(1)
        await anyio.to_thread.run_sync(stop_server, server)

    failed: list[Exception] = []
    async with PostgresEventLog(url) as log:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(cut_after_a_second)
                await run_plan(graph, event_log=log)
        except Exception as exc:  # the run's error, as it comes (in the task group's group)
            failed.append(exc)
    assert failed and "the event log could not be written" in repr(failed[0])
    await anyio.to_thread.run_sync(start_server, server)
    async with PostgresEventLog(url) as log:
        [plan_id] = await log.plans()
        before = [e.seq for e in await log.read(plan_id)]
        assert before == list(range(1, len(before) + 1))
        outcome = await resume_plan(plan_id, graph, event_log=log)
        assert outcome.status is PlanStatus.APPLIED, outcome.message
        after = [e.seq for e in await log.read(plan_id)]
    assert after == list(range(1, len(after) + 1)) and len(after) > len(before)
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_the_catalogs_connection_and_the_lease_listing_on_their_own(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table the catalog would make exists already: nothing runs (a role without CREATE
    uses it); a statement the server refuses is one CatalogError line; no plans asked
    about, no locks read; a server without idle_session_timeout (before 14) still holds."""
    from gategraph.runtime import CatalogError
    from gategraph.runtime._storage import _postgres
    from gategraph.runtime._storage._postgres import CatalogConnection, plan_drivers

    db = CatalogConnection(postgres_url)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS made (x INTEGER)")
        skipped = db.execute("CREATE TABLE IF NOT EXISTS made (x INTEGER)")
        assert skipped.rowcount == 0 and skipped.fetchone() is None
        assert skipped.fetchall() == [] and list(skipped) == []
        with pytest.raises(CatalogError, match=r"PostgreSQL catalog postgresql://.*nowhere"):
            db.executemany("INSERT INTO nowhere (x) VALUES (?)", [(1,), (2,)])
    finally:
        db.close()
    assert plan_drivers(postgres_url, []) == {}

    real = _postgres._connect

    def older_server(url: str, what: str = "event log", **options: object) -> object:
        connection = real(url, what, **options)
        execute = connection.execute

        def refuse_the_setting(query: str, *args: object) -> object:
            if "idle_session_timeout" in query:
                raise _postgres._driver().errors.UndefinedObject("no such parameter")
            return execute(query, *args)

        connection.execute = refuse_the_setting  # type: ignore[method-assign]
        return connection

    monkeypatch.setattr(_postgres, "_connect", older_server)
    held = _postgres._held_connection(postgres_url)
    try:
        assert held.execute("SELECT 1").fetchone() == (1,)
    finally:
        held.close()
