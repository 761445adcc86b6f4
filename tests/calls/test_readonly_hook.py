"""The read-only guard's audit hook, judged event by event (seed 000, "Read-Only Enforcement").

tests/calls/test_readonly.py and tests/calls/test_readonly_hostile.py attempt real operations; here the
hook is called with each event it judges, as CPython would call it, so every decision (allow,
refuse and record, refuse without blame) is pinned with the arguments that lead to it.
"""

from __future__ import annotations

import contextvars
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import write_tree
from gategraph.runtime import ReadOnlyViolationError
from gategraph.runtime._calls import _readonly as readonly
from gategraph.runtime._calls._readonly import Guard, allow, guarded

EVERYTHING = 0o777


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A call's scratch folder (what ``allow`` lets it write), with one file in it."""
    return write_tree(tmp_path / "scratch", {"own.txt": "mine\n"})


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A resource folder the call may read but not change, with one file in it."""
    return write_tree(tmp_path / "resource", {"a.py": "x = 1\n"})


def validation(scratch: Path | None = None, *, pure: bool = False) -> Guard:
    guard = Guard("transform of 'v'" if pure else "validation 'v'", pure=pure)
    if scratch is not None:
        allow(guard, scratch)
    return guard


def allowed(guard: Guard, event: str, *args: Any) -> bool:
    """Call the hook with ``event`` under ``guard``; True if it let the operation through."""
    with guarded(guard):
        try:
            readonly._hook(event, args)
        except ReadOnlyViolationError:
            return False
    return True


def refusal(guard: Guard, event: str, *args: Any) -> str:
    """Call the hook, which must refuse; return its message."""
    with guarded(guard), pytest.raises(ReadOnlyViolationError) as caught:
        readonly._hook(event, args)
    return str(caught.value)


# -- outside a guarded call -------------------------------------------------------------------


def test_without_a_lease_the_hook_judges_nothing(outside: Path) -> None:
    """Code that is not a guarded call is never refused, whatever it does."""
    readonly._hook("open", (str(outside / "a.py"), "w", os.O_WRONLY))
    readonly._hook("os.remove", (str(outside / "a.py"), -1))
    readonly._hook("os.system", (b"rm -rf /",))


def test_events_the_guard_does_not_judge_pass(outside: Path) -> None:
    """Reads, stats and events outside the table pass under a guard too."""
    guard = validation()
    assert allowed(guard, "os.listdir", str(outside))
    assert allowed(guard, "os.scandir", str(outside))
    assert allowed(guard, "import", "json", None, [], None, None)
    assert guard.violation is None


# -- open -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "flags"),
    [
        ("w", None),
        ("a", None),
        ("x", None),
        ("r+", None),
        ("wb", None),
        (None, os.O_WRONLY),
        (None, os.O_RDWR),
        (None, os.O_CREAT),
        (None, os.O_APPEND),
        (None, os.O_TRUNC),
    ],
)
def test_open_for_writing_outside_scratch_is_refused_and_recorded(
    outside: Path, scratch: Path, mode: str | None, flags: int | None
) -> None:
    """Any mode or flag that writes is a violation, recorded with the file it names."""
    guard = validation(scratch)
    target = str(outside / "a.py")
    message = refusal(guard, "open", target, mode, flags)
    assert message == f"validation 'v' is read-only: opening {target!r} for writing refused"
    assert guard.violation == f"opening {target!r} for writing"


@pytest.mark.parametrize(("mode", "flags"), [("r", None), ("rb", None), (None, os.O_RDONLY)])
def test_open_for_reading_passes(outside: Path, mode: str | None, flags: int | None) -> None:
    """Reading a resource is what a validation is for."""
    guard = validation()
    assert allowed(guard, "open", str(outside / "a.py"), mode, flags)
    assert guard.violation is None


def test_open_for_writing_in_scratch_passes(scratch: Path) -> None:
    """The call's scratch folder is its own: new files and existing ones, str or bytes."""
    guard = validation(scratch)
    assert allowed(guard, "open", str(scratch / "own.txt"), "w", None)
    assert allowed(guard, "open", os.fsencode(scratch / "new.txt"), None, os.O_CREAT)
    assert allowed(guard, "open", str(scratch / "deeper" / "new.txt"), "a", None)
    assert allowed(guard, "open", os.devnull, "w", None)
    assert guard.violation is None


def test_scratch_is_matched_by_folder_not_by_prefix(tmp_path: Path, scratch: Path) -> None:
    """A sibling folder whose name starts like scratch's is not scratch."""
    sibling = tmp_path / "scratch-evil"
    sibling.mkdir()
    guard = validation(scratch)
    assert not allowed(guard, "open", str(sibling / "x"), "w", None)
    assert not allowed(guard, "open", str(scratch / ".." / "resource" / "a.py"), "w", None)


def test_a_symlink_in_scratch_to_a_resource_is_judged_by_its_target(
    scratch: Path, outside: Path
) -> None:
    """Writing through a link in scratch writes the file it points to: refused."""
    (scratch / "link.py").symlink_to(outside / "a.py")
    guard = validation(scratch)
    assert not allowed(guard, "open", str(scratch / "link.py"), "w", None)
    assert guard.violation is not None and "link.py" in guard.violation


def test_a_relative_path_is_refused_even_when_it_resolves_into_scratch(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event does not carry os.open's dir_fd, so a relative name could mean any folder."""
    monkeypatch.chdir(scratch)
    guard = validation(scratch)
    assert not allowed(guard, "open", "own.txt", "w", None)
    assert guard.violation == "opening 'own.txt' for writing"
    assert allowed(guard, "open", "own.txt", "r", None)


def test_a_bytecode_cache_write_is_refused_without_blame(outside: Path) -> None:
    """The import system ignores a failed cache write: refused, but not the call's fault."""
    guard = validation()
    cache = str(outside / "__pycache__" / "a.cpython-311.pyc")
    assert refusal(guard, "open", cache, None, os.O_WRONLY | os.O_CREAT) == (
        "bytecode cache writes are off while guarded"
    )
    assert guard.violation is None


def test_a_descriptor_of_a_pipe_may_be_opened_for_writing() -> None:
    """A pipe holds no resource's data (a command's stdin=PIPE opens one this way)."""
    read_end, write_end = os.pipe()
    try:
        guard = validation()
        assert allowed(guard, "open", write_end, "wb", None)
        assert guard.violation is None
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_descriptor_of_a_resource_file_may_not_be_opened_for_writing(
    outside: Path, scratch: Path
) -> None:
    """A descriptor is judged by the file it refers to, and named with it."""
    fd = os.open(outside / "a.py", os.O_RDONLY)
    own = os.open(scratch / "own.txt", os.O_RDONLY)
    try:
        guard = validation(scratch)
        assert allowed(guard, "open", own, "w", None)
        message = refusal(guard, "open", fd, "w", None)
    finally:
        os.close(fd)
        os.close(own)
    target = os.path.realpath(outside / "a.py")
    assert message == (
        f"validation 'v' is read-only: opening descriptor {fd} ({target!r}) for writing refused"
    )


def test_a_descriptor_that_is_not_open_changes_nothing() -> None:
    """A closed or impossible descriptor is let through: open() itself fails on it."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    guard = validation()
    assert allowed(guard, "open", fd, "w", None)
    assert allowed(guard, "open", 1 << 70, "w", None)
    assert guard.violation is None


def test_a_descriptor_of_a_deleted_file_may_be_written(outside: Path) -> None:
    """A file no folder names any more (deleted, or anonymous) is no resource's."""
    path = outside / "gone.txt"
    path.write_text("soon gone")
    fd = os.open(path, os.O_RDONLY)
    path.unlink()
    try:
        guard = validation()
        assert allowed(guard, "open", fd, "w", None)
    finally:
        os.close(fd)


def test_a_descriptor_of_a_resource_folder_is_refused_for_changes(outside: Path) -> None:
    """A folder's descriptor (fchmod, say) is a stored file like any other."""
    fd = os.open(outside, os.O_RDONLY)
    try:
        guard = validation()
        assert not allowed(guard, "os.chmod", fd, EVERYTHING, -1)
    finally:
        os.close(fd)
    assert guard.violation is not None and guard.violation.startswith(
        f"os.chmod on descriptor {fd}"
    )


# -- paths changed by os and shutil -----------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("os.remove", ("{out}/a.py", -1)),
        ("os.rmdir", ("{out}", -1)),
        ("os.mkdir", ("{out}/d", EVERYTHING, -1)),
        ("os.mkfifo", ("{out}/fifo", EVERYTHING, -1)),
        ("os.chmod", ("{out}/a.py", EVERYTHING, -1)),
        ("os.chown", ("{out}/a.py", 0, 0, -1)),
        ("os.rename", ("{out}/a.py", "{scratch}/stolen.py", -1, -1)),
        ("os.rename", ("{scratch}/own.txt", "{out}/planted.txt", -1, -1)),
        ("os.symlink", ("{scratch}/own.txt", "{out}/link", -1)),
        ("os.truncate", ("{out}/a.py", 0)),
        ("os.utime", ("{out}/a.py", None, None, -1)),
        ("os.chflags", ("{out}/a.py", 0, True)),
        ("os.lchflags", ("{out}/a.py", 0)),
        ("os.setxattr", ("{out}/a.py", "user.x", b"1", 0, True)),
        ("os.removexattr", ("{out}/a.py", "user.x", True)),
        ("shutil.rmtree", ("{out}", None)),
        ("shutil.chown", ("{out}/a.py", "root", "root")),
    ],
)
def test_every_file_system_change_outside_scratch_is_refused(
    outside: Path, scratch: Path, event: str, args: tuple[Any, ...]
) -> None:
    """Each event of the table refuses a path outside scratch and records it by name."""
    real = {"out": os.path.realpath(outside), "scratch": os.path.realpath(scratch)}
    filled = tuple(a.format(**real) if isinstance(a, str) else a for a in args)
    guard = validation(scratch)
    message = refusal(guard, event, *filled)
    assert guard.violation is not None
    assert guard.violation.startswith(f"{event} on {real['out']!r}".rstrip("'"))
    assert message == f"validation 'v' is read-only: {guard.violation} refused"


@pytest.mark.parametrize(
    ("event", "args"),
    [
        ("os.remove", ("{s}/own.txt", -1)),
        ("os.mkdir", ("{s}/d", EVERYTHING, -1)),
        ("os.chmod", ("{s}/own.txt", EVERYTHING, -1)),
        ("os.chmod", ("{s}/not-yet.txt", EVERYTHING, -1)),
        ("os.rename", ("{s}/own.txt", "{s}/moved.txt", -1, -1)),
        ("os.symlink", ("/etc/passwd", "{s}/points-out", -1)),
        ("os.truncate", ("{s}/own.txt", 0)),
        ("os.utime", ("{s}/own.txt", None, None, -1)),
        ("shutil.rmtree", ("{s}", None)),
        ("os.mknod", ("{s}/node", stat.S_IFREG | 0o600, 0, -1)),
    ],
)
def test_file_system_changes_inside_scratch_pass(
    scratch: Path, event: str, args: tuple[Any, ...]
) -> None:
    """Scratch may be changed at will; a symlink only points, it is judged where it is made."""
    filled = tuple(a.format(s=scratch) if isinstance(a, str) else a for a in args)
    guard = validation(scratch)
    assert allowed(guard, event, *filled)
    assert guard.violation is None


def test_a_path_relative_to_a_folder_descriptor_is_judged_in_that_folder(
    outside: Path, scratch: Path
) -> None:
    """shutil.rmtree removes by names relative to open folders: the folder decides."""
    into_scratch = os.open(scratch, os.O_RDONLY)
    into_resource = os.open(outside, os.O_RDONLY)
    closed = os.open(os.devnull, os.O_RDONLY)
    os.close(closed)
    try:
        guard = validation(scratch)
        assert allowed(guard, "os.remove", "own.txt", into_scratch)
        assert allowed(guard, "os.rmdir", "sub", into_scratch)
        assert not allowed(guard, "os.remove", "a.py", into_resource)
        assert guard.violation == "os.remove on 'a.py'"
        # A folder descriptor that cannot be told: no way to know where the name is.
        assert not allowed(validation(scratch), "os.remove", "own.txt", closed)
    finally:
        os.close(into_scratch)
        os.close(into_resource)


def test_a_relative_path_without_a_folder_is_judged_from_the_working_directory(
    scratch: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dir_fd -1 means "none": the name is resolved against the working directory."""
    monkeypatch.chdir(outside)
    guard = validation(scratch)
    assert not allowed(guard, "os.remove", "a.py", -1)
    monkeypatch.chdir(scratch)
    assert allowed(validation(scratch), "os.remove", "own.txt", -1)


def test_a_path_of_no_known_shape_is_refused(scratch: Path) -> None:
    """A target that is neither a path nor a descriptor cannot be judged: refused."""
    guard = validation(scratch)
    message = refusal(guard, "os.remove", 3.5, -1)
    assert message == "validation 'v' is read-only: os.remove on 3.5 refused"


def test_changing_a_file_that_shares_its_data_outside_scratch_is_refused(
    scratch: Path, outside: Path
) -> None:
    """A hard link made before the call shares the resource's data: its scratch name is
    no licence to write it."""
    shared = scratch / "shared.py"
    os.link(outside / "a.py", shared)
    guard = validation(scratch)
    assert not allowed(guard, "open", str(shared), "w", None)
    assert not allowed(guard, "os.chmod", str(shared), EVERYTHING, -1)
    assert not allowed(guard, "os.truncate", str(shared), 0)
    # Entries only (the link itself) may change: removing scratch's name leaves the data.
    assert allowed(guard, "os.remove", str(shared), -1)
    fd = os.open(shared, os.O_RDONLY)
    try:
        assert not allowed(guard, "open", fd, "w", None)
    finally:
        os.close(fd)


def test_a_block_device_is_never_a_scratch_file() -> None:
    """A block device's data is a disk, wherever its node is."""
    lease = [validation(), True]
    device = os.stat_result((stat.S_IFBLK | 0o600, 1, 1, 1, 0, 0, 0, 0, 0, 0))
    regular = os.stat_result((stat.S_IFREG | 0o600, 1, 1, 1, 0, 0, 0, 0, 0, 0))
    linked = os.stat_result((stat.S_IFREG | 0o600, 1, 1, 2, 0, 0, 0, 0, 0, 0))
    folder = os.stat_result((stat.S_IFDIR | 0o700, 1, 1, 5, 0, 0, 0, 0, 0, 0))
    assert readonly._shares_data(lease, device)
    assert not readonly._shares_data(lease, regular)
    assert readonly._shares_data(lease, linked)  # a name the call did not make
    assert not readonly._shares_data(lease, folder)


# -- links --------------------------------------------------------------------------------------


def test_hard_links_are_judged_at_both_ends(scratch: Path, outside: Path) -> None:
    """A link may not be made outside scratch, nor bring a resource file into it."""
    guard = validation(scratch)
    message = refusal(guard, "os.link", str(scratch / "own.txt"), str(outside / "b.py"), -1, -1)
    assert f"os.link to {str(outside / 'b.py')!r}" in message
    guard = validation(scratch)
    refusal(guard, "os.link", str(outside / "a.py"), str(scratch / "a.py"), -1, -1)
    assert (
        guard.violation == f"hard-linking {str(outside / 'a.py')!r} (outside scratch) into scratch"
    )


def test_a_hard_link_within_scratch_keeps_both_names_writable(scratch: Path) -> None:
    """Linking scratch's own file inside scratch is recorded, so writing either name
    afterwards (the inode now has two names) is still the call's own business."""
    guard = validation(scratch)
    own, second = scratch / "own.txt", scratch / "second.txt"
    assert allowed(guard, "os.link", str(own), str(second), -1, -1)
    os.link(own, second)  # what the call then does
    assert os.stat(own).st_nlink == 2
    assert allowed(guard, "open", str(second), "w", None)
    assert allowed(guard, "open", str(own), "r+", None)
    # A third name for the same inode is recorded too.
    assert allowed(guard, "os.link", str(second), str(scratch / "third.txt"), -1, -1)
    assert guard.violation is None
    # Another guard never saw the link being made: for it the file is shared.
    assert not allowed(validation(scratch), "open", str(second), "w", None)


def test_hard_links_relative_to_folder_descriptors(scratch: Path) -> None:
    """os.link(src, dst, src_dir_fd=…, dst_dir_fd=…) is judged in those folders."""
    folder = os.open(scratch, os.O_RDONLY)
    try:
        guard = validation(scratch)
        assert allowed(guard, "os.link", "own.txt", "again.txt", folder, folder)
        # A source that is not there: the link fails by itself.
        assert allowed(guard, "os.link", "missing.txt", "other.txt", folder, folder)
    finally:
        os.close(folder)
    assert guard.violation is None


def test_a_link_event_without_folder_descriptors_is_judged_by_its_paths(scratch: Path) -> None:
    """The two-argument form (no descriptors) is judged the same way."""
    guard = validation(scratch)
    assert allowed(guard, "os.link", str(scratch / "own.txt"), str(scratch / "copy.txt"))


# -- device nodes -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [stat.S_IFBLK, stat.S_IFCHR])
def test_a_device_node_is_refused_even_in_scratch(scratch: Path, kind: int) -> None:
    """A device node is a window onto a device, wherever it is made."""
    guard = validation(scratch)
    target = str(scratch / "dev")
    message = refusal(guard, "os.mknod", target, kind | 0o600, os.makedev(8, 0), -1)
    assert guard.violation == f"os.mknod of a device at {target!r}"
    assert message.endswith("refused")


def test_a_node_outside_scratch_is_refused(outside: Path, scratch: Path) -> None:
    """A plain node (a FIFO, a file) outside scratch is a change like any other."""
    guard = validation(scratch)
    refusal(guard, "os.mknod", str(outside / "fifo"), stat.S_IFIFO | 0o600, 0, -1)
    assert guard.violation is not None and guard.violation.startswith("os.mknod on")


# -- commands ------------------------------------------------------------------------------------


def test_a_command_runs_only_in_a_disposable_copy(scratch: Path, outside: Path) -> None:
    """subprocess.Popen is let through with a working directory in scratch, no other."""
    guard = validation(scratch)
    argv = [sys.executable, "-c", "pass"]
    assert allowed(guard, "subprocess.Popen", sys.executable, argv, str(scratch), None)
    assert guard.violation is None
    message = refusal(guard, "subprocess.Popen", sys.executable, argv, str(outside), None)
    assert "outside a disposable copy" in message
    assert repr(" ".join(argv)) in message
    guard = validation(scratch)
    refusal(guard, "subprocess.Popen", "/bin/sh", "echo hi", None, None)
    assert guard.violation is not None and guard.violation.startswith("running 'echo hi' outside")


def test_a_transform_may_run_no_command_at_all(scratch: Path) -> None:
    """A transform is pure (seed 000, Constraints): not even in scratch."""
    guard = validation(scratch, pure=True)
    message = refusal(guard, "subprocess.Popen", "/bin/true", ["/bin/true"], str(scratch), None)
    assert (
        message
        == "transform of 'v' is read-only: running '/bin/true' (a transform must be pure) refused"
    )


def test_a_command_with_no_arguments_is_still_named(scratch: Path) -> None:
    """An empty or missing argv is described, not a crash of the hook."""
    guard = validation(scratch)
    refusal(guard, "subprocess.Popen", None, None, None, None)
    assert guard.violation is not None and guard.violation.startswith("running ''")


@pytest.mark.parametrize(
    ("event", "args", "recorded"),
    [
        ("os.system", (b"touch /tmp/x",), "os.system 'touch /tmp/x'"),
        ("os.exec", ("/bin/sh", ["sh"], None), "os.exec '/bin/sh'"),
        ("os.posix_spawn", ("/bin/sh", ["sh"], {}), "os.posix_spawn '/bin/sh'"),
        ("os.spawn", (os.P_WAIT, "/bin/sh", ["sh"], None), "os.spawn '/bin/sh'"),
        ("os.fork", (), "os.fork"),
        ("os.forkpty", (), "os.forkpty"),
    ],
)
def test_commands_that_take_no_working_directory_are_refused(
    scratch: Path, event: str, args: tuple[Any, ...], recorded: str
) -> None:
    """exec, spawn, system and fork cannot be held to a copy: always refused."""
    guard = validation(scratch)
    refusal(guard, event, *args)
    assert guard.violation == recorded


def test_changing_the_working_directory_is_refused(scratch: Path) -> None:
    """The working directory is the whole process's, scratch included."""
    guard = validation(scratch)
    message = refusal(guard, "os.chdir", str(scratch))
    assert f"changing the working directory to {str(scratch)!r}" in message
    guard = validation(scratch)
    refusal(guard, "os.chdir")
    assert guard.violation is not None and guard.violation.startswith(
        "changing the working directory to ?"
    )


# -- network and environment ---------------------------------------------------------------------


@pytest.mark.parametrize("event", ["socket.connect", "socket.sendto", "socket.sendmsg"])
def test_network_is_refused_unless_declared(event: str) -> None:
    """A validation reaches the network only if it declares it; a transform never."""
    sock, address = object(), ("127.0.0.1", 9)
    guard = validation()
    refusal(guard, event, sock, address)
    assert guard.violation == (
        f"network access ({event} to ('127.0.0.1', 9)) (a validation that uses the network "
        "declares `network: true`)"
    )
    assert allowed(Guard("validation 'v'", network=True), event, sock, address)
    guard = Guard("transform of 'v'", pure=True, network=True)
    refusal(guard, event, sock, address)
    assert guard.violation == f"network access ({event}) in a transform"


def test_binding_an_internet_address_is_refused_to_transforms_only() -> None:
    """Binding sends nothing: a validation may (libraries probe the loopback); a transform
    may not."""
    assert allowed(validation(), "socket.bind", object(), ("127.0.0.1", 0))
    guard = validation(pure=True)
    refusal(guard, "socket.bind", object(), ("127.0.0.1", 0))
    assert guard.violation == "network access (socket.bind) in a transform"


@pytest.mark.parametrize(
    ("event", "args"), [("os.putenv", (b"HOME", b"/x")), ("os.unsetenv", (b"HOME",))]
)
def test_the_environment_is_refused_to_every_guarded_call(
    event: str, args: tuple[Any, ...]
) -> None:
    """The environment is the whole process's: no validation may change it (its commands
    get theirs with ``env=``), and a transform is told it is a transform."""
    guard = validation()
    refusal(guard, event, *args)
    assert guard.violation == (
        "changing the environment variable 'HOME' (it is the whole process's; pass env= to "
        "the command instead)"
    )
    guard = validation(pure=True)
    refusal(guard, event, *args)
    assert guard.violation == "changing the environment variable 'HOME' in a transform"
    guard = validation(pure=True)
    refusal(guard, event)
    assert guard.violation == "changing the environment variable ? in a transform"


# -- the record and the lease ------------------------------------------------------------------


def test_the_first_violation_is_the_one_recorded(outside: Path) -> None:
    """Later refusals are refused too, but the record keeps the first."""
    guard = validation()
    with guarded(guard):
        for event, args in (
            ("os.remove", (str(outside / "a.py"), -1)),
            ("os.system", ("true",)),
            ("os.chdir", ("/",)),
        ):
            with pytest.raises(ReadOnlyViolationError):
                readonly._hook(event, args)
    assert guard.violation == f"os.remove on {str(outside / 'a.py')!r}"


def test_an_ended_lease_refuses_everything_and_blames_no_one(scratch: Path) -> None:
    """Code a call left behind (it runs in a context copied during the call) is refused
    once the call has ended, even in what was its scratch, and the record stays clean."""
    guard = validation(scratch)
    with guarded(guard):
        left_behind = contextvars.copy_context()
    for event, args in (
        ("open", (str(scratch / "own.txt"), "w", None)),
        ("os.mkdir", (str(scratch / "later"), EVERYTHING, -1)),
        ("subprocess.Popen", ("/bin/true", ["/bin/true"], str(scratch), None)),
    ):
        with pytest.raises(ReadOnlyViolationError) as caught:
            left_behind.run(readonly._hook, event, args)
        assert str(caught.value).startswith("validation 'v' has ended: ")
        assert "it came from code the call left running" in str(caught.value)
    assert guard.violation is None
    # Reading is still fine: nothing is changed by it.
    left_behind.run(readonly._hook, "open", (str(scratch / "own.txt"), "r", None))


def test_an_operation_the_hook_cannot_judge_is_refused_saying_why() -> None:
    """The judge's own error never breaks the operation with a TypeError: it is refused."""
    guard = validation()
    message = refusal(guard, "open", "only-a-path")
    assert "open (it could not be judged: ValueError:" in message
    assert guard.violation is not None and guard.violation.startswith("open (it could not")
    guard = validation()
    refusal(guard, "subprocess.Popen", "too", "few")
    assert guard.violation is not None and "could not be judged" in guard.violation


# -- messages ------------------------------------------------------------------------------------


class Unprintable:
    def __fspath__(self) -> str:
        raise RuntimeError("no path")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class Wordy:
    def __repr__(self) -> str:
        return "w" * 1000


def test_a_target_is_shown_whatever_it_is() -> None:
    """A message never raises: a path, bytes, a long repr cut short, or the type's name."""
    assert readonly._show("/a/b") == "'/a/b'"
    assert readonly._show(b"/a/b") == "'/a/b'"
    assert readonly._show(Wordy()) == "w" * 200
    assert readonly._show(Unprintable()) == "<Unprintable>"


def test_a_descriptor_is_described_with_its_file_when_it_can_be_told(outside: Path) -> None:
    """ "descriptor N ('/path')" for an open file, "descriptor N" for one that is not."""
    fd = os.open(outside / "a.py", os.O_RDONLY)
    try:
        assert readonly._describe_target(fd) == (
            f"descriptor {fd} ({os.path.realpath(outside / 'a.py')!r})"
        )
    finally:
        os.close(fd)
    assert readonly._describe_target(fd) == f"descriptor {fd}"
    assert readonly._fd_path(-1) is None


def test_a_guard_shows_what_it_guards_and_what_it_recorded(outside: Path, scratch: Path) -> None:
    """The repr names the call, its purity and its record; allowed folders end in a separator."""
    guard = validation(scratch, pure=True)
    assert guard.allowed == (os.path.realpath(scratch) + os.sep,)
    assert repr(guard) == "Guard(\"transform of 'v'\", pure=True, violation=None)"
    refusal(guard, "os.remove", str(outside / "a.py"), -1)
    assert repr(guard) == (f"Guard(\"transform of 'v'\", pure=True, violation={guard.violation!r})")
    assert Guard("validation 'w'").allowed == ()
    assert repr(Guard("validation 'w'", network=True)) == (
        "Guard(\"validation 'w'\", pure=False, network=True, violation=None)"
    )


def test_a_bytecode_cache_is_told_by_its_folder() -> None:
    """Only a path through a __pycache__ folder is a cache; a descriptor is none."""
    assert readonly._is_bytecode_cache(f"{os.sep}x{os.sep}__pycache__{os.sep}m.pyc")
    assert readonly._is_bytecode_cache(os.fsencode(f"a{os.sep}__pycache__{os.sep}m.pyc"))
    assert not readonly._is_bytecode_cache(f"{os.sep}x{os.sep}pycache{os.sep}m.pyc")
    assert not readonly._is_bytecode_cache(7)


# -- installing --------------------------------------------------------------------------------


def test_installing_twice_wraps_mkfifo_and_mknod_once() -> None:
    """The hook is installed once per process: a second install wraps nothing again."""
    readonly.install_hook()
    readonly.install_hook()
    for name in ("mkfifo", "mknod"):
        wrapper = getattr(os, name)
        # The original is in the wrapper's closure (no `__wrapped__` leads back to it).
        (original,) = [cell.cell_contents for cell in wrapper.__closure__]
        assert original.__module__ == "posix" and not hasattr(original, "__closure__")


# -- the network and SQLite, judged by the hook itself ---------------------------------------
# (The audit hook runs untraced: these call it directly, as the tests above do.)


@pytest.mark.parametrize(
    ("event", "args", "asks_someone"),
    [
        ("socket.getaddrinfo", ("example.org", 443, 0, 0, 0, 0), True),
        ("socket.getaddrinfo", ("localhost", 80, 0, 0, 0, 0), False),
        ("socket.getaddrinfo", ("127.0.0.1", 80, 0, 0, 0, 0), False),
        ("socket.getaddrinfo", ("fe80::1%eth0", 80, 0, 0, 0, 0), False),
        ("socket.getaddrinfo", (None, 80, 0, 0, 0, 0), False),
        ("socket.getaddrinfo", (b"example.org", 443, 0, 0, 0, 0), True),
        ("socket.getaddrinfo", (12, 443, 0, 0, 0, 0), True),
        ("socket.gethostbyname", ("example.org",), True),
        ("socket.gethostbyaddr", ("127.0.0.1",), False),
        ("socket.gethostbyaddr", ("192.0.2.1",), True),
        ("socket.getnameinfo", (("192.0.2.1", 80), 0), True),
        ("socket.getnameinfo", (("::1", 80), 0), False),
    ],
)
def test_a_lookup_is_the_network_unless_it_asks_no_one(
    event: str, args: tuple[Any, ...], asks_someone: bool
) -> None:
    """A name's lookup may ask a DNS server: refused, naming the declaration. An address
    written out, looked up forwards, or the loopback's own name, asks no one."""
    if asks_someone:
        assert "network: true" in refusal(validation(), event, *args)
    else:
        assert allowed(validation(), event, *args)
    declared = Guard("validation 'v'", network=True)
    assert allowed(declared, event, *args)


def test_a_transform_looks_up_nothing() -> None:
    assert "in a transform" in refusal(
        validation(pure=True), "socket.getaddrinfo", "localhost", 80, 0, 0, 0, 0
    )


@pytest.mark.parametrize(
    "name",
    [
        "{outside}/new.db",
        "file:{outside}/new.db",
        "file:{outside}/new.db?mode=rwc",
        "file:{outside}/new.db?mode=ro&mode=rwc",
        "file:{outside}/new.db?immutable=1",
        "file:{scratch}/..%2F..%2Fresource%2Fnew.db",
        "file://localhost{outside}/new.db",
    ],
)
def test_a_sqlite_name_that_would_create_a_database_outside_scratch_is_refused(
    scratch: Path, outside: Path, name: str
) -> None:
    """Judged as SQLite reads it: percent-escapes decoded, every `mode`, `immutable` no
    pass, a `file://` host."""
    database = name.format(outside=outside, scratch=scratch)
    message = refusal(validation(scratch), "sqlite3.connect", database)
    assert "creating the SQLite database" in message


@pytest.mark.parametrize(
    "name",
    [
        ":memory:",
        "",
        "{outside}/a.py",  # exists: opened, not created
        "{scratch}/new.db",
        "file:{outside}/new.db?mode=ro",
        "file:{outside}/new.db?mode=memory#fragment",
        "file:{scratch}/new.db?mode=rwc",
    ],
)
def test_a_sqlite_name_that_creates_nothing_outside_scratch_opens(
    scratch: Path, outside: Path, name: str
) -> None:
    database = name.format(outside=outside, scratch=scratch)
    assert allowed(validation(scratch), "sqlite3.connect", database)


def test_a_sqlite_database_given_by_descriptor_is_refused(scratch: Path) -> None:
    assert "opening a SQLite database" in refusal(validation(scratch), "sqlite3.connect", 3)
