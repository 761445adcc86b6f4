"""A real project's test suite, gated three ways, side by side.

    gategraph bench --scenario suite [--project FOLDER] [--repeat 5]

What a team does many times a day: run a project's own tests on a change. The same suite
runs, in one process, rotating from round to round:

- ``sandbox``: the built-in ``pytest_suite`` validation with no ``isolation:`` written, as a
  user gets it: in the kernel sandbox (it runs the candidate's own code), on the disposable
  copy the validation makes;
- ``process``: the same validation with ``isolation: process`` (a worker process under the
  in-process guard, a choice to trust the code);
- ``by_hand``: ``python -m pytest -q -p no:cacheprovider <tests>`` run in the project folder
  itself, as a person would, with nothing copied.

Without ``--project`` the project is more-itertools 10.5.0 (664 tests, pure Python), whose
source release pip downloads once into gategraph's cache; where pip cannot fetch it, the
scenario says so and is skipped. A folder given with ``--project`` must have its tests in
``tests/`` and pass them (each run's result is checked after its clock stops).

Figures: each contender's wall time (min / median / max, seconds), and the ratios of the
medians: ``sandbox_vs_process`` (target: ≤ 1.1), ``sandbox_vs_by_hand`` and
``process_vs_by_hand``. One warm-up round first: the sandbox's workers and anyio's worker
processes are kept for the whole scenario, as a long-running gategraph keeps them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
from gategraph.benchmarks.harness import Contender, Sample, interleave, spread

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gategraph.benchmarks.harness import Settings

__all__ = ["PROJECT", "SuiteError", "measure_suite", "project_folder", "suite_contenders"]

PROJECT: Final = ("more-itertools", "10.5.0")
"""The default project: a pure-Python library whose source release carries its tests."""
TESTS: Final = "tests"
REPEATS: Final = 5
QUICK_REPEATS: Final = 2
CONTENDERS: Final = ("sandbox", "process", "by_hand")


class SuiteError(Exception):
    """The project's suite did not pass one of its runs: nothing to time."""


def _cache() -> Path:
    home = os.environ.get("GATEGRAPH_HOME")
    if home:
        return Path(home) / "bench-projects"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "gategraph" / "bench-projects"


_DOWNLOADING: Final = "download-"
"""The prefix of a download's folder in the cache, until it is renamed into place."""
_STALE: Final = 24 * 3600.0
"""Seconds after which a download's folder is one a killed run left behind."""


def project_folder(
    given: str | None, release: tuple[str, str] = PROJECT, tests: Sequence[str] = (TESTS,)
) -> tuple[Path | None, str]:
    """The project to measure and its name, or ``None`` and why it cannot be had: the folder
    the user named, else ``release`` (name, version), its source release downloaded once.
    Either must have the folders ``tests`` (a folder the user named without them is a
    :class:`SuiteError`; a release without them is never put in the cache)."""

    def missing(folder: Path) -> str | None:
        return next((test for test in tests if not (folder / test).is_dir()), None)

    if given is not None:
        folder = Path(given).resolve()
        absent = missing(folder)
        if absent is not None:
            raise SuiteError(f"--project {given}: no {absent}/ folder to run")
        return folder, folder.name
    name, version = release
    wanted = _cache() / f"{name}-{version}"
    if missing(wanted) is None:
        return wanted, f"{name} {version}"
    wanted.parent.mkdir(parents=True, exist_ok=True)
    for left in wanted.parent.glob(f"{_DOWNLOADING}*"):
        # A run killed while it downloaded: its folder goes (a day on, none is running).
        if time.time() - left.stat().st_mtime > _STALE:
            shutil.rmtree(left, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=_DOWNLOADING, dir=wanted.parent) as scratch:
        source = ("--no-binary", ":all:", "--dest", scratch, f"{name}=={version}")
        fetched = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *source],
            capture_output=True,
            text=True,
            check=False,
        )
        archives = sorted(Path(scratch).glob("*.tar.gz"))
        if fetched.returncode != 0 or not archives:
            last = (fetched.stderr.strip().splitlines() or ["no source release"])[-1]
            return None, f"pip could not fetch {name} {version} ({last}); pass --project FOLDER"
        with tarfile.open(archives[0]) as archive:
            _extract(archive, scratch)
        unpacked = next(p for p in Path(scratch).iterdir() if p.is_dir())
        absent = missing(unpacked)
        if absent is not None:
            return None, f"{name} {version}'s source release has no {absent}/ folder"
        try:
            # Renamed into place whole: an interrupted download leaves nothing half-made.
            os.replace(unpacked, wanted)
        except OSError as exc:
            if missing(wanted) is not None:  # not another run's, renamed there first
                return None, f"{wanted}: cannot be made ({exc.strerror}); remove it"
    return wanted, f"{name} {version}"


def _extract(archive: tarfile.TarFile, folder: str) -> None:
    """Unpack a source release: files and folders inside ``folder`` only."""
    if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
        archive.extractall(folder, filter="data")
        return
    members = archive.getmembers()
    for member in members:
        path = Path(member.name)
        if path.is_absolute() or ".." in path.parts or not (member.isfile() or member.isdir()):
            raise SuiteError(f"{archive.name!s}: {member.name!r} is not a plain file inside it")
    archive.extractall(folder, members=members)


def suite_contenders(folder: Path) -> list[Contender]:
    """The three ways of running ``folder``'s suite; each sample is one whole run."""
    from gategraph.runtime import execute_graph, load_graph, sandbox_pool

    def graph(isolation: str | None) -> Any:
        node: dict[str, Any] = {"id": "tests", "validation": "pytest_suite"}
        node["arguments"] = {"args": [TESTS, "-q"]}
        if isolation is not None:
            node["isolation"] = isolation
        return load_graph(
            {
                "version": 1,
                "name": "suite",
                "resources": {"repo": {"kind": "directory", "path": str(folder)}},
                "nodes": [node],
            }
        )

    def gated(name: str, isolation: str | None) -> Contender:
        loaded = graph(isolation)

        async def run() -> Sample:
            started = time.perf_counter()
            done = await execute_graph(loaded)
            wall = time.perf_counter() - started
            [record] = done.validations
            if not record.result.passed:
                raise SuiteError(
                    f"suite {name}: {record.result.message} (the suite must pass to be timed)"
                )
            if isolation is None and record.isolation != "sandbox":
                raise SuiteError(f"suite {name}: ran {record.isolation}, not sandboxed")
            return Sample(wall)

        return Contender(name, run, keeps=sandbox_pool if isolation is None else None)

    async def by_hand() -> Sample:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS]
        environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        started = time.perf_counter()
        ran = await anyio.run_process(command, cwd=folder, env=environment, check=False)
        wall = time.perf_counter() - started
        if ran.returncode != 0:
            raise SuiteError(
                f"suite by_hand: pytest exited with {ran.returncode} (the suite must pass to "
                "be timed)"
            )
        return Sample(wall)

    return [gated("sandbox", None), gated("process", "process"), Contender("by_hand", by_hand)]


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def measure_suite(settings: Settings) -> dict[str, Any]:
    """Wall seconds of each contender (min / median / max) and the ratios of the medians;
    ``skipped`` says why where no project could be had."""
    folder, name = project_folder(settings.project)
    if folder is None:
        return {"project": None, "skipped": name}
    repeats = settings.repeats or (QUICK_REPEATS if settings.quick else REPEATS)
    samples, _ = anyio.run(interleave, suite_contenders(folder), repeats, False, backend="asyncio")
    walls = {c: spread([s.wall for s in samples[c]]) for c in CONTENDERS}
    median = {c: walls[c]["median"] for c in CONTENDERS}
    return {
        "project": name,
        "tests": TESTS,
        "repeats": repeats,
        "skipped": None,
        **{f"{c}_s": walls[c] for c in CONTENDERS},
        "ratios": {
            "sandbox_vs_process": _ratio(median["sandbox"], median["process"]),
            "sandbox_vs_by_hand": _ratio(median["sandbox"], median["by_hand"]),
            "process_vs_by_hand": _ratio(median["process"], median["by_hand"]),
        },
    }


def suite_table(suite: dict[str, Any]) -> list[str]:
    """The scenario's lines of the Markdown report."""
    if suite["project"] is None:
        return [f"### suite — skipped: {suite['skipped']}"]
    ratios = suite["ratios"]
    lines = [
        f"### suite — {suite['project']}'s test suite, seconds a run "
        f"({suite['repeats']} rounds after a warm-up)",
        "",
        "| way | min | median | max | vs by hand |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = {
        "sandbox": "pytest_suite, default (sandbox)",
        "process": "pytest_suite, isolation: process",
        "by_hand": "pytest by hand, in the folder",
    }
    for contender in CONTENDERS:
        figures = suite[f"{contender}_s"]
        versus = _ratio(figures["median"], suite["by_hand_s"]["median"])
        lines.append(
            f"| {labels[contender]} | {figures['min']:.2f} | {figures['median']:.2f} "
            f"| {figures['max']:.2f} | {versus:.2f}x |"
        )
    lines += ["", f"sandbox vs process: {ratios['sandbox_vs_process']:.3f}x"]
    return lines


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("suite")
