"""Confinement by the Linux kernel, for the worker processes of ``isolation: sandbox``.

A sandboxed worker confines itself once, at its start, while it is still single-threaded
(every later thread and child inherits the confinement, and nothing can lift it):

- **Landlock** (Linux 5.13+, ABI 6 = Linux 6.12 needed here): reading and executing are
  allowed everywhere; creating, writing, truncating, renaming, linking and removing only
  beneath the worker's own folder (and writing to ``/dev/null``); every TCP bind and
  connect is refused; signals and abstract Unix sockets cannot reach outside the worker.
- **seccomp**: ``socket()`` fails (no UDP, raw, netlink or Unix-path socket either, which
  Landlock does not cover), so does ``io_uring_setup`` (its operations bypass the
  syscall filter), and ``setsid``/``setpgid`` (every process the call starts stays in the
  worker's process group, so killing the group ends them all).
- **capabilities**: all dropped, for good (a worker running as root keeps only reading
  files it does not own); ``no_new_privs`` stops set-uid programs from regaining any.
- **resource limits**: address space, CPU seconds, file size, open files, no core dumps.

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
import resource
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Final

__all__ = ["SandboxLimits", "Support", "confine", "sandbox_support", "support"]

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
_SECCOMP_MODE_FILTER: Final = 2
# SECBIT_NOROOT and NO_SETUID_FIXUP, each locked, and KEEP_CAPS_LOCKED: uid 0 gains no
# capability on exec, and nothing can turn that back.
_SECUREBITS: Final = 0b101111
_CAP_DAC_READ_SEARCH: Final = 2
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
    denied: tuple[tuple[int, int], ...]  # (syscall, errno)


_DENIED: Final = (
    "socket",  # no socket of any kind: Landlock does not cover UDP, raw or Unix paths
    "io_uring_setup",  # its operations bypass this filter
    "setsid",  # every process of a call stays in the worker's process group
    "setpgid",
    "clone3",  # ENOSYS: the C library falls back to clone, whose flags are checked
    "memfd_create",  # memory outside the address-space limit
    "shmget",  # System V objects outlive the worker
    "msgget",
    "semget",
)
_ERRNO: Final = {"socket": errno.EACCES, "clone3": errno.ENOSYS}
_NUMBERS: Final = {
    "x86_64": (41, 425, 112, 109, 435, 319, 29, 68, 64),
    "aarch64": (198, 425, 157, 154, 435, 279, 194, 186, 190),
}
_ARCHES: Final = {
    arch: _Arch(
        audit,
        capset,
        clone,
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
_CLONE_PARENT: Final = 0x8000
"""A clone flag that would make the new process a sibling of the worker, outside it."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


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


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


def _syscall(number: int, *args: int | ctypes.c_void_p | None) -> int:
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


_support: Support | None = None


def support() -> Support:
    """Probe (once per process) whether this machine can confine a sandboxed worker:
    ``support().missing`` is None when it can, else what is missing, in one line."""
    global _support
    if _support is None:
        _support = _probe()
    return _support


def _probe() -> Support:
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
    """CPU seconds over the worker's life (it is replaced before it runs out)."""
    file_size: int = 1 << 30
    """The largest file a process may write, in bytes."""
    open_files: int = 1024


def confine(writable: str, limits: SandboxLimits) -> None:
    """Confine this process for good: see the module's docstring. ``writable`` is the only
    folder it may change. Must run before the process starts any thread."""
    found = support()
    if found.missing is not None:
        raise OSError(errno.ENOTSUP, found.missing)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1 or threading.active_count() != 1:
        # Landlock and seccomp bind the calling thread and what it starts from now on.
        raise RuntimeError(f"cannot confine a process that runs {threads} threads")
    _set_limits(limits)
    try:
        # The first the kernel kills when memory runs out: a worker, not gategraph.
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as score:
            score.write("1000")
    except OSError:
        pass  # no /proc: the limits above still bound the worker's memory
    # Descendants orphaned by the call are adopted by the worker, so it sees (and its
    # process group's end takes) every process the call left behind.
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _drop_capabilities()
    _restrict_files_and_network(writable, found.landlock_abi)
    _filter_syscalls(_ARCHES[found.arch])


def _set_limits(limits: SandboxLimits) -> None:
    for which, value in (
        (resource.RLIMIT_AS, limits.address_space),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
    ):
        _soft, hard = resource.getrlimit(which)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (cap, cap))


def _capabilities() -> dict[str, int]:
    found = {}
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Cap"):
                name, value = line.split(":", 1)
                found[name] = int(value.strip(), 16)
    return found


def _drop_capabilities() -> None:
    caps = _capabilities()
    if not any(caps.values()):
        return  # an ordinary user: nothing to give up, and no_new_privs keeps it so
    keep = 1 << _CAP_DAC_READ_SEARCH
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
        last_cap = int(last.read())
    if caps.get("CapBnd", 0) and caps.get("CapEff", 0) & (1 << 8):  # CAP_SETPCAP
        for cap in range(last_cap + 1):
            if cap != _CAP_DAC_READ_SEARCH:
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


def _restrict_files_and_network(writable: str, abi: int) -> None:
    handled = _fs_rights(abi)
    attr = _RulesetAttr(
        handled, _NET_BIND_TCP | _NET_CONNECT_TCP, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL
    )
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
        _syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)


def _add_path(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        if not os.path.isdir(path):
            # A file takes only a file's rights (the kernel refuses folder rights on it).
            rights &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = _PathBeneathAttr(rights, fd)
        _syscall(
            _SYS_LANDLOCK_ADD_RULE,
            ruleset,
            _LANDLOCK_RULE_PATH_BENEATH,
            ctypes.cast(ctypes.byref(rule), ctypes.c_void_p),
            0,
        )
    finally:
        os.close(fd)


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
        program += [(jeq_k, 0, 1, number), (ret_k, 0, 0, _SECCOMP_RET_ERRNO | err)]
    and_k = 0x54
    program += [
        (jeq_k, 0, 5, arch.clone),
        (ld_w_abs, 0, 0, 16),  # args[0]'s low word (both arches are little-endian): flags
        (and_k, 0, 0, _CLONE_PARENT),
        (jeq_k, 1, 0, 0),
        (ret_k, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
        (ret_k, 0, 0, _SECCOMP_RET_ALLOW),
    ]
    program.append((ret_k, 0, 0, _SECCOMP_RET_ALLOW))
    code = b"".join(struct.pack("=HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog))
