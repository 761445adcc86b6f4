"""``unsafe_command``: shell commands in an artifact break no safety rule (seed 002,
"unsafe commands").

Each command line is split with :mod:`shlex` into simple commands at ``&&``, ``||``,
``;``, ``|``, ``&`` and parentheses; redirections (``>``, ``>>``, ``&>`` ...) are read
as writes to their target. Before a command's program is read, prefixes that run
another command are unwrapped: variable assignments (``A=1``), ``sudo``/``doas``
(which are a violation themselves), ``env``, ``nohup``, ``nice``, ``timeout``,
``time``, ``command``, ``builtin``, ``exec``, ``xargs``, ``stdbuf``, ``ionice``,
``setsid`` and ``busybox``, with their options. The string of ``sh -c '...'`` (any
shell), ``su -c '...'``, and the text of ``$(...)`` and backquote substitutions are
checked as commands in their own right.

The default policy is :data:`DEFAULT_RULES`; ``docs/validators.md`` has it as a table.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Final, NamedTuple

from ._common import (
    BAD_ARGUMENTS,
    BAD_ARTIFACT,
    ArgumentError,
    Result,
    check_strings,
    describe,
    failed,
    listing,
    plural,
    result,
    shorten,
)

__all__ = ["DEFAULT_RULES", "Rule", "unsafe_command"]


class Rule(NamedTuple):
    """One rule of the default policy."""

    id: str
    """The rule's name in ``data["violations"][*]["rule"]`` and in ``policy.allow``."""
    matches: str
    """What it matches, in words."""
    reason: str
    """Why that is unsafe."""


DEFAULT_RULES: Final = (
    Rule(
        "rm-rf-root",
        "`rm` with `-r`/`-R`/`--recursive` on `/`, `/*`, a system folder (`/etc`, `/usr` ...), "
        "`~` or `$HOME`, `*`, `.`, `..`; or `rm --no-preserve-root`",
        "deletes a whole tree that is not the project's to delete",
    ),
    Rule(
        "curl-pipe-shell",
        "`curl`/`wget`/`fetch` piped into a shell (`| sh`, `| sudo bash` ...), "
        '`bash <(curl ...)`, `sh -c "$(curl ...)"`',
        "runs code downloaded from the network without review",
    ),
    Rule("sudo", "`sudo`, `doas`, `su`, `pkexec`", "runs a command as root"),
    Rule(
        "chmod-777",
        "`chmod` (with or without `-R`) to a world-writable mode: `777`, `666`, `o+w`, `a+rwx` ...",
        "makes files writable by every user",
    ),
    Rule("mkfs", "`mkfs`, `mkfs.*`, `mke2fs`, `wipefs`", "creates or erases a file system"),
    Rule(
        "dd-device",
        "`dd of=/dev/...` (except `/dev/null`, `/dev/zero`, `/dev/stdout`, `/dev/stderr`, "
        "`/dev/tty`, `/dev/fd/N`)",
        "overwrites a device",
    ),
    Rule(
        "write-device",
        "a redirection (`>`, `>>`, `&>`) to a disk device (`/dev/sd*`, `/dev/nvme*`, "
        "`/dev/hd*`, `/dev/vd*`, `/dev/xvd*`, `/dev/mmcblk*`, `/dev/disk*`, `/dev/md*`, "
        "`/dev/dm-*`, `/dev/mapper/*`), or `tee`/`shred` on one, or `cp`/`mv` onto one",
        "overwrites a disk",
    ),
    Rule(
        "fork-bomb",
        "a function that pipes into itself in the background: `:(){ :|:& };:`",
        "exhausts the machine's processes",
    ),
    Rule(
        "git-force-push",
        "`git push` with `--force`, `-f` (alone or in a group like `-fu`) or a `+refspec`; "
        "`--force-with-lease` is allowed",
        "rewrites shared history",
    ),
    Rule("git-reset-hard", "`git reset --hard`", "throws away uncommitted work"),
    Rule(
        "shutdown",
        "`shutdown`, `reboot`, `halt`, `poweroff`; `systemctl poweroff|reboot|halt|kexec`; "
        "`init 0`/`init 6`",
        "stops or restarts the machine",
    ),
    Rule("eval", "`eval`", "runs a string as shell code, hiding what it does"),
    Rule(
        "unparseable",
        "a line `shlex` cannot split (an unclosed quote, a trailing `\\`)",
        "cannot be checked",
    ),
)
"""The default policy. ``policy.allow`` turns a rule off by its id or by its program."""

_REASONS: Final = {rule.id: rule.reason for rule in DEFAULT_RULES}
_MAX_DEPTH: Final = 4

_SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "fish", "csh", "tcsh"})
_DOWNLOADERS: Final = frozenset({"curl", "wget", "fetch"})
_ROOT_RUNNERS: Final = frozenset({"sudo", "doas", "su", "pkexec"})
_KEYWORDS: Final = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until"}
)
# Prefixes that run the rest of the line as a command: the options that take a value.
_WRAPPERS: Final[Mapping[str, frozenset[str]]] = {
    "sudo": frozenset(
        {
            "-u",
            "-g",
            "-h",
            "-p",
            "-C",
            "-D",
            "-r",
            "-t",
            "-U",
            "-T",
            "--user",
            "--group",
            "--host",
            "--prompt",
            "--close-from",
            "--chdir",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
        }
    ),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "nohup": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "xargs": frozenset(
        {
            "-I",
            "-n",
            "-P",
            "-d",
            "-E",
            "-L",
            "-s",
            "-a",
            "--max-args",
            "--max-procs",
            "--delimiter",
            "--eof",
            "--max-lines",
            "--max-chars",
            "--arg-file",
            "--replace",
        }
    ),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}),
    "setsid": frozenset(),
    "busybox": frozenset(),
    "pkexec": frozenset({"--user"}),
}
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_OPERATOR: Final = re.compile(r"[();<>|&]+")
_SUBSTITUTION: Final = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")
_FORK_BOMB: Final = re.compile(r"([\w:.]+)\s*\(\s*\)\s*\{[^}]*?\1\s*\|\s*\1\s*&")
_PROCESS_SUBSTITUTION: Final = re.compile(
    r"(?:^|[\s;&|(])(?:sh|bash|zsh|dash|ksh|source|\.)\b[^|;&]*<\(\s*(?:sudo\s+)?(?:curl|wget|fetch)\b"
)
_DOWNLOAD_SUBSTITUTION: Final = re.compile(r"(?:\$\(|`)\s*(?:curl|wget|fetch)\b")
_BLOCK_DEVICE: Final = re.compile(
    r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|md\d|dm-\d|mapper/)"
)
_HARMLESS_DEVICES: Final = re.compile(r"/dev/(?:null|zero|stdout|stderr|tty|fd/\d+)")
_SYSTEM_FOLDER: Final = re.compile(
    r"/+(?:bin|boot|dev|etc|home|lib|lib32|lib64|opt|proc|root|run|sbin|srv|sys|usr|var)/*\*?"
)
_WORLD_WRITABLE_SYMBOLIC: Final = re.compile(r"(?:^|,)[ugo]*[ao][ugo]*[+=][rwxXst]*w")


class _Violation(NamedTuple):
    rule: str
    reason: str
    programs: tuple[str, ...] = ()
    """Programs whose name in ``policy.allow`` turns this violation off."""


class _Command(NamedTuple):
    words: list[str]
    writes: list[str]


class _Deny(NamedTuple):
    program: str
    args_contain: tuple[str, ...]
    rule: str
    reason: str


# -- reading the artifact ------------------------------------------------------------------


def _lines(text: str) -> Iterator[str]:
    """Command lines: continuation lines joined, blanks, comments and ``$ `` prompts dropped."""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        if line.rstrip().endswith("\\") and not line.rstrip().endswith("\\\\"):
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:].strip()
        if line and not line.startswith("#"):
            yield line
    if pending.strip():
        yield pending.strip() + " \\"


def _command_lines(artifact: object) -> list[str]:
    value = artifact
    if isinstance(artifact, Mapping):
        if "commands" not in artifact:
            raise TypeError("the artifact is an object without a 'commands' key")
        value = artifact["commands"]
    if isinstance(value, str):
        return list(_lines(value))
    if isinstance(value, list | tuple):
        out: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise TypeError(f"commands must be strings, got {describe(item)}")
            out.extend(_lines(item))
        return out
    raise TypeError(
        "the artifact must be text (one command per line), a list of commands, "
        f"or an object with 'commands'; got {describe(value)}"
    )


# -- parsing -------------------------------------------------------------------------------


def _strip_comment(line: str) -> str:
    """Cut a ``#`` comment: a ``#`` outside quotes that starts a word, as the shell does."""
    quote = ""
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t;&|()"):
            return line[:index]
    return line


def _tokens(line: str) -> list[str]:
    # shlex would also start a comment at a "#" inside a word (`curl https://x/#a | sh`).
    lexer = shlex.shlex(_strip_comment(line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _pipelines(tokens: list[str]) -> list[list[_Command]]:
    """Split tokens into pipelines of simple commands, reading redirections as writes."""
    pipelines: list[list[_Command]] = [[]]
    words: list[str] = []
    writes: list[str] = []

    def close(pipe: bool) -> None:
        nonlocal words, writes
        if words or writes:
            pipelines[-1].append(_Command(words, writes))
        words, writes = [], []
        if not pipe and pipelines[-1]:
            pipelines.append([])

    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not _OPERATOR.fullmatch(token):
            words.append(token)
        elif token.endswith("(") or token in {"(", ")"}:
            close(pipe=False)  # a subshell or a process substitution: a command of its own
        elif ">" in token or "<" in token:
            target = tokens[index] if index < len(tokens) else ""
            if target and not _OPERATOR.fullmatch(target):
                index += 1
                if ">" in token:
                    writes.append(target)
        else:
            close(pipe=token in {"|", "|&"})
    close(pipe=False)
    return [p for p in pipelines if p]


def _skip_options(words: list[str], start: int, with_value: frozenset[str]) -> int:
    index = start
    while index < len(words) and words[index].startswith("-") and words[index] != "-":
        option = words[index]
        index += 1
        if option == "--":
            break
        if option in with_value:
            index += 1
    return index


def _unwrap(words: list[str]) -> tuple[list[str], list[str]]:
    """Return the wrappers in front of a command (``sudo``, ``env`` ...) and the command."""
    wrappers: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        name = posixpath.basename(word)
        if _ASSIGNMENT.fullmatch(word) or word in _KEYWORDS:
            index += 1
        elif name in _WRAPPERS:
            wrappers.append(name)
            index = _skip_options(words, index + 1, _WRAPPERS[name])
            if name == "env":
                while index < len(words) and _ASSIGNMENT.fullmatch(words[index]):
                    index += 1
            elif name == "timeout" and index < len(words):
                index += 1  # the duration
            elif name == "nice" and index < len(words) and re.fullmatch(r"-\d+", words[index]):
                index += 1
        else:
            break
    return wrappers, words[index:]


# -- the default rules ---------------------------------------------------------------------


def _rm_target(target: str) -> str | None:
    """What deleting ``target`` recursively would delete, when that is too much."""
    if re.fullmatch(r"/+\.?\*?", target):
        return "the whole file system"
    if re.fullmatch(r"(?:~[\w.-]*|\$HOME|\$\{HOME\})/*\.?\*?", target):
        return "a home folder"
    if target in {"*", ".", "./", "./*", ".*", "./.*"}:
        return "everything in the current folder"
    if re.fullmatch(r"\.\.(?:/+\.\.)*/*\*?", target):
        return "the parent folder"
    if _SYSTEM_FOLDER.fullmatch(target):
        return "a system folder"
    return None


def _check_rm(args: list[str]) -> Iterator[_Violation]:
    recursive = False
    targets: list[str] = []
    options_done = False
    for arg in args:
        if options_done or not arg.startswith("-") or arg == "-":
            targets.append(arg)
        elif arg == "--":
            options_done = True
        elif arg == "--no-preserve-root":
            yield _Violation("rm-rf-root", "rm --no-preserve-root can delete /", ("rm",))
        elif arg == "--recursive" or (not arg.startswith("--") and ("r" in arg or "R" in arg)):
            recursive = True
    if recursive:
        for target in targets:
            what = _rm_target(target)
            if what is not None:
                yield _Violation("rm-rf-root", f"rm -r {target} deletes {what}", ("rm",))


def _check_chmod(args: list[str]) -> Iterator[_Violation]:
    recursive = any(
        a == "--recursive" or re.fullmatch(r"-[a-zA-Z]*R[a-zA-Z]*", a) is not None for a in args
    )
    modes = [a for a in args if not a.startswith("-") or re.fullmatch(r"-[rwxXst]+", a)]
    if not modes:
        return
    mode = modes[0]
    numeric = re.fullmatch(r"[0-7]{3,4}", mode)
    if (numeric and int(mode[-1]) & 2) or (not numeric and _WORLD_WRITABLE_SYMBOLIC.search(mode)):
        how = " recursively" if recursive else ""
        yield _Violation(
            "chmod-777", f"chmod {mode} makes files writable by every user{how}", ("chmod",)
        )


def _check_git(args: list[str]) -> Iterator[_Violation]:
    index = _skip_options(
        args, 0, frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})
    )
    if index >= len(args):
        return
    sub, rest = args[index], args[index + 1 :]
    if sub == "push":
        for arg in rest:
            short_force = re.fullmatch(r"-[a-zA-Z]*f[a-zA-Z]*", arg) is not None
            if arg == "--force" or short_force or (arg.startswith("+") and len(arg) > 1):
                yield _Violation(
                    "git-force-push", f"git push {arg} {_REASONS['git-force-push']}", ("git",)
                )
                break
    elif sub == "reset" and "--hard" in rest:
        yield _Violation(
            "git-reset-hard", f"git reset --hard {_REASONS['git-reset-hard']}", ("git",)
        )


def _check_device_writes(program: str, args: list[str], writes: list[str]) -> Iterator[_Violation]:
    targets = [(w, "") for w in writes]
    operands = [a for a in args if not a.startswith("-")]
    if program in {"tee", "shred"}:
        targets += [(a, program) for a in operands]
    elif program in {"cp", "mv", "install"} and operands:
        targets.append((operands[-1], program))
    for target, by in targets:
        if _BLOCK_DEVICE.match(target):
            what = f"{by} onto" if by else "a redirection to"
            yield _Violation(
                "write-device", f"{what} {target} overwrites a disk", (by,) if by else ()
            )


def _check_command(
    wrappers: list[str], words: list[str], writes: list[str]
) -> Iterator[_Violation]:
    for wrapper in wrappers:
        if wrapper in _ROOT_RUNNERS:
            yield _Violation("sudo", f"{wrapper} runs a command as root", (wrapper,))
    program = posixpath.basename(words[0]) if words else ""
    args = words[1:]
    yield from _check_device_writes(program, args, writes)
    if not program:
        return
    if program == "su":
        yield _Violation("sudo", "su runs a command as root", ("su",))
    if program == "rm":
        yield from _check_rm(args)
    elif program == "chmod":
        yield from _check_chmod(args)
    elif program.startswith("mkfs") or program in {"mke2fs", "wipefs"}:
        yield _Violation("mkfs", f"{program} {_REASONS['mkfs']}", (program,))
    elif program == "dd":
        for arg in args:
            if arg.startswith("of=/dev/") and not _HARMLESS_DEVICES.fullmatch(arg[3:]):
                yield _Violation("dd-device", f"dd {arg} overwrites a device", ("dd",))
    elif program == "git":
        yield from _check_git(args)
    elif (
        program in {"shutdown", "reboot", "halt", "poweroff"}
        or (program == "systemctl" and {"poweroff", "reboot", "halt", "kexec"} & set(args))
        or (program in {"init", "telinit"} and args[:1] in (["0"], ["6"]))
    ):
        shown = (
            program
            if program in {"shutdown", "reboot", "halt", "poweroff"}
            else (f"{program} {args[0] if program != 'systemctl' else ' '.join(args)}")
        )
        yield _Violation("shutdown", f"{shown} {_REASONS['shutdown']}", (program,))
    elif program == "eval":
        yield _Violation("eval", _REASONS["eval"], ("eval",))


def _inner_script(program: str, args: list[str]) -> str | None:
    """The command string of ``sh -c '...'`` or ``su -c '...'``."""
    if program not in _SHELLS and program != "su":
        return None
    for index, arg in enumerate(args):
        if arg in {"-c", "--command"} or (
            re.fullmatch(r"-[a-zA-Z]+", arg) and "c" in arg and program != "su"
        ):
            return args[index + 1] if index + 1 < len(args) else None
    return None


def _substitutions(line: str) -> Iterator[str]:
    """The command lines inside ``$(...)`` and backquotes."""
    for match in _SUBSTITUTION.finditer(line):
        inner = match.group(1) if match.group(1) is not None else match.group(2)
        yield from _lines(inner)


# -- the checker ---------------------------------------------------------------------------


class _Checker:
    def __init__(self, deny: list[_Deny], allow: frozenset[str]) -> None:
        self.deny = deny
        self.allow = allow

    def _allowed(self, violation: _Violation) -> bool:
        return violation.rule in self.allow or any(p in self.allow for p in violation.programs if p)

    def check_line(self, line: str, depth: int = 0) -> Iterator[tuple[str, str]]:
        for violation in self._defaults(line, depth):
            if not self._allowed(violation):
                yield violation.rule, violation.reason
        if self.deny:
            yield from self._denied(line, depth)

    def _defaults(self, line: str, depth: int) -> Iterator[_Violation]:
        code = _strip_comment(line)
        if _FORK_BOMB.search(code):
            yield _Violation("fork-bomb", _REASONS["fork-bomb"])
        if _PROCESS_SUBSTITUTION.search(code):
            yield _Violation(
                "curl-pipe-shell", "a shell runs a downloaded script", tuple(_DOWNLOADERS)
            )
        try:
            tokens = _tokens(line)
        except ValueError as exc:
            yield _Violation("unparseable", f"cannot parse: {exc}")
            return
        for pipeline in _pipelines(tokens):
            downloader = ""
            for command in pipeline:
                wrappers, words = _unwrap(command.words)
                yield from _check_command(wrappers, words, command.writes)
                program = posixpath.basename(words[0]) if words else ""
                if program in _DOWNLOADERS:
                    downloader = program
                elif program in _SHELLS and downloader:
                    yield _Violation(
                        "curl-pipe-shell",
                        f"{downloader} | {program} {_REASONS['curl-pipe-shell']}",
                        (downloader,),
                    )
                script = _inner_script(program, words[1:])
                if script is not None and depth < _MAX_DEPTH:
                    if program in _SHELLS and _DOWNLOAD_SUBSTITUTION.search(script):
                        yield _Violation(
                            "curl-pipe-shell",
                            f"{program} -c runs a downloaded script",
                            tuple(_DOWNLOADERS),
                        )
                    for inner in _lines(script):
                        yield from self._defaults(inner, depth + 1)
        if depth < _MAX_DEPTH:
            for inner in _substitutions(code):
                yield from self._defaults(inner, depth + 1)

    def _denied(self, line: str, depth: int) -> Iterator[tuple[str, str]]:
        try:
            tokens = _tokens(line)
        except ValueError:
            return
        for pipeline in _pipelines(tokens):
            for command in pipeline:
                wrappers, words = _unwrap(command.words)
                program = posixpath.basename(words[0]) if words else ""
                args = words[1:]
                for rule in self.deny:
                    if rule.args_contain:
                        hit = program == rule.program and all(a in args for a in rule.args_contain)
                    else:
                        hit = rule.program == program or rule.program in wrappers
                    if hit:
                        yield rule.rule, rule.reason
                script = _inner_script(program, args)
                if script is not None and depth < _MAX_DEPTH:
                    for inner in _lines(script):
                        yield from self._denied(inner, depth + 1)
        if depth < _MAX_DEPTH:
            for inner in _substitutions(_strip_comment(line)):
                yield from self._denied(inner, depth + 1)


def _read_policy(policy: object) -> tuple[list[_Deny], frozenset[str]]:
    if policy is None:
        return [], frozenset()
    if not isinstance(policy, Mapping):
        raise ArgumentError(f"policy must be an object, got {describe(policy)}")
    unknown = sorted(str(k) for k in policy if k not in {"deny", "allow"})
    if unknown:
        raise ArgumentError(f"policy: unknown key {unknown[0]!r} (use 'deny' and 'allow')")
    allow = frozenset(check_strings("policy.allow", policy.get("allow", [])))
    entries = policy.get("deny", [])
    if isinstance(entries, str) or not isinstance(entries, list | tuple):
        raise ArgumentError(f"policy.deny must be a list, got {describe(entries)}")
    deny = []
    for index, entry in enumerate(entries):
        where = f"policy.deny[{index}]"
        if isinstance(entry, str):
            entry = {"program": entry}
        if not isinstance(entry, Mapping):
            raise ArgumentError(
                f"{where} must be a program name or an object, got {describe(entry)}"
            )
        extra = sorted(
            str(k) for k in entry if k not in {"program", "args_contain", "reason", "rule"}
        )
        if extra:
            raise ArgumentError(
                f"{where}: unknown key {extra[0]!r} (use program, args_contain, reason, rule)"
            )
        program = entry.get("program")
        if not isinstance(program, str) or not program.strip():
            raise ArgumentError(f"{where}.program must be a program name")
        contain = entry.get("args_contain", [])
        contains = (
            [contain]
            if isinstance(contain, str)
            else check_strings(f"{where}.args_contain", contain)
        )
        reason = entry.get("reason", f"{program} is denied by the policy")
        rule = entry.get("rule", "policy")
        if not isinstance(reason, str) or not isinstance(rule, str):
            raise ArgumentError(f"{where}: reason and rule must be strings")
        deny.append(_Deny(program.strip(), tuple(contains), rule, reason))
    return deny, allow


def unsafe_command(*, artifact: object, policy: object = None) -> Result:
    """Check shell commands against a safety policy.

    Arguments:
        artifact: the commands: text with one command per line (``\\`` continues a
            line; blank lines, ``#`` comments and a leading ``$ `` prompt are ignored), a
            list of such texts, or an object whose ``commands`` key holds either.
        policy: changes to the default policy (:data:`DEFAULT_RULES`):
            ``deny`` — more rules: a program name (any use of it), or
            ``{program, args_contain?, reason?, rule?}`` where ``args_contain`` (a string
            or a list) must all be among the program's arguments, ``rule`` names the rule
            in the result (default ``policy``);
            ``allow`` — program names or default rule ids that turn default rules off
            (``allow: [sudo]``, ``allow: [git-force-push]``); ``deny`` rules still apply.

    Data:
        commands: how many command lines were checked.
        violations: ``{"command": line, "rule": rule id, "reason": why}`` for each broken
            rule, in order.
    """
    try:
        deny, allow = _read_policy(policy)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    try:
        lines = _command_lines(artifact)
    except TypeError as exc:
        return failed(BAD_ARTIFACT, str(exc))
    checker = _Checker(deny, allow)
    violations: list[dict[str, str]] = []
    bad_lines: list[str] = []
    for line in lines:
        seen: set[tuple[str, str]] = set()
        for rule, reason in checker.check_line(line):
            if (rule, reason) not in seen:
                seen.add((rule, reason))
                violations.append({"command": line, "rule": rule, "reason": reason})
        if seen:
            bad_lines.append(f"{shorten(line, 60)} ({', '.join(sorted({r for r, _ in seen}))})")
    data = {"commands": len(lines), "violations": violations}
    if not lines:
        return result(True, "No commands to check", **data)
    if not violations:
        return result(True, f"{plural(len(lines), 'command')} checked, none unsafe", **data)
    return result(
        False,
        f"{len(bad_lines)} of {plural(len(lines), 'command')} unsafe: {listing(bad_lines, 3, '; ')}",
        **data,
    )
