"""``gategraph bench``: the benchmark harness as a command.

Only click is imported here: the harness, the engine and the baselines load when the command
runs, so that ``gategraph --help`` (which lists this command) stays fast.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["BenchError", "bench", "main_for"]

EXIT_USAGE = 2
EXIT_NOT_APPLIED = 1

_SCENARIOS = (
    "noop",
    "io",
    "sweep",
    "cpu-thread",
    "cpu-process",
    "sandbox",
    "mix",
    "eventlog",
    "plan",
    "backends",
    "ray",
    "startup",
    "embed",
    "suite",
    "project",
)
"""Every scenario, in run order (the harness's SCENARIO_ORDER, kept here so that parsing
the command line imports nothing else; a test pins the two together)."""
_ON_REQUEST = ("suite", "project")
"""Run only when named (``--scenario suite``, ``project`` or ``all``): the harness's
ON_REQUEST."""


class BenchError(click.ClickException):
    """A bad input to ``gategraph bench``: printed as ``error: ...`` lines, exit code 2."""

    exit_code = EXIT_USAGE

    def show(self, file: IO[Any] | None = None) -> None:
        for line in self.format_message().splitlines() or [""]:
            click.echo(f"error: {line}", err=True)


class _BenchCommand(click.Command):
    """Run on its own (a script, a test), errors look as they do under ``gategraph``: one
    ``error: ...`` line and exit code 2 for a usage error, not click's usage block."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "bench"
            click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        sys.exit(result if isinstance(result, int) else 0)


def _numbers(value: str | None, option: str, *, minimum: int = 1) -> tuple[int, ...] | None:
    """``"10,1000,100_000"`` → ``(10, 1000, 100000)``; a one-line error otherwise."""
    if value is None:
        return None
    found: list[int] = []
    for part in value.split(","):
        text = part.strip()
        try:
            number = int(text)
        except ValueError:
            number = minimum - 1
        if number < minimum:
            raise click.BadParameter(
                f"{text!r} is not a whole number ≥ {minimum} (expected a list like 10,1000)",
                param_hint=f"'{option}'",
            )
        found.append(number)
    return tuple(dict.fromkeys(found))


def _scenarios(values: Sequence[str]) -> list[str]:
    names: list[str] = []
    for value in values:
        for part in value.split(","):
            name = part.strip()
            if name == "all":
                names.extend(_SCENARIOS)
                continue
            if name not in _SCENARIOS:
                close = difflib.get_close_matches(name, _SCENARIOS, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise click.BadParameter(
                    f"unknown scenario {name!r}{hint}; one of: {', '.join(_SCENARIOS)}",
                    param_hint="'--scenario'",
                )
            names.append(name)
    return list(dict.fromkeys(names)) or [n for n in _SCENARIOS if n not in _ON_REQUEST]


def _writable(path: Path | None, option: str) -> None:
    # Checked before anything runs: a long benchmark must not end in "no such folder".
    if path is not None and not path.resolve().parent.is_dir():
        raise click.BadParameter(f"{path}: no such folder", param_hint=f"'{option}'")


def _progress(message: str) -> None:
    click.echo(f"… {message}", err=True)


@click.command(
    "bench",
    cls=_BenchCommand,
    short_help="Measure validation throughput against baselines in the same process.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument(
    "graph",
    required=False,
    type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path),
)
@click.option("--quick", is_flag=True, help="Smaller N, fewer repeats: about a minute on 2 cores.")
@click.option(
    "--scenario",
    "scenario_names",
    multiple=True,
    metavar="NAME",
    help=f"Only these scenarios (repeat it, or separate by commas): {', '.join(_SCENARIOS)}.",
)
@click.option(
    "--n", "sizes", metavar="N,N,...", help="Widths to measure instead of each scenario's."
)
@click.option(
    "--concurrency",
    metavar="C,C,...",
    help="Levels to run GRAPH at (default 1,8,64), or of the sweep scenario.",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    metavar="K",
    help="Timed rounds after the warm-up (default: each scenario's own, 5 for most, 3 with "
    "--quick; 5 for GRAPH).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write every figure to FILE (layout: docs/benchmarks.md).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw µs per node and validations/s against N to FILE.png (needs gategraph[bench]).",
)
@click.option("--no-rss", is_flag=True, help="Skip the peak-RSS measurements (fresh processes).")
@click.option(
    "--project",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The project whose tests/ the suite and project scenarios run (default: their own, "
    "fetched once with pip).",
)
def bench(
    graph: Path | None,
    quick: bool,
    scenario_names: tuple[str, ...],
    sizes: str | None,
    concurrency: str | None,
    repeat: int | None,
    json_path: Path | None,
    plot_path: Path | None,
    no_rss: bool,
    project: Path | None,
) -> None:
    """Measure validation throughput against baselines run in the same process.

    Without GRAPH, runs the scenarios (all but suite and project by default) and prints a
    table per scenario: µs per node, validations/s, p50/p99 latency and peak RSS of the
    engine and of asyncio.gather, one anyio task per node and LangGraph's Send fan-out (when
    installed), then start-up times, the per-call overhead of one-call validation
    (validate), and the performance targets, met or missed. The suite scenario runs a real
    project's tests sandboxed, in a worker process and by hand; the project scenario gates
    an edit of a real project with gategraph run, against the same checks run by hand.
    With GRAPH, runs that plan (on temporary copies of its folders) at each --concurrency
    level and reports validations/s, latency and time per pipeline layer. Nothing is
    asserted: the figures depend on the machine.
    """
    levels = _numbers(concurrency, "--concurrency")
    widths = _numbers(sizes, "--n")
    _writable(json_path, "--json")
    _writable(plot_path, "--plot")
    if graph is not None:
        for given, option in (
            (scenario_names, "--scenario"),
            (sizes, "--n"),
            (plot_path, "--plot"),
            (project, "--project"),
        ):
            if given:
                raise click.UsageError(f"{option} applies to the scenarios, not to a GRAPH")
        _bench_graph(
            graph,
            repeat=repeat or (2 if quick else 5),
            levels=levels or (1, 8, 64),
            json_path=json_path,
        )
        return
    names = _scenarios(scenario_names)
    if project is not None and not {"suite", "project"} & set(names):
        raise click.UsageError(
            "--project applies to the suite and project scenarios (--scenario suite, project)"
        )
    if plot_path is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise BenchError("--plot needs matplotlib: pip install 'gategraph[bench]'")

    from .harness import Settings, plot_report, render_table, run_benchmarks, write_json

    settings = Settings(
        quick=quick,
        repeats=repeat,
        sizes=widths,
        concurrency=levels,
        rss=not no_rss,
        project=None if project is None else str(project),
        progress=_progress,
    )
    from .bench_project import ProjectError
    from .bench_suite import SuiteError

    try:
        report = run_benchmarks(names, settings)
    except (SuiteError, ProjectError) as exc:
        raise BenchError(str(exc)) from None
    click.echo(render_table(report))
    if json_path is not None:
        write_json(report, json_path)
        click.echo(f"\nwrote {json_path}")
    if plot_path is not None:
        plot_report(report, plot_path)
        click.echo(f"wrote {plot_path}")


def _bench_graph(path: Path, *, repeat: int, levels: Sequence[int], json_path: Path | None) -> None:
    from gategraph.runtime import ConfigError

    from .bench_graph import benchmark_graph, render_graph_table
    from .harness import SCHEMA_VERSION, machine, write_json

    try:
        figures = benchmark_graph(path, repeat=repeat, concurrency=levels, progress=_progress)
    except ConfigError as exc:
        raise BenchError(str(exc)) from None
    click.echo(render_graph_table(figures))
    if json_path is not None:
        write_json({"schema": SCHEMA_VERSION, "machine": machine(), "graph": figures}, json_path)
        click.echo(f"\nwrote {json_path}")
    if not figures["applied"]:
        reasons = sorted({why for result in figures["results"] for why in result["not_applied"]})
        click.echo(
            f"error: plan {figures['name']!r} did not reach applied in every run; "
            f"the figures above are of a plan that stopped early: {'; '.join(reasons)}",
            err=True,
        )
        click.get_current_context().exit(EXIT_NOT_APPLIED)


def main_for(*scenarios: str) -> None:
    """Run ``gategraph bench`` for ``scenarios`` with this process's arguments: what
    ``python benchmarks/bench_<topic>.py [--quick] ...`` does."""
    chosen = [arg for name in scenarios for arg in ("--scenario", name)]
    bench.main([*chosen, *sys.argv[1:]], prog_name=Path(sys.argv[0]).name)
