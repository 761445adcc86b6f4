"""An agent's edit of a real project, gated by ``gategraph run``, against the same checks by
hand.

    gategraph bench --scenario project [--project FOLDER] [--repeat 3]

Real work, as a user meets it: an agent changes one module of a project, and the change
must parse and keep the project's tests passing. Three ways, in one process, rotating from
round to round, each on a fresh copy of the project made before its clock starts:

- ``gated``: ``gategraph run plan.yaml``, the command line in a process of its own, with
  a fresh ``GATEGRAPH_HOME`` and nothing but defaults: a work tool (inline ``code:``)
  appends a function to the module, then the built-in ``python_syntax`` and
  ``pytest_suite`` validations check the change (both required), and Apply writes it to
  the copy;
- ``by_hand_sequential``: the same edit already made, a person runs a syntax check of
  every ``.py`` file (``compile`` to an AST), then ``python -m pytest -q -p
  no:cacheprovider <tests>``, one after the other;
- ``by_hand_parallel``: the same two commands started at once, until both end.

Two projects side by side: a small one, more-itertools 10.5.0 (its ``tests``), and a large
one, networkx 3.4.2 (three of its test folders, 2,059 tests), both source releases that pip
downloads once into gategraph's cache (:func:`~.bench_suite.project_folder`); a project
pip cannot fetch is skipped, with the reason. ``--project FOLDER`` measures that folder
alone, its tests in ``tests/`` and the edit in its first module outside them.

Figures: each way's wall time (min / median / max, seconds), and the ratios of the medians
``gated_vs_sequential`` (target: ≤ 0.8) and ``gated_vs_parallel`` (target: ≤ 1.1). Each
run's checks must pass (checked after its clock stops), or nothing is timed. ``disk``
(:func:`measure_disk`, untimed): the most disk a first gated run takes beyond the tree,
against the change plus the store's first snapshot (target: ≤ 1.5x), and what a second run
of the same tree adds to the store. On a file system that shares blocks between copies
(btrfs, XFS), run it with ``TMPDIR`` there to see what reflinks save.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
from gategraph.benchmarks.bench_startup import help_command
from gategraph.benchmarks.bench_suite import PROJECT, TESTS, project_folder
from gategraph.benchmarks.harness import Contender, Sample, interleave, spread

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence

    from gategraph.benchmarks.harness import Settings

__all__ = ["PROJECTS", "Project", "ProjectError", "measure_project", "project_contenders"]

REPEATS: Final = 3
QUICK_REPEATS: Final = 2
CONTENDERS: Final = ("gated", "by_hand_sequential", "by_hand_parallel")
EDIT: Final = "\n\ndef _gategraph_bench_edit():\n    return 1\n"
"""What the agent adds: a new function at the end of the module."""


@dataclass(frozen=True, slots=True)
class Project:
    """A project to measure: where it comes from, what runs, what is edited."""

    size: str
    """``small``, ``large``, or ``given`` (``--project``)."""
    tests: tuple[str, ...]
    """The test folders pytest runs, relative to the project."""
    module: str
    """The module the edit goes into, relative to the project."""
    release: tuple[str, str] | None = None
    """Its source release, name and version (``None``: a folder the user named)."""


PROJECTS: Final = (
    Project("small", (TESTS,), "more_itertools/recipes.py", PROJECT),
    # A slice of networkx's tests (2,059 in three folders), about 20 s by hand on 2 cores:
    # large enough that a run is mostly the tests, small enough for a round near a minute.
    Project(
        "large",
        ("networkx/classes", "networkx/algorithms/shortest_paths", "networkx/generators"),
        "networkx/utils/misc.py",
        ("networkx", "3.4.2"),
    ),
)


class ProjectError(Exception):
    """The checks did not pass on one of the runs, or the edit was not made: nothing to
    time."""


# A person's syntax check: every file compiled to an AST, as `python_syntax` does, nothing
# written (no bytecode).
_SYNTAX: Final = """\
import ast, pathlib, sys
bad = 0
for path in sorted(pathlib.Path(".").rglob("*.py")):
    if ".git" in path.parts:
        continue
    try:
        compile(path.read_bytes(), str(path), "exec", flags=ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
"""

# The tool as an agent's step: inline code that appends to the module it is told.
_TOOL: Final = """\
from pathlib import Path

def run(root, module, text, **_):
    with open(Path(root, module), "a", encoding="utf-8") as opened:
        opened.write(text)
    return {"files": [module]}
"""


def _module(folder: Path, tests: tuple[str, ...]) -> str:
    """The first module of ``folder`` outside its tests and hidden folders."""
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        if relative.parts[0] not in tests and not any(p.startswith(".") for p in relative.parts):
            return relative.as_posix()
    raise ProjectError(f"{folder}: no Python module outside {', '.join(tests)} to edit")


def _plan(copy: Path, project: Project) -> str:
    """The plan graph ``gategraph run`` is given, as YAML."""
    import yaml

    graph = {
        "version": 1,
        "name": "bench-project",
        "description": f"An agent's edit of {project.module}, gated on the project's checks.",
        "resources": {"repo": {"kind": "directory", "path": str(copy)}},
        "tools": [
            {
                "name": "edit",
                "description": "Append a function to a module.",
                "resource_slots": [{"name": "root", "kind": "directory"}],
                "code": _TOOL,
            }
        ],
        "nodes": [
            {
                "id": "edit",
                "tool": "edit",
                "resources": ["repo"],
                "arguments": {"module": project.module, "text": EDIT},
            },
            {
                "id": "syntax",
                "validation": "python_syntax",
                "needs": ["edit"],
                "resources": ["repo"],
            },
            {
                "id": "tests",
                "validation": "pytest_suite",
                "needs": ["edit"],
                "resources": ["repo"],
                "arguments": {"args": [*project.tests, "-q"]},
            },
        ],
    }
    return yaml.safe_dump(graph, sort_keys=False)


def _why(ran: subprocess.CompletedProcess[bytes]) -> str:
    """The line of a failed command's output that says why: gategraph's first failed
    validation, else the last line written (pytest's summary, an error)."""
    out = ran.stdout.decode(errors="replace").splitlines()
    failed = [line.strip() for line in out if line.lstrip().startswith("FAIL ")]
    said = ran.stderr.decode(errors="replace").splitlines() or out
    return failed[0] if failed else (said or ["no output"])[-1].strip()


def project_contenders(folder: Path, project: Project, name: str, scratch: Path) -> list[Contender]:
    """The three ways of checking the edit of ``folder`` (the project ``name``); each sample
    is one whole run on a copy made in ``scratch`` before its clock starts, removed after
    it stops."""
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    syntax = [sys.executable, "-c", _SYNTAX]
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *project.tests]
    # The console script a user runs, as the startup scenario finds it.
    gategraph = help_command()[:-1]

    @contextlib.contextmanager
    def fresh() -> Iterator[Path]:
        """A copy of the project, in a folder of its own, removed once the sample is done."""
        sample = Path(tempfile.mkdtemp(prefix="sample-", dir=scratch))
        try:
            shutil.copytree(folder, sample / folder.name, symlinks=True)
            yield sample / folder.name
        finally:
            shutil.rmtree(sample, ignore_errors=True)

    def edit(copy: Path) -> None:
        with open(copy / project.module, "a", encoding="utf-8") as module:
            module.write(EDIT)

    def edited(copy: Path) -> bool:
        return (copy / project.module).read_text(encoding="utf-8").endswith(EDIT)

    def failed(way: str, what: str, ran: subprocess.CompletedProcess[bytes]) -> ProjectError:
        return ProjectError(
            f"project {name} {way}: {what} exited with {ran.returncode} (the checks must "
            f"pass to be timed): {_why(ran)}"
        )

    async def check(command: list[str], copy: Path) -> subprocess.CompletedProcess[bytes]:
        return await anyio.run_process(
            command, cwd=copy, env=environment, stdin=subprocess.DEVNULL, check=False
        )

    async def gated() -> Sample:
        with fresh() as copy:
            plan = copy.with_name("plan.yaml")
            plan.write_text(_plan(copy, project), encoding="utf-8")
            # A home of its own each time: a first run, as on a machine gategraph is new to.
            home = {**os.environ, "GATEGRAPH_HOME": str(copy.with_name("home"))}
            # gategraph's own modules load from their bytecode, as from an install (the
            # project's tests are run without it all the same: pytest_suite says so).
            home.pop("PYTHONDONTWRITEBYTECODE", None)
            started = time.perf_counter()
            ran = await anyio.run_process(
                [*gategraph, "run", str(plan)],
                cwd=copy.parent,
                env=home,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            wall = time.perf_counter() - started
            if ran.returncode != 0:
                raise failed("gated", "gategraph run", ran)
            if not edited(copy):
                raise ProjectError(f"project {name} gated: the edit was not applied")
            return Sample(wall)

    def by_hand(
        way: str, both: Callable[[Path], Awaitable[list[subprocess.CompletedProcess[bytes]]]]
    ) -> Contender:
        async def run() -> Sample:
            with fresh() as copy:
                edit(copy)
                started = time.perf_counter()
                done = await both(copy)
                wall = time.perf_counter() - started
                for what, ran in zip(("the syntax check", "pytest"), done, strict=True):
                    if ran.returncode != 0:
                        raise failed(way, what, ran)
                return Sample(wall)

        return Contender(way, run)

    async def sequential(copy: Path) -> list[subprocess.CompletedProcess[bytes]]:
        return [await check(syntax, copy), await check(pytest, copy)]

    async def parallel(copy: Path) -> list[subprocess.CompletedProcess[bytes]]:
        done: dict[int, subprocess.CompletedProcess[bytes]] = {}

        async def one(index: int, command: list[str]) -> None:
            done[index] = await check(command, copy)

        async with anyio.create_task_group() as group:
            group.start_soon(one, 0, syntax)
            group.start_soon(one, 1, pytest)
        return [done[0], done[1]]

    # By hand first: its warm-up is the first run, so a project whose own checks fail
    # stops the scenario at once, in pytest's words, before gategraph retries the change.
    return [
        by_hand("by_hand_sequential", sequential),
        by_hand("by_hand_parallel", parallel),
        Contender("gated", gated),
    ]


def _disk_use(paths: Sequence[Path]) -> int:
    """Bytes of disk the files under ``paths`` take (their blocks, each file once however
    many links it has; links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [os.fspath(p) for p in paths]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # gone meanwhile (a sandbox removed as the plan ends)
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def _fs_used(path: Path) -> int:
    """Bytes in use on the file system that holds ``path``."""
    info = os.statvfs(path)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def _sampled(command: list[str], env: dict[str, str], cwd: Path, paths: Sequence[Path]) -> int:
    """Run ``command`` to its end; the most disk the files under ``paths`` took meanwhile
    (sampled every 20 ms, and once at the end).

    Each sample is the lesser of two measures: the files' blocks, which count in full a
    block two files share (as a reflinked copy does), and what the file system holding
    ``cwd`` lost since the run began, which is exact only while nothing else writes to or
    frees space on it (a quiet machine)."""
    start = _fs_used(cwd)

    def now() -> int:
        return min(_disk_use(paths), max(0, _fs_used(cwd) - start))

    peak = 0
    with subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as ran:
        while ran.poll() is None:
            peak = max(peak, now())
            time.sleep(0.02)
        _, err = ran.communicate()
    if ran.returncode != 0:
        raise ProjectError(f"gategraph run exited with {ran.returncode}: {err.decode()[-300:]}")
    return max(peak, now())


def measure_disk(folder: Path, project: Project, scratch: Path) -> dict[str, Any]:
    """What gated runs of ``project`` write to disk, in a run of their own (the sampling
    costs time): the peak of gategraph's home and temporary folder during a first run on a
    fresh home, what the change is (the edited module), the content store after it (its
    first snapshot), and what a second run of the same tree, with one more edit, adds to
    the store."""
    sample = Path(tempfile.mkdtemp(prefix="disk-", dir=scratch))
    copy = sample / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    plan = sample / "plan.yaml"
    plan.write_text(_plan(copy, project), encoding="utf-8")
    home, temporary = sample / "home", sample / "tmp"
    temporary.mkdir()
    env = {**os.environ, "GATEGRAPH_HOME": str(home), "TMPDIR": str(temporary)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    command = [*help_command()[:-1], "run", str(plan)]
    first_peak = _sampled(command, env, sample, [home, temporary])
    changed = (copy / project.module).stat().st_size
    store = _disk_use([home / "store"])
    second_peak = _sampled(command, env, sample, [home, temporary])
    grown = _disk_use([home / "store"]) - store
    mib = 1 << 20
    return {
        "tree_mib": round(_disk_use([folder]) / mib, 2),
        "changed_kib": round(changed / 1024, 1),
        "first_snapshot_mib": round(store / mib, 2),
        "first_peak_extra_mib": round(first_peak / mib, 2),
        "first_peak_vs_change_and_snapshot": _ratio(first_peak, changed + store),
        "second_peak_extra_mib": round(second_peak / mib, 2),
        "second_store_growth_kib": round(grown / 1024, 1),
    }


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def _projects(settings: Settings) -> list[tuple[Project, Path | None, str]]:
    """Each project with its folder and name, or ``None`` and why it is skipped."""
    if settings.project is None:
        return [
            (p, *project_folder(None, p.release, p.tests))
            for p in PROJECTS
            if p.release is not None
        ]
    folder, name = project_folder(settings.project)
    if folder is None:  # never: a folder the user named is there, or a SuiteError
        return []
    return [(Project("given", (TESTS,), _module(folder, (TESTS,))), folder, name)]


def measure_project(settings: Settings) -> dict[str, Any]:
    """Per project, the wall seconds of each way (min / median / max) and the ratios of the
    medians; a project that could not be had has ``project: null`` and ``skipped``."""
    repeats = settings.repeats or (QUICK_REPEATS if settings.quick else REPEATS)
    measured: list[dict[str, Any]] = []
    for project, folder, name in _projects(settings):
        if folder is None:
            measured.append({"size": project.size, "project": None, "skipped": name})
            continue
        if settings.progress is not None:
            settings.progress(f"project: {name} ({project.size}), {repeats} rounds")
        with tempfile.TemporaryDirectory(prefix="gategraph-bench-project-") as scratch:
            contenders = project_contenders(folder, project, name, Path(scratch))
            samples, _ = anyio.run(interleave, contenders, repeats, False, backend="asyncio")
            disk = measure_disk(folder, project, Path(scratch))
        walls = {c: spread([s.wall for s in samples[c]]) for c in CONTENDERS}
        median = {c: walls[c]["median"] for c in CONTENDERS}
        measured.append(
            {
                "size": project.size,
                "project": name,
                "skipped": None,
                "tests": list(project.tests),
                "module": project.module,
                **{f"{c}_s": walls[c] for c in CONTENDERS},
                "ratios": {
                    "gated_vs_sequential": _ratio(median["gated"], median["by_hand_sequential"]),
                    "gated_vs_parallel": _ratio(median["gated"], median["by_hand_parallel"]),
                },
                "disk": disk,
            }
        )
    return {"repeats": repeats, "projects": measured}


def project_table(report: dict[str, Any]) -> list[str]:
    """The scenario's lines of the Markdown report."""
    lines = [
        "### project — an agent's edit of a real project, its syntax and tests checked, "
        f"seconds a run ({report['repeats']} rounds after a warm-up)",
        "",
        "| project | way | min | median | max | gated vs this |",
        "|---|---|---:|---:|---:|---:|",
    ]
    labels = {
        "gated": "gategraph run (edit, python_syntax + pytest_suite, apply)",
        "by_hand_sequential": "by hand, syntax check then pytest",
        "by_hand_parallel": "by hand, both at once",
    }
    skipped: list[str] = []
    for entry in report["projects"]:
        if entry["project"] is None:
            skipped.append(f"{entry['size']} project skipped: {entry['skipped']}")
            continue
        shown = f"{entry['project']} ({entry['size']})"
        for contender in CONTENDERS:
            figures = entry[f"{contender}_s"]
            versus = _ratio(entry["gated_s"]["median"], figures["median"])
            lines.append(
                f"| {shown} | {labels[contender]} | {figures['min']:.2f} "
                f"| {figures['median']:.2f} | {figures['max']:.2f} "
                f"| {'—' if versus is None else f'{versus:.2f}x'} |"
            )
    lines.append("")
    for entry in report["projects"]:
        if entry["project"] is not None:
            ratios = entry["ratios"]
            lines.append(
                f"{entry['project']}: gated vs sequential {_shown(ratios['gated_vs_sequential'])}"
                f", gated vs parallel {_shown(ratios['gated_vs_parallel'])}"
            )
            disk = entry["disk"]
            lines.append(
                f"{entry['project']} on disk: a first run's peak {disk['first_peak_extra_mib']} "
                f"MiB beyond the tree ({disk['tree_mib']} MiB), "
                f"{_shown(disk['first_peak_vs_change_and_snapshot'])} the change "
                f"({disk['changed_kib']} KiB) and the store's first snapshot "
                f"({disk['first_snapshot_mib']} MiB); a second run of the same tree adds "
                f"{disk['second_store_growth_kib']} KiB to the store (its peak "
                f"{disk['second_peak_extra_mib']} MiB)"
            )
    return lines + skipped


def _shown(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.3f}x"


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("project")
