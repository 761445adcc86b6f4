"""Validations that try to get round read-only, for tests/calls/test_sandbox.py.

A module on disk (not an in-memory fake): sandboxed workers import it. Each hostile
validation reports ``passed: True`` whatever happens, as an adversary would; the tests
check that it did not pass and that nothing changed. ``root`` is the repository resource.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import importlib
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

PASS: dict[str, Any] = {"passed": True, "message": "nothing to see"}


# -- honest twins: the same things done the right way pass --------------------------------


def honest(root: str, context: Any) -> dict[str, Any]:
    text = Path(root, "a.py").read_text()
    scratch = context.scratch / "notes.txt"
    scratch.write_text(text)
    copy = context.disposable_copy(root)
    out = subprocess.run(
        [sys.executable, "-c", "import pathlib; pathlib.Path('made').write_text('x'); print('ok')"],
        cwd=copy,
        capture_output=True,
        text=True,
        check=True,
    )
    print("checked", len(text), "bytes")
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    return {"passed": out.stdout.strip() == "ok" and scratch.read_text() == text}


async def honest_async(root: str) -> dict[str, Any]:
    import anyio.to_thread

    await anyio.lowlevel.checkpoint()
    text = await anyio.to_thread.run_sync(Path(root, "a.py").read_text)
    return {"passed": text.startswith("x = 1")}


def honest_sqlite(root: str) -> dict[str, Any]:
    with sqlite3.connect(os.path.join(root, "data.db")) as db:
        (count,) = db.execute("select count(*) from t").fetchone()
    return {"passed": count == 1}


def reads_env(root: str) -> dict[str, Any]:
    return {"passed": "GG_EVIL" not in os.environ and os.getcwd() != root}


def reads_artifact(root: str, artifact: Any) -> dict[str, Any]:
    return {"passed": artifact == {"files": ["a.py"]}, "message": repr(artifact)}


# -- 1. threads -------------------------------------------------------------------------------


def thread_late(root: str) -> dict[str, Any]:
    def later() -> None:
        time.sleep(0.2)
        with open(os.path.join(root, "a.py"), "w") as f:
            f.write("changed by a thread\n")

    threading.Thread(target=later, daemon=True).start()
    return PASS


def thread_forever(root: str) -> dict[str, Any]:
    def loop() -> None:
        while True:
            time.sleep(0.05)

    threading.Thread(target=loop, daemon=True).start()
    return PASS


def thread_now(root: str) -> dict[str, Any]:
    def write() -> None:
        try:
            with open(os.path.join(root, "a.py"), "w") as f:
                f.write("changed\n")
        except OSError:
            pass

    worker = threading.Thread(target=write)
    worker.start()
    worker.join()
    return PASS


async def executor_write(root: str) -> dict[str, Any]:
    def write() -> None:
        try:
            Path(root, "a.py").write_text("changed by an executor\n")
        except OSError:
            pass

    await asyncio.get_running_loop().run_in_executor(None, write)
    return PASS


# -- 2. native code -------------------------------------------------------------------------------


def ctypes_write(root: str) -> dict[str, Any]:
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fd = libc.open(os.path.join(root, "a.py").encode(), os.O_WRONLY | os.O_TRUNC)
        if fd >= 0:
            libc.write(fd, b"native\n", 7)
        libc.unlink(os.path.join(root, "a.py").encode())
    except OSError:
        pass
    return PASS


def defeats_guard_then_native(root: str) -> dict[str, Any]:
    """Switch the in-process guard off, then unlink natively and ignore the error code:
    only the kernel stands in the way."""
    from gategraph.runtime._calls import _readonly

    _readonly._PROCESS_JUDGES.clear()
    _readonly._process_lease[0] = None
    ctypes.CDLL(None).unlink(os.path.join(root, "a.py").encode())
    return PASS


# -- 3. sqlite ------------------------------------------------------------------------------


def sqlite_insert(root: str) -> dict[str, Any]:
    with sqlite3.connect(os.path.join(root, "data.db")) as db:
        db.execute("insert into t values (2)")
    return PASS


def sqlite_new(root: str) -> dict[str, Any]:
    with sqlite3.connect(os.path.join(root, "new.db")) as db:
        db.execute("create table x (a)")
    return PASS


def sqlite_event_log(root: str, log: str = "") -> dict[str, Any]:
    """Find any SQLite connection in this process (the runtime's, in-process) through the
    garbage collector, and the log's file by its path: delete the events."""
    found = [o for o in gc.get_objects() if isinstance(o, sqlite3.Connection)]
    for connection in [*found, sqlite3.connect(log)]:
        tables = connection.execute("select name from sqlite_master where type = 'table'")
        for (table,) in tables.fetchall():
            connection.execute(f"delete from {table}")
        connection.commit()
    return {"passed": True, "data": {"connections": len(found)}}


# -- 4. network --------------------------------------------------------------------------------


def connects(root: str, port: int = 0) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"leak")
    return PASS


def fetches(root: str, port: int = 0) -> dict[str, Any]:
    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
    return PASS


def udp(root: str, port: int = 0) -> dict[str, Any]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"leak", ("127.0.0.1", port))
    return PASS


# -- 5. commands -------------------------------------------------------------------------------


def command_writes_absolute(root: str, context: Any) -> dict[str, Any]:
    target = os.path.join(root, "a.py")
    subprocess.run(
        ["sh", "-c", f"echo changed > '{target}'"],
        cwd=context.scratch,
        check=True,
        capture_output=True,
    )
    return PASS


def command_left_running(root: str, context: Any, marker: str = "") -> dict[str, Any]:
    subprocess.Popen(
        ["sh", "-c", f"sleep 600 # {marker}"],
        cwd=context.scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return PASS


def command_new_session(root: str, context: Any, marker: str = "") -> dict[str, Any]:
    subprocess.Popen(
        ["sh", "-c", f"sleep 600 # {marker}"], cwd=context.scratch, start_new_session=True
    )
    return PASS


# -- 6. special files and links ---------------------------------------------------------------


def fifo(root: str) -> dict[str, Any]:
    import posix  # the module itself: the guard's wrapper of os.mkfifo is not on it

    posix.mkfifo(os.path.join(root, "pipe"))
    return PASS


def node(root: str) -> dict[str, Any]:
    import posix

    posix.mknod(os.path.join(root, "node"), 0o600 | 0o100000)
    return PASS


def hard_link(root: str, context: Any) -> dict[str, Any]:
    import posix

    inside = os.path.join(context.scratch, "link.py")
    posix.link(os.path.join(root, "a.py"), inside)
    with open(inside, "w") as f:
        f.write("changed through a link\n")
    return PASS


# -- 7. the artifact --------------------------------------------------------------------------


def mutates_artifact(root: str, artifact: Any) -> dict[str, Any]:
    artifact["files"].append("evil.py")
    return PASS


# -- 8. process state -------------------------------------------------------------------------


def sets_env(root: str) -> dict[str, Any]:
    os.environ["GG_EVIL"] = "1"
    return PASS


def sets_env_natively(root: str) -> dict[str, Any]:
    ctypes.CDLL(None).setenv(b"GG_EVIL", b"1", 1)
    return PASS


def changes_directory(root: str) -> dict[str, Any]:
    os.chdir(root)
    return PASS


# -- 9. the guard itself ------------------------------------------------------------------------


def patches_guard(root: str) -> dict[str, Any]:
    from gategraph.runtime._calls import _readonly

    _readonly._process_lease[0] = None
    _readonly._current.set(None)
    importlib.reload(_readonly)
    with open(os.path.join(root, "a.py"), "w") as f:
        f.write("changed with the guard off\n")
    return PASS


# -- 10. signals -------------------------------------------------------------------------------


def kills_itself(root: str) -> dict[str, Any]:
    import signal

    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    return PASS


def kills_parent(root: str, target: int = 0) -> dict[str, Any]:
    """Signal gategraph (``target``), or the call's own worker (its parent)."""
    import signal

    os.kill(target or os.getppid(), signal.SIGTERM)
    return PASS


def exits(root: str) -> dict[str, Any]:
    os._exit(3)


# -- limits -------------------------------------------------------------------------------------


def big_memory(root: str) -> dict[str, Any]:
    blob = bytearray(16 << 30)
    return {"passed": len(blob) > 0}


def big_file(root: str, context: Any) -> dict[str, Any]:
    with open(context.scratch / "big", "wb") as f:
        f.write(b"\0" * (4 << 20))
    return PASS


def chatty(root: str) -> dict[str, Any]:
    for i in range(20000):
        print(f"line {i}")
    return PASS


def sleeps(root: str, context: Any, marker: str = "") -> dict[str, Any]:
    subprocess.Popen(["sh", "-c", f"sleep 600 # {marker}"], cwd=context.scratch)
    time.sleep(30)
    return PASS


def not_plain_data(root: str) -> dict[str, Any]:
    return {"passed": True, "data": {"path": Path(root)}}


def sees_secrets(root: str) -> dict[str, Any]:
    """Look for the parent's secrets: in this environment, and in the parent's."""
    mine = "GG_SECRET" in os.environ
    with open(f"/proc/{os.getppid()}/environ", "rb") as f:
        theirs = b"GG_SECRET" in f.read()
    return {"passed": True, "data": {"mine": mine, "theirs": theirs}}


def sees_no_secrets(root: str) -> dict[str, Any]:
    return {"passed": "GG_SECRET" not in os.environ and "PATH" in os.environ}


def starts_and_waits(root: str, context: Any, marker: str = "") -> dict[str, Any]:
    """Start a long command, say so on stdout, then wait: the test kills gategraph."""
    subprocess.Popen(["sh", "-c", f"sleep 600 # {marker}"], cwd=context.scratch)
    time.sleep(60)
    return PASS


def fails(root: str) -> dict[str, Any]:
    return {"passed": False, "message": "an honest failure"}


def forges_answers(root: str) -> dict[str, Any]:
    """Write answers of its own into every pipe it can write, passing for itself and for
    whichever call the worker runs next."""
    import fcntl
    import stat
    import struct

    import msgspec
    from gategraph.runtime._calls._sandbox_worker import Answer

    forged = {"ok": True, "value": {"passed": True, "message": "forged"}}
    frame = msgspec.msgpack.encode(Answer("done", "any", forged, True))
    for fd in range(3, 256):
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_WRONLY:
                continue
            for _ in range(3):
                os.write(fd, struct.pack(">I", len(frame)) + frame)
        except OSError:
            continue
    return {"passed": False, "message": "the real answer"}


def sibling(root: str) -> dict[str, Any]:
    """clone(CLONE_PARENT): a child that would be the worker's sibling, outside it (the
    guard switched off first: the kernel is what refuses)."""
    from gategraph.runtime._calls import _readonly

    _readonly._PROCESS_JUDGES.clear()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pid = libc.syscall(56, 0x8000 | 17, 0, 0, 0, 0)  # x86-64 clone, CLONE_PARENT|SIGCHLD
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone refused")
    return PASS


def memfd(root: str) -> dict[str, Any]:
    fd = os.memfd_create("hoard")
    os.ftruncate(fd, 1 << 20)
    return PASS


def sysv(root: str) -> dict[str, Any]:
    from gategraph.runtime._calls import _readonly

    _readonly._PROCESS_JUDGES.clear()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(0x5EED, 4096, 0o1666) < 0:
        raise OSError(ctypes.get_errno(), "shmget refused")
    return PASS


def forges_a_bad_outcome(root: str) -> dict[str, Any]:
    """An answer that decodes as MessagePack but is no outcome."""
    import fcntl
    import stat
    import struct

    import msgspec

    frame = msgspec.msgpack.encode(["done", "x", {"ok": "yes"}, True])
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and (
                fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            ):
                os.write(fd, struct.pack(">I", len(frame)) + frame)
        except OSError:
            continue
    return PASS


# -- file metadata, locks, disk, processes, namespaces -----------------------------------------


def command_changes_metadata(root: str, context: Any) -> dict[str, Any]:
    """chmod, timestamps, ownership and an extended attribute of a repository file, from
    a command (the guard does not see inside one), each failure ignored."""
    target = os.path.join(root, "a.py")
    own = os.path.join(context.scratch, "own.py")
    Path(own).write_text("mine\n")
    codes = {
        what: subprocess.run(command, cwd=context.scratch, capture_output=True).returncode
        for what, command in (
            ("chmod", ["chmod", "777", target]),
            ("touch", ["touch", "-d", "2000-01-01", target]),
            ("chown", ["chown", f"{os.getuid() + 1}", target]),
            ("own", ["chmod", "600", own]),  # its own file: allowed
        )
    }
    return {"passed": True, "data": codes}


def native_metadata(root: str) -> dict[str, Any]:
    """The same natively, the guard switched off: only the kernel stands in the way."""
    from gategraph.runtime._calls import _readonly

    _readonly._PROCESS_JUDGES.clear()
    _readonly._process_lease[0] = None
    libc = ctypes.CDLL(None, use_errno=True)
    target = os.path.join(root, "a.py").encode()
    found = {
        "chmod": libc.chmod(target, 0o777),
        "utimes": libc.utimes(target, None),
        "setxattr": libc.setxattr(target, b"user.gategraph", b"x", 1, 0),
    }
    return {"passed": True, "data": found}


def locks_the_log(root: str, log: str = "") -> dict[str, Any]:
    """Take a read lock on the event log's shared-memory file (and the log itself), which
    would stall the run's writer, then hold it past the call."""
    import fcntl
    import stat

    seen = {}
    for suffix in ("", "-wal", "-shm"):
        path = log + suffix
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            seen[suffix or "db"] = f"cannot open: {exc.strerror}"
            continue
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0)
        seen[suffix or "db"] = "device" if stat.S_ISCHR(os.fstat(fd).st_mode) else "file"
    return {"passed": True, "data": seen}


def fills_the_disk(root: str, context: Any) -> dict[str, Any]:
    """Write 1 MiB at a time into scratch until the disk is full."""
    written = 0
    chunk = b"x" * (1 << 20)
    with open(os.path.join(context.scratch, "fill"), "wb") as f:
        while written < (64 << 20):
            f.write(chunk)
            f.flush()
            written += len(chunk)
    return {"passed": True, "data": {"written": written}}


def new_namespace(root: str, context: Any) -> dict[str, Any]:
    """A user namespace of its own (where it would hold every capability), natively and
    with the unshare command; remounting the repository writable."""
    libc = ctypes.CDLL(None, use_errno=True)
    found = {
        "unshare": libc.unshare(0x10000000 | 0x00020000),
        "unshare_errno": ctypes.get_errno(),
        "mount": libc.mount(None, os.fsencode(root), None, 32 | 4096, None),  # MS_REMOUNT|MS_BIND
        "command": subprocess.run(
            ["unshare", "--user", "--map-root-user", "true"],
            cwd=context.scratch,
            capture_output=True,
            check=False,
        ).returncode,
    }
    return {"passed": True, "data": found}


SEEN: list[Any] = []
LOADED_IN = os.getpid()


def remembers(root: str, artifact: Any) -> dict[str, Any]:
    """Keep every artifact it sees in the module, as code that would carry one plan's data
    into another's verdict would."""
    SEEN.append(artifact)
    return {"passed": True, "data": {"seen": list(SEEN), "loaded_in": LOADED_IN}}


def locks_the_leases(root: str, log: str = "") -> dict[str, Any]:
    """Lock every plan's lease file beside the log (which would refuse other plans)."""
    import fcntl

    folder = log + ".locks"
    names = sorted(os.listdir(folder))
    for name in names:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return {"passed": True, "data": {"leases": names}}


def locks_the_journal(root: str) -> dict[str, Any]:
    """Lock the journal of the resource folder (an apply into it would wait for it)."""
    import fcntl

    journal = os.path.join(root, ".gategraph-journal")
    names = sorted(os.listdir(journal))
    for name in names:
        fd = os.open(os.path.join(journal, name), os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return {"passed": True, "data": {"journal": names}}
