"""Confinement by the Linux kernel, for the worker processes of ``isolation: sandbox``.

A sandboxed worker confines itself once, at its start, while it is still single-threaded
(every later thread and child inherits the confinement, and nothing can lift it):

- **a mount namespace of its own** (in a user namespace of its own where gategraph is not
  root): every mount made read-only, so no file outside the worker's folder can change,
  its metadata included (``chmod``, ``chown``, timestamps, extended attributes, which
  Landlock does not cover); the worker's folder a private ``tmpfs`` of a bounded size,
  gone with the worker; and gategraph's own open databases (the event log, the catalog)
  hidden behind ``/dev/null``, so a call cannot even take a read lock on them (a lock
  would stall the run's writer). In its own user namespace, the process limit counts the
  worker's processes only.
- **Landlock** (Linux 5.13+, ABI 6 = Linux 6.12 needed here): reading and executing are
  allowed everywhere; creating, writing, truncating, renaming, linking and removing only
  beneath the worker's own folder (and writing to ``/dev/null``); every TCP bind is
  refused; signals and abstract Unix sockets cannot reach outside the worker.
- **seccomp**: ``socket()`` fails but for an internet socket (no raw, netlink or
  Unix-path socket, which Landlock does not cover), so does ``io_uring_setup`` (its
  operations bypass the
  syscall filter), ``setsid``/``setpgid`` (every process the call starts stays in the
  worker's process group, so killing the group ends them all), and every way to a new
  namespace or mount (``unshare``, ``setns``, ``mount``..., and ``clone`` with a
  namespace flag).
- **capabilities**: all dropped, for good (a worker running as root keeps only reading
  files it does not own); ``no_new_privs`` stops set-uid programs from regaining any.
- **resource limits**: address space, CPU seconds, file size, open files, processes (not
  enforced by the kernel for root), no core dumps; the folder's size.
- **the network**, last (:func:`close_network`), once the worker knows which validation
  it serves and before any of its code loads, unless that validation declares
  ``network: true``: a Landlock layer refuses every TCP connect, and a seccomp filter
  every ``socket()``. Both only add to what is refused: nothing can take them back.

Why ctypes rather than a library: the one Landlock package on PyPI (``landlock``, an
alpha) covers file system rules only, not TCP or scopes, and the seccomp bindings need
libseccomp installed. The kernel interfaces used here are small, stable and documented
(``man 7 landlock``, ``man 2 seccomp``, ``man 7 capabilities``).

:func:`support` says what this machine can do without changing anything; the parent asks
it before it starts a worker, so a plan that asks for the sandbox on a machine that cannot
give it fails at once, with one line saying what is missing (never a silent downgrade).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import re
import resource
import struct
import subprocess
import sys
import tempfile
import threading
from collections import Counter, deque
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "SandboxLimits",
    "SharedFolderError",
    "Support",
    "close_inherited",
    "close_network",
    "confine",
    "gone",
    "hidden_now",
    "keep_out",
    "kept_out",
    "let_in",
    "let_in_later",
    "network_closed",
    "probe_ahead",
    "sandbox_support",
    "show_folder_at",
    "support",
]

LANDLOCK_ABI_NEEDED: Final = 6

# -- syscall numbers and constants (uapi headers) --------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET: Final = 444  # the same on every architecture
_SYS_LANDLOCK_ADD_RULE: Final = 445
_SYS_LANDLOCK_RESTRICT_SELF: Final = 446
_LANDLOCK_CREATE_RULESET_VERSION: Final = 1
_LANDLOCK_RULE_PATH_BENEATH: Final = 1

_FS_EXECUTE: Final = 1 << 0
_FS_WRITE_FILE: Final = 1 << 1
_FS_READ_FILE: Final = 1 << 2
_FS_READ_DIR: Final = 1 << 3
_FS_ALL_ABI1: Final = (1 << 13) - 1  # execute .. make_sym
_FS_REFER: Final = 1 << 13  # ABI 2
_FS_TRUNCATE: Final = 1 << 14  # ABI 3
_FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
_NET_BIND_TCP: Final = 1 << 0  # ABI 4
_NET_CONNECT_TCP: Final = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
_SCOPE_SIGNAL: Final = 1 << 1

_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_SET_SECCOMP: Final = 22
_PR_CAPBSET_DROP: Final = 24
_PR_SET_SECUREBITS: Final = 28
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_RAISE: Final = 2
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_SET_DUMPABLE: Final = 4
_SECCOMP_MODE_FILTER: Final = 2
# SECBIT_NOROOT and NO_SETUID_FIXUP, each locked, and KEEP_CAPS_LOCKED: uid 0 gains no
# capability on exec, and nothing can turn that back.
_SECUREBITS: Final = 0b101111
_CAP_DAC_READ_SEARCH: Final = 2
_CAP_SYS_ADMIN: Final = 21
_CAPABILITY_VERSION_3: Final = 0x20080522

_SECCOMP_RET_ALLOW: Final = 0x7FFF0000
_SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
_SECCOMP_RET_ERRNO: Final = 0x00050000
_X32_SYSCALL_BIT: Final = 0x40000000


@dataclass(frozen=True)
class _Arch:
    audit: int  # AUDIT_ARCH_*: a syscall made under another ABI is refused outright
    capset: int
    clone: int
    socket: int
    denied: tuple[tuple[int, int], ...]  # (syscall, errno)


_DENIED: Final = (
    # Only internet sockets (and not even those once the network is closed): Landlock does
    # not cover raw, netlink or Unix-path sockets.
    "socket",
    "io_uring_setup",  # its operations bypass this filter
    "setsid",  # every process of a call stays in the worker's process group
    "setpgid",
    "clone3",  # ENOSYS: the C library falls back to clone, whose flags are checked
    "memfd_create",  # memory outside the address-space limit
    "shmget",  # System V objects outlive the worker
    "msgget",
    "semget",
    # No new namespace and no mount: the worker's read-only mounts and hidden files stay
    # as they are (Landlock refuses mounts too; this also keeps nested user namespaces,
    # and the capabilities they give, out of reach).
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # The kernel's keyrings outlive the worker, outside every limit, and reach other
    # processes of the user: a channel out of the sandbox.
    "add_key",
    "request_key",
    "keyctl",
)
_ERRNO: Final = {"socket": errno.EACCES, "clone3": errno.ENOSYS}
_NUMBERS: Final = {
    "x86_64": (
        *(41, 425, 112, 109, 435, 319, 29, 68, 64),
        *(272, 308, 165, 166, 155, 428, 429, 430, 431, 432, 433, 442),
        *(248, 249, 250),
    ),
    "aarch64": (
        *(198, 425, 157, 154, 435, 279, 194, 186, 190),
        *(97, 268, 40, 39, 41, 428, 429, 430, 431, 432, 433, 442),
        *(217, 218, 219),
    ),
}
_ARCHES: Final = {
    arch: _Arch(
        audit,
        capset,
        clone,
        _NUMBERS[arch][_DENIED.index("socket")],
        tuple(
            (number, _ERRNO.get(name, errno.EPERM))
            for name, number in zip(_DENIED, _NUMBERS[arch], strict=True)
        ),
    )
    for arch, audit, capset, clone in (
        ("x86_64", 0xC000003E, 126, 56),
        ("aarch64", 0xC00000B7, 91, 220),
    )
}
_AF_INET: Final = 2
_AF_INET6: Final = 10
_CLONE_PARENT: Final = 0x8000
_CLONE_NEWNS: Final = 0x00020000
_CLONE_NEWUSER: Final = 0x10000000
_CLONE_REFUSED: Final = _CLONE_PARENT | _CLONE_NEWNS | 0x7E000000
"""Clone flags refused: ``CLONE_PARENT`` (the new process would be a sibling of the
worker, outside it) and every new namespace (mount, cgroup, UTS, IPC, user, PID, network)."""

_MS_NOSUID: Final = 2
_MS_NODEV: Final = 4
_MS_BIND: Final = 4096
_MS_REC: Final = 0x4000
_MS_PRIVATE: Final = 1 << 18
_SYS_MOUNT_SETATTR: Final = 442  # the same on every architecture
_MOUNT_ATTR_RDONLY: Final = 1
_AT_FDCWD: Final = -100
_AT_RECURSIVE: Final = 0x8000
_AT_EMPTY_PATH: Final = 0x1000
_SYS_OPENAT2: Final = 437  # the same on every architecture
_RESOLVE_NO_SYMLINKS: Final = 0x04
_COMPANIONS: Final = ("", "-wal", "-shm", "-journal")
"""A SQLite database's files: the database, and the ones it locks beside it."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class _MountAttr(ctypes.Structure):
    _fields_ = (
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    )


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def _syscall(number: int, *args: object) -> int:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def _prctl(option: int, arg: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> None:
    libc = _libc()
    libc.prctl.argtypes = (ctypes.c_int, *(ctypes.c_ulong,) * 4)
    if libc.prctl(option, arg, arg3, arg4, arg5) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# -- what this machine can do ----------------------------------------------------------------


@dataclass(frozen=True)
class Support:
    """What the kernel offers the sandbox; ``missing`` is None when it offers it all."""

    landlock_abi: int
    """0 where there is no Landlock (another system, an old kernel, disabled at boot)."""
    seccomp: bool
    arch: str
    missing: str | None
    mounts: bool = False
    """Whether a worker can have a mount namespace of its own (to make every file
    read-only, its metadata included)."""


_support: Support | None = None
_support_lock: Final = threading.Lock()


def support() -> Support:
    """Probe (once per process) whether this machine can confine a sandboxed worker:
    ``support().missing`` is None when it can, else what is missing, in one line."""
    global _support
    if _support is None:
        with _support_lock:  # one probe, however many threads ask first
            if _support is None:
                _support = _probe()
    return _support


def _probe() -> Support:
    found = _without_mounts()
    if found.missing is not None:
        return found
    refused = _probe_mounts()
    if refused is not None:
        missing = (
            "the sandbox needs a mount namespace of its own, to make every file read-only "
            f"(its permissions and timestamps included), and this machine refuses one: "
            f"{refused}. Unprivileged user namespaces may be turned off "
            "(sysctl kernel.unprivileged_userns_clone, or "
            "kernel.apparmor_restrict_unprivileged_userns) or forbidden in this container"
        )
        return Support(found.landlock_abi, found.seccomp, found.arch, missing)
    return Support(found.landlock_abi, found.seccomp, found.arch, None, mounts=True)


def _without_mounts() -> Support:
    """What the cheap checks find (the system, Landlock's ABI, the architecture,
    seccomp); ``missing`` None when only the mounts are left to try."""
    arch = platform.machine()
    if not sys.platform.startswith("linux"):
        return Support(
            0, False, arch, f"the sandbox needs Linux (Landlock); this is {sys.platform}"
        )
    try:
        abi = _syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    except OSError as exc:
        abi = 0
        why = {
            errno.ENOSYS: "this kernel was built without Landlock",
            errno.EOPNOTSUPP: "Landlock is turned off on this machine (add landlock to the "
            "kernel's lsm= boot parameter)",
        }.get(exc.errno or 0, f"Landlock is unavailable ({exc.strerror})")
    seccomp = _has_seccomp()
    missing: str | None = None
    if abi == 0:
        missing = f"the sandbox needs Landlock, and {why}"
    elif abi < LANDLOCK_ABI_NEEDED:
        missing = (
            f"the sandbox needs Landlock ABI {LANDLOCK_ABI_NEEDED} (Linux 6.12 or later) to "
            f"keep signals and sockets inside it; this kernel ({platform.release()}) has ABI {abi}"
        )
    elif arch not in _ARCHES:
        missing = f"the sandbox supports x86_64 and aarch64, not {arch}"
    elif not seccomp:
        missing = "the sandbox needs seccomp filters, which this kernel does not offer"
    return Support(abi, seccomp, arch, missing)


_PROBE: Final = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gategraph_kernel_probe", sys.argv[1])
kernel = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
try:
    kernel._own_mounts(sys.argv[2], (), 1 << 20)
except OSError as exc:
    print(exc.strerror or exc, file=sys.stderr, end="")
    sys.exit(1)
"""


class _Ahead:
    """The probe of mounts started ahead (:func:`probe_ahead`): its process, reaped by a
    thread as soon as it ends (its folder removed then, not at exit), and the process that
    started it (a forked child has a copy of this, and leaves it alone)."""

    def __init__(self, child: subprocess.Popen[bytes], folder: str) -> None:
        self.child = child
        self.folder = folder
        self.owner = os.getpid()
        self.stderr = b""
        self.reaper = threading.Thread(target=self._reap, name="gategraph-probe", daemon=True)
        self.reaper.start()

    def _reap(self) -> None:
        try:
            self.stderr = self.child.communicate()[1] or b""
        finally:
            _remove_folder(self.folder)

    def answer(self) -> str | None:
        """Why the mounts are refused (None when they are not), waiting for the probe."""
        self.reaper.join(60)
        if self.reaper.is_alive():
            self.stop()
            return "the probe did not end within 60 s"
        return _refusal(self.child.returncode, self.stderr)

    def stop(self) -> None:
        if self.reaper.is_alive():
            self.child.kill()
            self.reaper.join()


_ahead: _Ahead | None = None


def _start_probe(folder: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _PROBE, __file__, folder],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def probe_ahead() -> None:
    """Start :func:`support`'s probe of mounts now, in its own process, so that it runs
    while this one goes on loading (a process start costs some 50 ms): the command line
    calls this as a command that will need it starts. Nothing starts where a cheap check
    already rules the sandbox out. The first :func:`support` takes the answer; if nothing
    asks, the probe is stopped when this process exits."""
    global _ahead
    if _ahead is not None or _support is not None or _without_mounts().missing is not None:
        return
    folder = tempfile.mkdtemp(prefix="gategraph-probe-")
    try:
        child = _start_probe(folder)
    except (OSError, subprocess.SubprocessError):
        _remove_folder(folder)
        return  # support() tries again, and says why
    _ahead = _Ahead(child, folder)
    import atexit

    atexit.register(_stop_ahead)


def _stop_ahead() -> None:
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is not None and ahead.owner == os.getpid():
        ahead.stop()


def _remove_folder(folder: str) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _refusal(returncode: int | None, stderr: bytes) -> str | None:
    if returncode == 0:
        return None
    why = stderr.decode(errors="replace").strip().splitlines()
    return why[-1] if why else f"the probe exited with status {returncode}"


def _probe_mounts() -> str | None:
    """Whether a process can have the mounts a worker makes: tried, as a worker does, in a
    throwaway process (this one's namespaces stay as they are); None when it can, else why
    not. This module alone is loaded there, by its path: it needs nothing else."""
    global _ahead
    ahead, _ahead = _ahead, None
    if ahead is not None and ahead.owner == os.getpid():
        return ahead.answer()
    folder = tempfile.mkdtemp(prefix="gategraph-probe-")
    try:
        child = _start_probe(folder)
    except (OSError, subprocess.SubprocessError) as exc:
        _remove_folder(folder)
        return f"the probe could not run ({exc})"
    try:
        _, stderr = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return "the probe did not end within 60 s"
    finally:
        _remove_folder(folder)
    return _refusal(child.returncode, stderr)


def sandbox_support() -> Support:
    """Whether this machine can run ``isolation: sandbox``: ``missing`` is None when it
    can, else the one line a plan that asks for it is refused with."""
    return support()


def _has_seccomp() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


# -- confining this process ------------------------------------------------------------------


@dataclass(frozen=True)
class SandboxLimits:
    """The resource limits of a sandboxed worker (and of each process it starts)."""

    address_space: int = 8 << 30
    """Bytes of virtual memory per process."""
    cpu_seconds: int = 3600
    """CPU seconds per process (a plan's process that spent half is replaced before its
    next call)."""
    file_size: int = 1 << 30
    """The largest file a process may write, in bytes."""
    open_files: int = 1024
    processes: int = 256
    """Processes and threads of the worker together (not enforced by the kernel when
    gategraph runs as root)."""
    disk: int = 1 << 30
    """Bytes all files in the worker's folder may take together (the call's scratch and
    temporary files; it is memory, freed with the worker)."""

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            least = _LEAST[field.name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SandboxLimits.{field.name} must be a whole number, not {value!r}")
            if value < least:
                raise ValueError(
                    f"SandboxLimits.{field.name} must be at least {least:,} "
                    f"({_WHY_LEAST[field.name]}), not {value:,}"
                )
            if value > _MOST:
                raise ValueError(
                    f"SandboxLimits.{field.name} must be at most {_MOST:,}, not {value:,}"
                )


_LEAST: Final = {
    "address_space": 256 << 20,
    "cpu_seconds": 1,
    "file_size": 1,
    "open_files": 32,
    "processes": 8,
    "disk": 1 << 20,
}
_MOST: Final = (1 << 62) - 1
"""The largest limit the kernel takes (and far past any machine's)."""
_WHY_LEAST: Final = {
    "address_space": "bytes: a worker's interpreter alone needs about 160 MiB",
    "cpu_seconds": "seconds",
    "file_size": "byte",
    "open_files": "a worker holds its pipes and its capture open",
    "processes": "the worker and the threads of a call",
    "disk": "bytes, 1 MiB",
}


def confine(
    writable: str,
    limits: SandboxLimits,
    hidden: Iterable[str] = (),
    shared: Sequence[str] = (),
    views: Sequence[str] = (),
) -> dict[str, list[View]]:
    """Confine this process for good: see the module's docstring. ``writable`` is its own
    folder (it becomes a private ``tmpfs``, and the working directory); ``shared`` are
    folders of the machine it may change as well (a work tool's: the plan's copies of its
    resources), and nothing else; ``hidden`` are databases (with their ``-wal``, ``-shm``
    and ``-journal``) it must not see. Must run before the process starts any thread.

    ``views`` are folders to give a copy-on-write view of (:class:`View`), one per time a
    folder is named, made in ``writable`` before the kernel refuses this process any
    mount: returned by folder, for each that could be had (a folder with another mount
    inside it gets none)."""
    found = support()
    if found.missing is not None:
        raise OSError(errno.ENOTSUP, found.missing)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1 or threading.active_count() != 1:
        # Landlock, seccomp and unshare bind the calling thread (and what it starts).
        raise RuntimeError(f"cannot confine a process that runs {threads} threads")
    root = os.geteuid() == 0
    own_user, shared_fds = _own_mounts(writable, hidden, limits.disk, shared)
    made = _views(views, own_user)
    _set_limits(limits, processes=own_user)
    try:
        # The first the kernel kills when memory runs out: a worker, not gategraph.
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as score:
            score.write("1000")
    except OSError:
        pass  # no /proc: the limits above still bound the worker's memory
    # Descendants orphaned by the call are adopted by the worker, so it sees (and its
    # process group's end takes) every process the call left behind.
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    # Not dumpable: no process of its calls (a child of the worker, in the same Landlock
    # domain) can trace it, or reach its memory or descriptors through /proc.
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _drop_capabilities(keep_read_search=root)
    _restrict_files_and_network(writable, shared_fds, found.landlock_abi)
    _filter_syscalls(_ARCHES[found.arch])
    _state["confined"] = True
    return made


@dataclass(frozen=True)
class View:
    """A copy-on-write view of a folder: an overlay mount whose lower layer is the folder
    (read-only) and whose upper layer is in the confined process's own ``tmpfs``. What a
    call writes there lands in that layer only, never in the folder. A copy without the
    copying (the tree of a large project in no time), for one call: the overlay keeps
    what it has seen of the folder, so a view never outlives the call that used it (a
    worker with views runs one call)."""

    path: str
    """Where the view is mounted (named as the folder is)."""


def _views(folders: Sequence[str], own_user: bool) -> dict[str, list[View]]:
    """Mount a :class:`View` of each of ``folders`` under ``views/`` of the working
    directory (this process's ``tmpfs``). Paths relative to it: the overlay's options are
    a comma-separated string, which a folder's name could break."""
    if not folders:
        return {}
    mounted = _mount_points()
    made: dict[str, list[View]] = {}
    for index, folder in enumerate(folders):
        # An overlay shows a folder's own files, not what is mounted inside it: it would
        # show what the mounts hide (gategraph's databases behind /dev/null).
        if any(point.startswith(folder.rstrip(os.sep) + os.sep) for point in mounted):
            continue
        try:
            lower = _folder_without_links(folder)
        except SharedFolderError:
            continue
        # The layers apart from the view: no folder's name can be one of theirs.
        layers = os.path.join("layers", str(index))
        upper, work = os.path.join(layers, "upper"), os.path.join(layers, "work")
        path = os.path.join("views", str(index), os.path.basename(folder.rstrip(os.sep)) or "view")
        options = f"lowerdir=/proc/self/fd/{lower},upperdir={upper},workdir={work}"
        try:
            for each in (upper, work, path):
                os.makedirs(each, mode=0o700)
            # In a user namespace of its own, overlayfs keeps its marks in user xattrs.
            _mount(
                "overlay",
                path,
                "overlay",
                _MS_NOSUID | _MS_NODEV,
                options + (",userxattr" if own_user else ""),
            )
        except OSError:
            continue  # an old kernel, or a file system overlayfs cannot take: a copy then
        finally:
            os.close(lower)
        made.setdefault(folder, []).append(View(os.path.abspath(path)))
    return made


def _mount_points() -> list[str]:
    """The mount points of this process's mount namespace (``/proc/self/mountinfo``,
    octal escapes undone)."""
    with open("/proc/self/mountinfo", "rb") as info:
        lines = info.read().splitlines()
    points = []
    for line in lines:
        fields = line.split(b" ")
        if len(fields) > 4:
            raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])
            points.append(os.fsdecode(raw))
    return points


def close_inherited(keep: Iterable[int] = ()) -> None:
    """Close every descriptor this process inherited but 0, 1, 2 and ``keep``: a file
    gategraph's own process had open (some event loops start processes without closing
    them) would otherwise be a way out of the sandbox, writable whatever the mounts say."""
    last = 2
    for fd in sorted(set(keep)):
        if fd > last + 1:
            os.closerange(last + 1, fd)
        last = max(last, fd)
    os.closerange(last + 1, _MAX_FD)


_MAX_FD: Final = 1 << 30
"""Past any descriptor number (the kernel's ceiling, ``fs.nr_open``, is 2**30 at most);
``os.closerange`` closes a range with one ``close_range`` call on Linux."""

_state: Final = {"confined": False, "network_closed": False}
"""What this process did to itself: :func:`confine`, then :func:`close_network`."""


def close_network() -> None:
    """Refuse this process (and every thread and process it starts from now on) the
    network: every TCP connect (Landlock) and every new socket (seccomp). Only in a
    process :func:`confine` confined, once; elsewhere it does nothing (the guard still
    refuses what Python code tries). A thread already running keeps what it had: call
    it before the code it holds runs (gategraph's own capture reader may run beside it)."""
    if not _state["confined"] or _state["network_closed"]:
        return
    # Every Landlock layer refuses moving or linking a file into another folder unless it
    # handles that right (REFER) and grants it: this layer is about the network, so it
    # grants it everywhere (the first layer decides where).
    attr = _RulesetAttr(_FS_REFER, _NET_BIND_TCP | _NET_CONNECT_TCP, 0)
    ruleset = _syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        ctypes.cast(ctypes.byref(attr), ctypes.c_void_p),
        ctypes.sizeof(attr),
        0,
    )
    try:
        _add_path(ruleset, "/", _FS_REFER)
        _syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    socket = _ARCHES[support().arch].socket
    ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
    _install_filter(
        [
            (ld_w_abs, 0, 0, 0),  # seccomp_data.nr (the first filter kills other ABIs)
            (jeq_k, 0, 1, socket),
            (ret_k, 0, 0, _SECCOMP_RET_ERRNO | errno.EACCES),
            (ret_k, 0, 0, _SECCOMP_RET_ALLOW),
        ]
    )
    _state["network_closed"] = True


def network_closed() -> bool:
    """Whether :func:`close_network` closed this process's network."""
    return _state["network_closed"]


def _own_mounts(
    writable: str, hidden: Iterable[str], disk: int, shared: Sequence[str] = ()
) -> tuple[bool, list[int]]:
    """Give this process mounts of its own: all read-only but ``shared`` (each a mount of
    its own), ``hidden`` behind ``/dev/null``, and ``writable`` a fresh ``tmpfs`` of
    ``disk`` bytes, made the working directory.
    Return whether that took a user namespace of its own (where this process may not
    mount in the one it is in: any user but root), and a descriptor of each shared folder
    (:class:`SharedFolderError` where one is not a folder reached without a link)."""
    uid, gid = os.geteuid(), os.getegid()
    own_user = _private_mounts()
    # Found in this process's own mounts (a bind takes a folder of those only).
    found = [_folder_without_links(path) for path in shared]
    for kept in hidden:
        if os.path.isdir(kept):
            # An empty folder in its place: the lock files gategraph keeps there.
            _mount("tmpfs", kept, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=4k,mode=0500")
            continue
        for companion in _COMPANIONS:
            path = kept + companion
            if os.path.isfile(path):
                _mount("/dev/null", path, None, _MS_BIND)
    for fd in found:
        # A mount of its own (with what is mounted inside it, gategraph's hidden files
        # included), so that it alone can be made writable again below. Through the
        # descriptor: the folder found, not what a link put in its place since.
        own = f"/proc/self/fd/{fd}"
        _mount(own, own, None, _MS_BIND | _MS_REC)
    _set_mount(_AT_FDCWD, b"/", _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0), _AT_RECURSIVE)
    mounted = []
    for path, fd in zip(shared, found, strict=True):
        # The new mount (a lookup ends on the topmost), the same folder as before.
        top = _folder_without_links(path)
        if os.fstat(top)[1:3] != os.fstat(fd)[1:3]:
            raise SharedFolderError(errno.ENOENT, f"{path} was replaced while it was mounted")
        os.close(fd)
        # That mount only, not what is mounted inside it: those stay read-only.
        _set_mount(top, b"", _MountAttr(0, _MOUNT_ATTR_RDONLY, 0, 0), _AT_EMPTY_PATH)
        mounted.append(top)
    # Mounted after the rest went read-only: the one writable place.
    options = f"size={disk},mode=0700,uid={uid},gid={gid}"
    _mount("tmpfs", writable, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    os.chdir(writable)  # the folder itself, not the one now under the tmpfs
    return own_user, mounted


def _private_mounts() -> bool:
    """Give this process a mount namespace of its own, whose changes reach no other
    process; return whether that took a user namespace of its own too (any user but root
    may not mount in the one it is in)."""
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    own_user = not _capabilities().get("CapEff", 0) & (1 << _CAP_SYS_ADMIN)
    if libc.unshare(_CLONE_NEWNS | (_CLONE_NEWUSER if own_user else 0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    if own_user:
        # Itself only, as itself: files keep their owners, and nobody else is mapped.
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1")):
            _write_proc(name, text)
        _write_proc("gid_map", f"{gid} {gid} 1")
    # Nothing done here may reach the parent's mounts.
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    return own_user


def show_folder_at(folder: str, at: str) -> None:
    """Make ``folder`` appear at ``at`` (an existing folder) for this process and what it
    starts, and for nothing else: a program that only knows ``at`` reads ``folder``.

    A copy whose git objects are read where they are (``.git/objects/info/alternates``
    naming ``at``'s, as a disposable copy's does) would name itself once it hides ``at``:
    its objects folder shows ``at``'s own instead, read-only.
    Raises :class:`OSError` where this machine lets no process have mounts of its own."""
    _private_mounts()
    objects = os.path.join(folder, ".git", "objects")
    try:
        with open(os.path.join(objects, "info", "alternates"), encoding="utf-8") as file:
            shared = [line.strip() for line in file if line.strip()]
    except OSError:
        shared = []
    real = os.path.join(at, ".git", "objects")
    if [os.path.realpath(path) for path in shared] == [os.path.realpath(real)]:
        # Read-only keeps git's own writes (a repack, a gc) out of the real repository;
        # it is no boundary for a hostile server, which runs with the user's rights.
        _bind(real, objects, read_only=True)
    _bind(folder, at)


def _bind(folder: str, at: str, *, read_only: bool = False) -> None:
    # Found in this process's own mounts (a bind takes a folder of those only), and
    # through the descriptor: the folder found, not what a link put in its place since.
    source = _folder_without_links(folder)
    try:
        _mount(f"/proc/self/fd/{source}", at, None, _MS_BIND | _MS_REC)
    finally:
        os.close(source)
    if read_only:
        top = _folder_without_links(at)  # the new mount: a lookup ends on the topmost
        try:
            _set_mount(top, b"", _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0), _AT_EMPTY_PATH)
        finally:
            os.close(top)


class SharedFolderError(OSError):
    """A folder a confined process was to change is not one it can be given: gone, not
    a folder, or reached through a link (which could lead anywhere)."""


def _folder_without_links(path: str) -> int:
    """An ``O_PATH`` descriptor of the folder ``path``, reached without following any
    link (``openat2`` with ``RESOLVE_NO_SYMLINKS``): a link in its path could have been
    put there by code that changes a neighbouring folder."""
    how = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS)
    encoded = os.fsencode(path)
    try:
        return _syscall(
            _SYS_OPENAT2,
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(encoded),
            ctypes.cast(ctypes.byref(how), ctypes.c_void_p),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    except OSError as exc:
        why = {
            errno.ELOOP: "it is a link, or its path passes through one",
            errno.ENOENT: "it is gone",
            errno.ENOTDIR: "it is not a folder",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        raise SharedFolderError(exc.errno or errno.EINVAL, f"{path}: {why}") from None


def _set_mount(at: int, path: bytes, attr: _MountAttr, flags: int) -> None:
    _syscall(
        _SYS_MOUNT_SETATTR,
        ctypes.c_int(at),
        ctypes.c_char_p(path),
        ctypes.c_uint(flags),
        ctypes.cast(ctypes.byref(attr), ctypes.c_void_p),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )


def _write_proc(name: str, text: str) -> None:
    with open(f"/proc/self/{name}", "w", encoding="ascii") as file:
        file.write(text)


def _mount(
    source: str | None, target: str, kind: str | None, flags: int, options: str | None = None
) -> None:
    libc = _libc()
    libc.mount.argtypes = (
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    )
    encoded = [None if v is None else os.fsencode(v) for v in (source, target, kind, options)]
    if libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


# -- gategraph's own files, kept out of every worker -----------------------------------------

_kept_out: Final[Counter[str]] = Counter()
_kept_lock: Final = threading.Lock()
_released: Final[deque[str]] = deque()
_epochs: Final[Counter[str]] = Counter()
"""Per path, how often what was hidden there went away (a database closed: SQLite removes
the files beside it, and the worker's mounts over them with them): a worker that hid an
earlier epoch's files does not hide the next ones, though the system may give them the
same inode numbers."""


def keep_out(path: str | os.PathLike[str]) -> None:
    """Hide a database gategraph holds open (and its companion files), or a folder of its
    lock files, from every sandboxed worker started from now on, until :func:`let_in`: a
    worker could otherwise take a lock on it (a read lock will do), which stalls
    gategraph's writes or refuses its plans."""
    with _kept_lock:
        _settle()
        _kept_out[os.path.realpath(path)] += 1


def let_in(path: str | os.PathLike[str]) -> None:
    """Undo one :func:`keep_out` of ``path``."""
    with _kept_lock:
        _settle()
        _let_in(os.path.realpath(path))


def let_in_later(path: str | os.PathLike[str]) -> None:
    """:func:`let_in` for a finalizer, done at the next use of what is kept out.

    The collector runs finalizers at any allocation, also in a thread that holds
    ``_kept_lock`` (which is not reentrant, and must not be: a reentrant change of the
    counts would break an iteration over them): taking the lock there deadlocks."""
    _released.append(os.path.realpath(path))  # deque.append is atomic: no lock


def _settle() -> None:
    # With _kept_lock held. A finalizer run meanwhile only appends, and is drained here.
    while _released:
        _let_in(_released.popleft())


def _let_in(real: str) -> None:
    _kept_out[real] -= 1
    if _kept_out[real] <= 0:
        del _kept_out[real]
        _epochs[real] += 1


def gone(path: str | os.PathLike[str]) -> None:
    """What was hidden at ``path`` was removed (a resource's journal, once applied): what
    is made there next is new to every worker."""
    with _kept_lock:
        _epochs[os.path.realpath(path)] += 1


def kept_out() -> frozenset[str]:
    """What workers started now hide."""
    with _kept_lock:
        _settle()
        return frozenset(_kept_out)


def hidden_now(kept: frozenset[str]) -> frozenset[tuple[str, int, int, int]]:
    """What of ``kept`` exists now (a folder; a database and the files beside it), each by
    its path, device, inode and epoch: a worker may run calls while all of it is what it
    hid (a folder of lock files may be made after the worker started, by this process or
    another; SQLite removes and makes again the files beside a database)."""
    found: set[tuple[str, int, int, int]] = set()
    with _kept_lock:
        _settle()
        epochs = {path: _epochs[path] for path in kept}
    for path in kept:
        for candidate in [path] if os.path.isdir(path) else [path + c for c in _COMPANIONS]:
            try:
                st = os.stat(candidate)
            except OSError:
                continue  # not there: nothing to hide
            found.add((candidate, st.st_dev, st.st_ino, epochs[path]))
    return frozenset(found)


def _set_limits(limits: SandboxLimits, *, processes: bool) -> None:
    # The process limit counts per user and user namespace: only in a user namespace of
    # the worker's own does it count the worker's processes alone (and never for root).
    for which, value in (
        (resource.RLIMIT_AS, limits.address_space),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
        *(((resource.RLIMIT_NPROC, limits.processes),) if processes else ()),
    ):
        _soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        # CPU: SIGXCPU at the limit (the death says why), SIGKILL a second later for a
        # process that catches it.
        room = hard == resource.RLIM_INFINITY or cap < hard
        top = cap + 1 if which == resource.RLIMIT_CPU and room else cap
        resource.setrlimit(which, (cap, top))


def _capabilities() -> dict[str, int]:
    found = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Cap"):
                name, value = line.split(":", 1)
                found[name] = int(value.strip(), 16)
    return found


def _drop_capabilities(*, keep_read_search: bool) -> None:
    """Drop every capability (those of a user namespace of the worker's own too); with
    ``keep_read_search`` (root) all but reading files it does not own."""
    caps = _capabilities()
    if not any(caps.values()):
        return  # an ordinary user: nothing to give up, and no_new_privs keeps it so
    keep = (1 << _CAP_DAC_READ_SEARCH) if keep_read_search else 0
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
        last_cap = int(last.read())
    if caps.get("CapBnd", 0) and caps.get("CapEff", 0) & (1 << 8):  # CAP_SETPCAP
        for cap in range(last_cap + 1):
            if not keep & (1 << cap):
                _prctl(_PR_CAPBSET_DROP, cap)
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    if caps.get("CapEff", 0) & (1 << 8):
        _prctl(_PR_SET_SECUREBITS, _SECUREBITS)  # needs CAP_SETPCAP: before the drop
    read_search = caps.get("CapPrm", 0) & keep
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    data[0].effective = data[0].permitted = data[0].inheritable = read_search
    arch = _ARCHES[support().arch]
    _syscall(
        arch.capset,
        ctypes.cast(ctypes.byref(header), ctypes.c_void_p),
        ctypes.cast(data, ctypes.c_void_p),
    )
    if read_search:
        # Ambient, so that a command run as root still reads what gategraph can read.
        _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_RAISE, _CAP_DAC_READ_SEARCH)
    after = _capabilities()
    if after.get("CapEff", 0) & ~keep or after.get("CapPrm", 0) & ~keep:
        raise OSError(errno.EPERM, "could not drop the worker's capabilities")


def _fs_rights(abi: int) -> int:
    # Every right up to ABI 6 (the least `support` accepts): REFER (2), TRUNCATE (3),
    # IOCTL_DEV (5). ABI 7 adds none for files.
    assert abi >= LANDLOCK_ABI_NEEDED
    return _FS_ALL_ABI1 | _FS_REFER | _FS_TRUNCATE | _FS_IOCTL_DEV


def _restrict_files_and_network(writable: str, shared: Sequence[int], abi: int) -> None:
    handled = _fs_rights(abi)
    # Connecting is handled (refused) by `close_network`'s own layer, where the validation
    # does not declare the network.
    attr = _RulesetAttr(handled, _NET_BIND_TCP, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
    ruleset = _syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        ctypes.cast(ctypes.byref(attr), ctypes.c_void_p),
        ctypes.sizeof(attr),
        0,
    )
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        _add_path(ruleset, "/", read)
        _add_path(ruleset, os.devnull, _FS_WRITE_FILE | _FS_READ_FILE)
        _add_path(ruleset, writable, handled)
        for fd in shared:
            _add_rule(ruleset, fd, handled)
            os.close(fd)
        _syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _add_path(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            # A file takes only a file's rights (the kernel refuses folder rights on it).
            rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        _add_rule(ruleset, fd, rights)
    finally:
        os.close(fd)


def _add_rule(ruleset: int, fd: int, rights: int) -> None:
    rule = _PathBeneathAttr(rights, fd)
    _syscall(
        _SYS_LANDLOCK_ADD_RULE,
        ruleset,
        _LANDLOCK_RULE_PATH_BENEATH,
        ctypes.cast(ctypes.byref(rule), ctypes.c_void_p),
        0,
    )


def _filter_syscalls(arch: _Arch) -> None:
    """A classic BPF program: another ABI's syscalls kill the process; the denied ones
    fail with their errno; everything else is allowed."""
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    program: list[tuple[int, int, int, int]] = [
        (ld_w_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq_k, 1, 0, arch.audit),
        (ret_k, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (ld_w_abs, 0, 0, 0),  # seccomp_data.nr
    ]
    if arch.audit == _ARCHES["x86_64"].audit:
        program += [(jge_k, 0, 1, _X32_SYSCALL_BIT), (ret_k, 0, 0, _SECCOMP_RET_KILL_PROCESS)]
    for number, err in arch.denied:
        if number != arch.socket:
            program += [(jeq_k, 0, 1, number), (ret_k, 0, 0, _SECCOMP_RET_ERRNO | err)]
    program += [
        (jeq_k, 0, 5, arch.socket),
        (ld_w_abs, 0, 0, 16),  # args[0]'s low word: the address family
        (jeq_k, 2, 0, _AF_INET),
        (jeq_k, 1, 0, _AF_INET6),
        (ret_k, 0, 0, _SECCOMP_RET_ERRNO | errno.EACCES),
        (ret_k, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    and_k = 0x54
    program += [
        (jeq_k, 0, 5, arch.clone),
        (ld_w_abs, 0, 0, 16),  # args[0]'s low word (both arches are little-endian): flags
        (and_k, 0, 0, _CLONE_REFUSED),
        (jeq_k, 1, 0, 0),
        (ret_k, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
        (ret_k, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    program.append((ret_k, 0, 0, _SECCOMP_RET_ALLOW))
    _install_filter(program)


def _install_filter(program: list[tuple[int, int, int, int]]) -> None:
    """Add a classic BPF program to this thread's seccomp filters (they only stack)."""
    code = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
