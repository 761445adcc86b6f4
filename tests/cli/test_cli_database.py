"""One setting moves everything into PostgreSQL (`--db`, `GATEGRAPH_DATABASE`, `database:`
in config.yaml), and a plan is then started, answered and applied from different hosts:
here, processes with homes and temporary folders of their own on one database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_process
from _plans import GOOD, plan, repo
from gategraph.runtime import ConfigError
from gategraph.runtime._storage._database import CONFIG_FILE, DATABASE_ENV, configured_database

APPROVAL = "policy:\n  approval:\n    rules: [{match: 'syn*', action: require, tier: high}]\n"


def host(tmp_path: Path, name: str, database: str | None) -> dict[str, str]:
    """The environment of one "host": its own gategraph folder and temporary folder."""
    (tmp_path / name / "tmp").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GATEGRAPH_HOME": str(tmp_path / name / "home"),
        "TMPDIR": str(tmp_path / name / "tmp"),
    }
    env.pop(DATABASE_ENV, None)
    if database is not None:
        env[DATABASE_ENV] = database
    return env


def gategraph(env: dict[str, str], *args: str, cwd: Path | None = None) -> Any:
    return run_process([sys.executable, "-m", "gategraph.runtime._cli", *args], env=env, cwd=cwd)


def start(
    env: dict[str, str], *args: str, out: Path, stdout: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a command in the background, what it prints in ``out`` (its standard output
    in ``stdout`` instead, when given)."""
    with open(out, "wb") as sink:
        printed = open(stdout, "wb") if stdout is not None else None
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "gategraph.runtime._cli", *args],
                env=env,
                stdout=printed or sink,
                stderr=sink if printed else subprocess.STDOUT,
            )
        finally:
            if printed is not None:
                printed.close()


@contextmanager
def background(
    env: dict[str, str], *args: str, out: Path, stdout: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A command running in the background for the block (see :func:`start`), killed at
    its end if it still runs."""
    runner = start(env, *args, out=out, stdout=stdout)
    try:
        yield runner
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()


def waiting(out: Path, process: subprocess.Popen[bytes]) -> str:
    """The plan id once the process says it waits on it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith("waiting for plan "):
                return line.split()[3]
        assert process.poll() is None, text
        time.sleep(0.05)
    raise AssertionError(out.read_text())


def approval_graph(tmp_path: Path) -> tuple[Path, Path]:
    root = repo(tmp_path)
    graph = tmp_path / "plan.yaml"
    graph.write_text(plan(root, [GOOD]) + APPROVAL)
    return root, graph


# -- choosing the database ---------------------------------------------------------------------


def test_the_database_comes_from_the_flag_the_environment_or_config_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--db, then GATEGRAPH_DATABASE, then `database:` in config.yaml in gategraph's folder;
    none of them: the SQLite files. A value that is not a PostgreSQL URL is one line naming
    where it came from, never echoing it (it may hold a password)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("GATEGRAPH_HOME", str(home))
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    assert configured_database() is None
    config = home / CONFIG_FILE
    config.write_text("database: postgresql://ci@db.internal/plans\n")
    assert configured_database() == "postgresql://ci@db.internal/plans"
    monkeypatch.setenv(DATABASE_ENV, "postgres://env@db/one")
    assert configured_database() == "postgres://env@db/one"
    assert configured_database("postgresql://flag@db/two") == "postgresql://flag@db/two"
    monkeypatch.setenv(DATABASE_ENV, "sqlite:///secret-password")
    with pytest.raises(ConfigError) as caught:
        configured_database()
    assert str(caught.value) == (
        "GATEGRAPH_DATABASE: not a PostgreSQL URL: write postgresql://USER@HOST:PORT/DATABASE"
    )
    monkeypatch.delenv(DATABASE_ENV)
    for text, problem in [
        ("database: mysql://u:hunter2@h/d\n", "1:11: database: not a PostgreSQL URL"),
        (
            "databse: postgresql://h/d\n",
            "1:1: databse: unknown setting: the one setting is database",
        ),
        ("- database\n", "1:1: must be a mapping of settings"),
    ]:
        config.write_text(text)
        with pytest.raises(ConfigError) as caught:
            configured_database()
        assert str(caught.value).startswith(f"{config}:{problem}"), str(caught.value)
        assert "hunter2" not in str(caught.value)
    for empty in ["", "# nothing set yet\n", "database:\n", "database: ''\n"]:
        config.write_text(empty)
        assert configured_database() is None


def test_the_commands_say_what_is_wrong_with_the_setting(tmp_path: Path) -> None:
    env = host(tmp_path, "a", None)
    bad = gategraph({**env, DATABASE_ENV: "nonsense"}, "plans")
    assert bad.returncode == 2
    assert bad.stderr == (
        "error: GATEGRAPH_DATABASE: not a PostgreSQL URL: write "
        "postgresql://USER@HOST:PORT/DATABASE\n"
    )
    both = gategraph(env, "--catalog", str(tmp_path / "c.db"), "--db", "postgresql://h/d", "plans")
    assert both.returncode == 2 and "the catalog is in the database" in both.stderr
    down = gategraph(env, "--db", "postgresql://u:hunter2@127.0.0.1:9/none", "plans")
    assert down.returncode == 2 and down.stdout == ""
    assert down.stderr.startswith("error: postgresql://u:***@127.0.0.1:9/none: cannot open")
    assert "hunter2" not in down.stderr and "Traceback" not in down.stderr
    # Nothing that needs no database reads the setting.
    assert gategraph({**env, DATABASE_ENV: "nonsense"}, "--version").returncode == 0


# -- many hosts, one plan ----------------------------------------------------------------------


def test_a_plan_started_on_a_killed_host_is_approved_on_another_and_applied_on_a_third(
    tmp_path: Path, postgres_url: str
) -> None:
    """Host A runs the plan and waits for the approval; A is SIGKILLed while it waits.
    Host B (another home) records the approval; host C (another home and temporary
    folder: none of A's sandboxes) resumes the plan and applies it, with B's answer."""
    root, graph = approval_graph(tmp_path)
    a, b, c = (host(tmp_path, name, postgres_url) for name in "abc")
    out = tmp_path / "a.out"
    runner = start(a, "run", str(graph), "--wait", out=out)
    try:
        plan_id = waiting(out, runner)
        listed = json.loads(gategraph(b, "plans", "--json").stdout)
        assert [(p["plan_id"], p["status"]) for p in listed] == [(plan_id, "awaiting_approval")]
        assert listed[0]["host"].endswith(f" {runner.pid}")  # A drives it: its lease says so
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    assert not (root / "src" / "greet.py").exists()

    recorded = gategraph(b, "approve", plan_id, "--approve", "--record-only", "--note", "from B")
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.startswith(f"recorded for plan {plan_id}: approve;")
    second = gategraph(b, "approve", plan_id, "--deny", "--record-only")
    assert second.returncode == 1 and "the first answer stands" in second.stderr

    done = gategraph(c, "resume", plan_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "applied"
    assert f"plan {plan_id}: continuing with the answer given from" in done.stderr
    assert (
        root / "src" / "greet.py"
    ).read_text() == "def greet(name):\n    return 'hello ' + name\n"
    events = json.loads(gategraph(b, "events", plan_id, "--json").stdout)
    decided = [e for e in events if e["type"] == "approval_decided"]
    assert len(decided) == 1 and decided[0]["note"] == "from B"
    assert [e["type"] for e in events].count("apply_completed") == 1
    replayed = gategraph(b, "replay", plan_id)
    assert replayed.returncode == 0 and "all match" in replayed.stdout
    assert not list((tmp_path / "c" / "home").glob("sandboxes/*"))  # applied: discarded
    again = gategraph(c, "resume", plan_id)
    assert again.returncode == 0 and (root / "src" / "greet.py").exists()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_approval_from_another_process_wakes_the_one_that_waits(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """`run --wait` holds the paused plan; `approve` elsewhere keeps the answer for it and
    returns at once, and the waiting process continues the plan and applies it."""
    database = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    root, graph = approval_graph(tmp_path)
    a = host(tmp_path, "a", database)
    b = a if database is None else host(tmp_path, "b", database)
    out, document = tmp_path / "a.out", tmp_path / "a.json"
    with background(a, "run", str(graph), "--wait", "--json", out=out, stdout=document) as runner:
        plan_id = waiting(out, runner)
        busy = gategraph(b, "resume", plan_id)
        assert busy.returncode == 1 and "being run by another process" in busy.stderr
        answered = gategraph(b, "approve", plan_id, "--approve")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith(f"answered plan {plan_id}: approve;")
        assert runner.wait(timeout=120) == 0, out.read_text()
    said = out.read_text()
    assert f"plan {plan_id}: answered approve from" in said
    assert f"plan {plan_id}: applied" in said
    # One JSON document: the outcome the plan ended with, not the pause before it.
    assert json.loads(document.read_text())["status"] == "applied"
    assert (root / "src" / "greet.py").exists()


def test_commands_show_the_same_plan_the_same_way_on_both_backends(
    tmp_path: Path, postgres_url: str
) -> None:
    """The same plan run on SQLite and on PostgreSQL: `plans`, `show`, `events`, `replay`
    and `report` say the same of it (ids, times and where it ran aside)."""

    def views(backend: str, database: str | None) -> dict[str, Any]:
        folder = tmp_path / backend
        _root, graph = approval_graph(folder)
        env = host(folder, "a", database)
        ran = gategraph(
            env, "run", str(graph), "--auto-approve", "--plan-id", "01JQ3K8W2V6Y0C7D9E4F5G6H7J"
        )
        assert ran.returncode == 0, ran.stderr
        plan_id = "01JQ3K8W2V6Y0C7D9E4F5G6H7J"
        listed = json.loads(gategraph(env, "plans", "--json").stdout)
        shown = json.loads(gategraph(env, "show", plan_id, "--json").stdout)
        events = json.loads(gategraph(env, "events", plan_id, "--json").stdout)
        report = folder / "r.html"
        assert gategraph(env, "report", plan_id, "--html", str(report)).returncode == 0
        return {
            "plans": [(p["name"], p["status"], p["rounds"]) for p in listed],
            "show": (
                shown["status"],
                shown["verdict"]["verdict"],
                [(f["status"], f["reasoning"]) for f in shown["verdict"]["findings"]],
                [(c["status"], c["reasoning"]) for c in shown["criteria"]],
                shown["changes"],
            ),
            "events": [e["type"] for e in events],
            "replay": gategraph(env, "replay", plan_id).stdout,
            "report": "+def greet(name):" in report.read_text(),
            "taken": gategraph(env, "run", str(graph), "--plan-id", plan_id).stderr.split(" in ")[
                0
            ],
        }

    sqlite, postgres = views("sqlite", None), views("postgres", postgres_url)
    for key in sqlite:
        assert sqlite[key] == postgres[key], key


def test_a_read_only_database_is_one_line_for_each_command(
    tmp_path: Path, postgres_url: str
) -> None:
    """A server that takes no writes (a standby, a database set read-only): the plan, the
    catalog and an answer each say so in one line, and nothing is left half done."""
    import psycopg

    _root, graph = approval_graph(tmp_path)
    env = host(tmp_path, "a", postgres_url)
    paused = gategraph(env, "run", str(graph), "--plan-id", "01JQ3K8W2V6Y0C7D9E4F5G6H7J")
    assert paused.returncode == 3, paused.stderr
    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
    tool = tmp_path / "tool.yaml"
    tool.write_text("name: mytool\ncode: |\n  def run(**kw):\n      return {'passed': True}\n")
    for args, said in [
        (["run", str(graph)], "error: the event log could not be written: cannot execute"),
        (["tool", "add", "--config", str(tool)], "error: PostgreSQL catalog postgresql://"),
        (
            ["approve", "01JQ3K8W2V6Y0C7D9E4F5G6H7J", "--approve", "--record-only"],
            "error: postgresql://",
        ),
    ]:
        done = gategraph(env, *args)
        assert done.returncode in (1, 2), (args, done.stderr)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith(said), (args, done.stderr)
        assert "read-only" in errors[0] and "Traceback" not in done.stderr, errors
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("SET default_transaction_read_only = off")
        admin.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    listed = json.loads(gategraph(env, "plans", "--json").stdout)
    assert [p["status"] for p in listed] == ["awaiting_approval"]  # the plan is as it was


def test_ctrl_c_while_waiting_leaves_the_plan_paused(tmp_path: Path, postgres_url: str) -> None:
    _root, graph = approval_graph(tmp_path)
    a = host(tmp_path, "a", postgres_url)
    out = tmp_path / "a.out"
    with background(a, "run", str(graph), "--wait", out=out) as runner:
        plan_id = waiting(out, runner)
        runner.send_signal(signal.SIGINT)
        assert runner.wait(timeout=60) == 3, out.read_text()
    assert f"stopped waiting: plan {plan_id} stays awaiting_approval" in out.read_text()
    listed = json.loads(gategraph(a, "plans", "--json").stdout)
    assert [p["status"] for p in listed] == ["awaiting_approval"]
    held = gategraph(a, "resume", plan_id)  # nobody holds it: shown, still paused
    assert held.returncode == 3, held.stderr


def test_an_outside_validators_attestation_wakes_a_plan_that_waits_for_it(
    tmp_path: Path, postgres_url: str
) -> None:
    """`run --wait` on a plan that waits for an outside validator: the attestation, made
    through the catalog in the same database from anywhere, wakes it, and it applies."""
    from _helpers import VALIDATOR, attestation
    from gategraph.runtime import Catalog, register_validator, validator_ac_pull, validator_attest

    root = repo(tmp_path)
    graph = tmp_path / "plan.yaml"
    graph.write_text(plan(root, [GOOD], outside_validators=1))
    a = host(tmp_path, "a", postgres_url)
    out = tmp_path / "a.out"
    with background(a, "run", str(graph), "--wait", out=out) as runner:
        plan_id = waiting(out, runner)
        with Catalog.open(postgres_url) as catalog:
            acs = validator_ac_pull(plan_id, evidence=catalog)["acs"]
            eve = {"credential": register_validator("validator-eve", evidence=catalog)}
            done = validator_attest(VALIDATOR, attestation(plan_id, acs), evidence=catalog, **eve)
            assert done["ok"], done
        assert runner.wait(timeout=120) == 0, out.read_text()
    said = out.read_text()
    assert f"plan {plan_id}: an outside validator gave a verdict; continuing" in said
    assert (root / "src" / "greet.py").exists()


def test_the_first_answer_stands_and_a_waiting_process_sees_the_plan_move_on(
    tmp_path: Path, postgres_url: str
) -> None:
    """A plain `approve` after another answer was recorded is refused (the first stands);
    the same answer goes on. A process that waits on a plan another one continued stops
    waiting, and shows where the plan stands; one whose connection is cut says so and
    leaves the plan paused."""
    import psycopg

    root, graph = approval_graph(tmp_path)
    a, b = host(tmp_path, "a", postgres_url), host(tmp_path, "b", postgres_url)
    paused = gategraph(a, "run", str(graph), "--plan-id", "01JQ3K8W2V6Y0C7D9E4F5G6H7J")
    assert paused.returncode == 3, paused.stderr
    plan_id = "01JQ3K8W2V6Y0C7D9E4F5G6H7J"
    assert gategraph(b, "approve", plan_id, "--deny", "--record-only").returncode == 0
    other = gategraph(b, "approve", plan_id, "--approve")
    assert other.returncode == 1 and "deny, given from" in other.stderr
    assert not (root / "src" / "greet.py").exists()

    # A waiter whose database connection is cut: one line, the plan stays paused.
    out = tmp_path / "cut.out"
    with background(a, "resume", plan_id, "--wait", out=out) as runner:
        # (It continues with the recorded deny at once: wait on a fresh pause instead.)
        assert runner.wait(timeout=120) == 1, out.read_text()
    assert "continuing with the answer given from" in out.read_text()

    second = tmp_path / "second"
    _root2, graph2 = approval_graph(second)
    paused = gategraph(a, "run", str(graph2), "--plan-id", "01JQ3K8W2V6Y0C7D9E4F5G6H7K")
    assert paused.returncode == 3, paused.stderr
    with background(a, "resume", "01JQ3K8W2V6Y0C7D9E4F5G6H7K", "--wait", out=out) as runner:
        waiting(out, runner)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE 'gategraph %'"
                " AND query NOT LIKE '%pg_try_advisory_lock%'"
            )
        assert runner.wait(timeout=120) == 3, out.read_text()
    assert "stopped waiting (the connection to postgresql://" in out.read_text()

    # A waiter whose plan another process continued: it stops waiting and shows it.
    with background(a, "resume", "01JQ3K8W2V6Y0C7D9E4F5G6H7K", "--wait", out=out) as runner:
        waiting(out, runner)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(  # its lease dropped by the server: nobody holds the plan
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE 'gategraph %'"
                " AND query LIKE '%pg_try_advisory_lock%'"
            )
        done = gategraph(b, "approve", "01JQ3K8W2V6Y0C7D9E4F5G6H7K", "--approve")
        assert done.returncode == 0, done.stderr
        assert runner.wait(timeout=120) == 0, out.read_text()
    assert "another process continued it" in out.read_text()


def test_the_validator_tools_find_plans_in_the_configured_database(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gategraph.runtime import Catalog, load_graph, run_plan_sync, validator_ac_pull

    root = repo(tmp_path)
    with Catalog.open(postgres_url) as catalog:
        outcome = run_plan_sync(
            load_graph(plan(root, [GOOD], outside_validators=1)),
            catalog=catalog,
            event_log=postgres_url,
        )
    assert outcome.status.value == "awaiting_attestation"
    monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv(DATABASE_ENV, postgres_url)
    pulled = validator_ac_pull(outcome.plan_id)
    assert pulled["ok"] and [a["alias"] for a in pulled["acs"]] == ["AC1"]
