"""A real PostgreSQL server for the tests: ``GATEGRAPH_TEST_POSTGRES`` (a URL of a server
the tests may create databases on), or else one of their own, made with ``initdb`` in a
temporary folder and listening on a free loopback port (as the ``postgres`` user where the
tests run as root: PostgreSQL refuses to run as root). Without either, the PostgreSQL
tests skip, except where ``GATEGRAPH_REQUIRE_POSTGRES=1`` says they must run (CI)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REQUIRED = os.environ.get("GATEGRAPH_REQUIRE_POSTGRES") == "1"


def unavailable(reason: str) -> None:
    if REQUIRED:
        raise RuntimeError(f"GATEGRAPH_REQUIRE_POSTGRES=1, but {reason}")
    pytest.skip(reason)


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is not None:
        return found
    # Debian's packages, any version, the newest first.
    versions = sorted(
        Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
        reverse=True,
    )
    return str(versions[0]) if versions else None


def _run(command: list[str]) -> None:
    """Run a server program; its own error text when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr or done.stdout}")


@contextmanager
def private_server(folder: Path) -> Iterator[str]:
    """A PostgreSQL server of the tests' own in ``folder``; its superuser's URL."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        unavailable("PostgreSQL is not installed (no initdb)")
    assert initdb is not None and pg_ctl is not None
    as_user: list[str] = []
    if os.geteuid() == 0:
        # PostgreSQL refuses to run as root: as the user its package makes.
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root, and there is no postgres user to run the server as")
        if shutil.which("runuser") is None:
            unavailable("running as root, and there is no runuser to run the server as postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
        folder.mkdir(parents=True, exist_ok=True)
        shutil.chown(folder, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = folder / "data"
    _run(
        [
            *as_user,
            initdb,
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ]
    )
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c max_connections=200"
    (folder / "options").write_text(options)  # for start_server
    _run(
        [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "start"]
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=120,
        )


def stop_server(folder: Path) -> None:
    """Stop the private server in ``folder`` as a crash of its host would look to a client
    (its connections cut), keeping its data."""
    _control(folder, "stop", "-m", "fast")


def start_server(folder: Path) -> None:
    """Start the private server in ``folder`` again, on the same port and data."""
    options = (folder / "options").read_text()
    _control(folder, "start", "-o", options, "-l", str(folder / "log"))


def _control(folder: Path, action: str, *arguments: str) -> None:
    pg_ctl = _binary("pg_ctl")
    assert pg_ctl is not None
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    _run([*as_user, pg_ctl, action, "-D", str(folder / "data"), "-w", *arguments])


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A database of its own on ``server``, dropped afterwards; its URL."""
    import psycopg

    name = f"gg_{os.urandom(6).hex()}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
