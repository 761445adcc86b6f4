"""A validation's network: refused unless it declares ``network: true``, by the in-process
guard and by the sandbox's kernel alike (docs/readonly.md, docs/isolation.md).

Every test stays on the loopback: a listener on 127.0.0.1 that must not hear a refused
connection, and hears the one a declaration allows.
"""

from __future__ import annotations

import json
import socket
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from gategraph.runtime import ReadOnlyViolationError
from gategraph.runtime._base._kernel import support
from gategraph.runtime._calls._readonly import Guard, guarded
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on the loopback that never blocks: ``accept`` says whether anyone
    connected (BlockingIOError: no one did)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def port_of(server: socket.socket) -> int:
    return int(server.getsockname()[1])


def heard(server: socket.socket) -> bool:
    """Whether a connection is waiting (a refused connect never sent a packet)."""
    try:
        connection, _ = server.accept()
    except BlockingIOError:
        return False
    connection.close()
    return True


# -- the guard ---------------------------------------------------------------------------------


def test_a_connection_is_refused_and_never_made(listener: socket.socket) -> None:
    """connect, create_connection and urllib: refused before a packet leaves; recorded."""
    guard = Guard("validation 'v'")
    address = ("127.0.0.1", port_of(listener))
    with guarded(guard):
        with socket.socket() as sock, pytest.raises(ReadOnlyViolationError, match="network"):
            sock.connect(address)
        with pytest.raises(ReadOnlyViolationError, match="network: true"):
            socket.create_connection(address, timeout=10)
        with pytest.raises(urllib.error.URLError) as caught:
            urllib.request.urlopen(f"http://127.0.0.1:{address[1]}/", timeout=10)
        assert isinstance(caught.value.reason, ReadOnlyViolationError)
    assert not heard(listener)
    assert guard.violation is not None and "socket.connect" in guard.violation


def test_datagrams_and_lookups_are_refused() -> None:
    """sendto and looking a name up are the network too; an address written out and the
    local host's name ask no one, and binding an address sends nothing."""
    guard = Guard("validation 'v'")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.setblocking(False)
        with guarded(guard):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                with pytest.raises(ReadOnlyViolationError, match="sendto"):
                    sender.sendto(b"x", receiver.getsockname())
            with pytest.raises(ReadOnlyViolationError, match=r"looking up 'example\.invalid'"):
                socket.getaddrinfo("example.invalid", 80)
            with pytest.raises(ReadOnlyViolationError, match="gethostbyname"):
                socket.gethostbyname("example.invalid")
            with pytest.raises(ReadOnlyViolationError, match="gethostbyaddr"):
                socket.gethostbyaddr("192.0.2.1")
            assert socket.getaddrinfo("127.0.0.1", 80)
            assert socket.getaddrinfo("localhost", 80)
            with socket.socket() as server:
                server.bind(("127.0.0.1", 0))
        with pytest.raises(BlockingIOError):
            receiver.recv(1)
    assert guard.violation is not None


def test_looking_up_the_machines_own_name_is_refused() -> None:
    """``socket.getfqdn()`` looks the machine's own name up (the resolver may ask a
    server): refused, and recorded though getfqdn catches the error and falls back.
    ``socket.gethostname()`` asks no one."""
    if socket.gethostname().lower() in ("", "localhost", "localhost.", "ip6-localhost"):
        pytest.skip("this machine is named localhost: looking it up asks no one")
    guard = Guard("validation 'v'")
    with guarded(guard):
        assert socket.gethostname()
        assert guard.violation is None
        socket.getfqdn()
    assert guard.violation is not None and "looking up" in guard.violation


def test_a_declared_network_is_open_while_the_call_runs(listener: socket.socket) -> None:
    """network=True: the connection is made and heard; once the call has ended, code it
    left running is refused the network like everything else."""
    import contextvars

    guard = Guard("validation 'v'", network=True)
    address = ("127.0.0.1", port_of(listener))
    with guarded(guard):
        with socket.create_connection(address, timeout=10):
            pass
        assert socket.getaddrinfo("localhost", 80)
        left_behind = contextvars.copy_context()
    assert heard(listener)
    with pytest.raises(ReadOnlyViolationError, match="has ended"):
        left_behind.run(socket.create_connection, address, 10)
    assert not heard(listener)
    assert guard.network and guard.violation is None


def test_a_transform_never_reaches_the_network(listener: socket.socket) -> None:
    """A transform is pure: no declaration opens the network to it."""
    guard = Guard("transform of 'v'", pure=True, network=True)
    assert not guard.network
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="transform"):
        socket.create_connection(("127.0.0.1", port_of(listener)), timeout=10)
    assert not heard(listener)


def test_the_declaration_cannot_be_granted_through_the_guard() -> None:
    """The guard a validation is handed has no way to declare the network afterwards."""
    guard = Guard("validation 'v'")
    with pytest.raises(AttributeError):
        guard.network = True  # type: ignore[misc]
    with pytest.raises(AttributeError):
        object.__setattr__(guard, "_network", True)
    assert not guard.network


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")
def test_a_unix_socket_is_not_the_network(tmp_path: Path) -> None:
    """Connecting to a Unix socket by its path leaves the machine never: not refused."""
    path = str(tmp_path / "s.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        guard = Guard("validation 'v'")
        with guarded(guard), socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
    assert guard.violation is None


# -- the declaration, from a graph -------------------------------------------------------------


def connects(port: int, **_: Any) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"hi")
    return {"passed": True}


async def connects_async(port: int, **_: Any) -> dict[str, Any]:
    return connects(port)


CONNECTS = textwrap.dedent("""
    import socket

    def run(port, **_):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"hi")
        return {"passed": True}
    """)


def network_graph(isolation: str, *, network: bool, entrypoint: str | None, port: int) -> Any:
    where = (
        f'entrypoint: "{entrypoint}"' if entrypoint is not None else f"code: {json.dumps(CONNECTS)}"
    )
    text = (
        "version: 1\nname: network\n"
        f"validations:\n  - {{name: v, {where}, network: {str(network).lower()}}}\n"
        f"nodes: [{{id: n, validation: v, isolation: {isolation}, arguments: {{port: {port}}}}}]\n"
    )
    return load_graph(text)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("isolation", "function"),
    [("inline", "connects_async"), ("thread", "connects"), ("process", None)],
)
async def test_a_graph_declares_the_network(
    monkeypatch: pytest.MonkeyPatch, listener: socket.socket, isolation: str, function: str | None
) -> None:
    """``network: true`` in the graph: the call connects. Without it the call fails as a
    read-only violation, and the listener hears nothing. (A worker process loads inline
    code: a module of this test exists only here.)"""
    module = fake_module(
        monkeypatch, "network_tools", connects=connects, connects_async=connects_async
    )
    entrypoint = f"{module}:{function}" if function is not None else None
    port = port_of(listener)
    refused = await execute_graph(
        network_graph(isolation, network=False, entrypoint=entrypoint, port=port)
    )
    result = refused.validations[0].result
    assert result.data.get("error") == "read_only_violation", result
    assert "network: true" in result.message
    assert not heard(listener)
    allowed = await execute_graph(
        network_graph(isolation, network=True, entrypoint=entrypoint, port=port)
    )
    assert allowed.validations[0].result.passed, allowed.validations[0].result
    assert heard(listener)


# -- the sandbox -------------------------------------------------------------------------------

# The guard inside the worker lifted, as code written to defeat it would: what is left is
# the kernel's doing.
DEFEATS_THE_GUARD = textwrap.dedent("""
    import socket

    def run(port, **_):
        from gategraph.runtime._calls._readonly import LEASE
        LEASE.set([])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(b"hi")
        except OSError as exc:
            return {"passed": False, "message": f"{type(exc).__name__}: {exc}"}
        return {"passed": True, "message": "connected"}
    """)


def sandboxed_graph(code: str, *, network: bool, port: int) -> Any:
    text = (
        "version: 1\nname: sandboxed-network\n"
        f"validations:\n  - {{name: v, code: {json.dumps(code)}, network: {str(network).lower()}}}\n"
        f"nodes: [{{id: n, validation: v, isolation: sandbox, arguments: {{port: {port}}}}}]\n"
    )
    return load_graph(text)


sandbox_only = pytest.mark.skipif(
    support().missing is not None, reason=f"no sandbox here: {support().missing}"
)


@sandbox_only
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_the_sandbox_honours_the_declaration(listener: socket.socket) -> None:
    """In the sandbox: without the declaration, the kernel refuses the socket itself (the
    error the validation raises is its own); with it the connection is made."""
    port = port_of(listener)
    done = await execute_graph(sandboxed_graph(CONNECTS, network=False, port=port))
    record = done.validations[0]
    assert record.enforced_by == "kernel"
    assert record.result.data.get("exception_type") == "PermissionError", record.result
    assert not heard(listener)
    done = await execute_graph(sandboxed_graph(CONNECTS, network=True, port=port))
    assert done.validations[0].result.passed, done.validations[0].result
    assert heard(listener)


@sandbox_only
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_the_kernel_refuses_the_network_a_defeated_guard_lets_through(
    listener: socket.socket,
) -> None:
    """With the guard lifted inside the worker, the kernel still refuses a socket to a
    validation that does not declare the network, and lets one that does connect."""
    port = port_of(listener)
    done = await execute_graph(sandboxed_graph(DEFEATS_THE_GUARD, network=False, port=port))
    result = done.validations[0].result
    assert not result.passed and "Permission" in result.message, result
    assert not heard(listener)
    done = await execute_graph(sandboxed_graph(DEFEATS_THE_GUARD, network=True, port=port))
    assert done.validations[0].result.passed, done.validations[0].result
    assert heard(listener)


# -- the declaration, recorded -----------------------------------------------------------------

DECLARES = """\
version: 1
name: declares
resources: {repo: {kind: directory, path: repo}}
validations:
  - name: fetches
    network: true
    resource_slots: [root]
    code: |
      def run(root):
          return {"passed": True}
  - name: reads
    resource_slots: [root]
    code: |
      def run(root):
          return {"passed": True}
nodes:
  - {id: online, validation: fetches, isolation: thread}
  - {id: offline, validation: reads, isolation: thread}
"""


def test_a_declared_network_is_recorded_everywhere_a_record_is_shown(tmp_path: Path) -> None:
    """What a validation was let do beyond reading is recorded: the run's table, its JSON,
    the JUnit and SARIF reports, `gategraph show` and the HTML report (from the event log)
    all say which call declared the network, and only that one."""
    from _helpers import run_gategraph

    (tmp_path / "repo").mkdir()
    (tmp_path / "plan.yaml").write_text(DECLARES, encoding="utf-8")
    home = tmp_path / "home"
    table = run_gategraph(
        home, "run", "plan.yaml", "--auto-approve", "--report", "junit", "j.xml", cwd=tmp_path
    )
    assert table.returncode == 0, table.stderr
    [online] = [line for line in table.stdout.splitlines() if line.lstrip().startswith("online")]
    [offline] = [line for line in table.stdout.splitlines() if line.lstrip().startswith("offline")]
    assert "network declared" in online and "network declared" not in offline
    junit = (tmp_path / "j.xml").read_text(encoding="utf-8")
    assert junit.count('name="network" value="declared"') == 1
    shown = run_gategraph(
        home,
        "run",
        "plan.yaml",
        "--auto-approve",
        "--json",
        "--report",
        "sarif",
        "s.sarif",
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    records = {r["node"]: r for r in json.loads(shown.stdout)["validations"]}
    assert records["online"]["network"] is True and records["offline"]["network"] is False
    sarif = json.loads((tmp_path / "s.sarif").read_text(encoding="utf-8"))
    properties = [r["properties"] for r in sarif["runs"][0]["results"]]
    assert all("network" in p for p in properties)
    plan_id = json.loads(shown.stdout)["plan_id"]
    view = run_gategraph(home, "show", plan_id, "--json", cwd=tmp_path)
    assert view.returncode == 0, view.stderr
    calls = {c["node"]: c for c in json.loads(view.stdout)["timeline"][-1]["validations"]}
    assert calls["online"]["network"] is True and calls["offline"]["network"] is False
    report = run_gategraph(home, "report", plan_id, "--html", "r.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r.html").read_text(encoding="utf-8").count("network declared") == 1


# As urllib3 does when it is imported: a socket made and bound to learn whether the
# machine has IPv6, the refusal caught.
PROBES_AS_IT_LOADS = textwrap.dedent("""
    import socket

    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
        HAS_IPV6 = True
    except OSError:
        HAS_IPV6 = False

    def run(port, **_):
        return {"passed": True, "data": {"ipv6": HAS_IPV6}}
    """)


@sandbox_only
@pytest.mark.timeout(120)
@pytest.mark.anyio
async def test_a_library_that_probes_with_a_socket_as_it_loads_still_passes(
    listener: socket.socket,
) -> None:
    """Making a socket sends nothing: a module that probes with one at import and carries
    on without it (urllib3, and so requests) loads and passes in the sandbox, the network
    undeclared."""
    done = await execute_graph(
        sandboxed_graph(PROBES_AS_IT_LOADS, network=False, port=port_of(listener))
    )
    record = done.validations[0]
    assert record.result.passed, record.result
    assert record.result.data["ipv6"] is False  # the kernel refused the socket
    assert not heard(listener)
