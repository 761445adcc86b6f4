"""Work tools for tests/calls/test_sandbox_work.py: a module on disk, which sandboxed workers
import. Each changes the candidate (its ``root`` folder) and tries one thing more."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any


def edits(root: str, outside: str = "") -> dict[str, Any]:
    """Changes the candidate, honestly, and tries to write ``outside`` it."""
    Path(root, "added.py").write_text("y = 2\n")
    Path(root, "a.py").write_text("x = 2\n")
    os.makedirs(Path(root, "pkg", "deep"))
    os.rename(Path(root, "added.py"), Path(root, "pkg", "deep", "moved.py"))
    os.chmod(Path(root, "pkg", "deep", "moved.py"), 0o600)
    refused = ""
    if outside:
        try:
            Path(outside).write_text("escaped")
        except OSError as exc:
            refused = exc.strerror or str(exc)
    return {"refused": refused, "pid": os.getpid(), "worker": os.getppid()}


def through_a_link(root: str) -> dict[str, Any]:
    """Writes through a link in the candidate that points out of it (the agent's own)."""
    try:
        Path(root, "link", "written").write_text("escaped")
    except OSError as exc:
        return {"refused": exc.strerror or str(exc)}
    return {"refused": ""}


def hard_links_out(root: str, target: str) -> dict[str, Any]:
    """Links a file from outside into the candidate, to write it from there later."""
    try:
        os.link(target, Path(root, "linked"))
    except OSError as exc:
        return {"refused": exc.strerror or str(exc)}
    return {"refused": ""}


def detaches(root: str, marker: str) -> str:
    """Starts a process meant to outlive the call (to act on the plan later)."""
    subprocess.Popen(
        ["sh", "-c", f"sleep 600 # {marker}"],
        start_new_session=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return "started"


def connects(root: str) -> str:
    """Opens an internet socket."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"
    return "opened"


def reads_memory(notes: Any) -> str:
    """Tries to change a memory resource (a mapping no call changes)."""
    notes["new"] = "text"
    return "changed"


HOOK_TARGET = Path(__file__).with_name("hook-escaped.txt")


def hook_writes() -> None:
    """A setup hook that writes outside everything it was given."""
    HOOK_TARGET.write_text("escaped")


HOOK_FOLDER = Path(__file__).with_name("hook-folder")


def hook_writes_its_folder() -> None:
    """A setup hook that prepares the folder its tool's node is given (a hook has no
    arguments: it knows the folder by name)."""
    (HOOK_FOLDER / "prepared-by-hook.txt").write_text("prepared")


def hook_says() -> None:
    print(f"hook in {os.getpid()}")


def moves_in_scratch(root: str, context: Any) -> dict[str, Any]:
    """A validation that moves a file into another folder of its scratch (as atomic
    writes and build tools do): honest, so it passes."""
    scratch = Path(context.scratch)
    (scratch / "sub").mkdir()
    (scratch / "f").write_text("x")
    os.rename(scratch / "f", scratch / "sub" / "f")
    os.link(scratch / "sub" / "f", scratch / "g")
    return {"passed": True}


def counts(root: str) -> dict[str, Any]:
    """A read-only tool a validation wraps: what its transform judges."""
    return {"count": len(os.listdir(root)), "pid": os.getpid()}


def writes_descriptor(root: str, fd: int) -> str:
    """Writes to a descriptor gategraph's own process had open (a file outside)."""
    try:
        os.write(fd, b"escaped")
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"
    return "written"


def replaces_with_link(root: str, name: str, target: str) -> str:
    """Replaces the folder ``name`` in the candidate by a link to ``target`` (a later
    node's folder, when resources nest)."""
    import shutil

    shutil.rmtree(Path(root, name))
    os.symlink(target, Path(root, name))
    return "replaced"


def makes_set_uid(root: str) -> str:
    """Makes a program in the candidate that runs with its owner's rights."""
    import shutil

    target = Path(root, "helper")
    shutil.copy("/bin/true", target)
    os.chmod(target, 0o6755)
    return oct(os.stat(target).st_mode & 0o7777)


def writes_under(root: str, rel: str) -> str:
    """Writes a file at ``rel`` in its folder (gategraph's own files, when its home is
    there)."""
    try:
        Path(root, rel).write_text("mine now")
    except OSError as exc:
        return f"refused: {exc.strerror or exc}"
    return "written"
