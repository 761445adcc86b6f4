"""``gategraph bench``: the JSON layout, the plan-graph mode and the command's errors.

Timings are never asserted here (STYLE: speed is measured in benchmarks/, not tested);
only that every figure is where docs/benchmarks.md says it is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gategraph.benchmarks import harness
from gategraph.benchmarks.bench_ray import ray_unavailable
from gategraph.benchmarks.bench_sandbox import sandbox_unavailable
from gategraph.benchmarks.cli import _ON_REQUEST, _SCENARIOS, bench

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"
OWN_KEY_SCENARIOS = {"ray", "startup", "embed", "suite", "project"}
WIDTH_SCENARIOS = [name for name in _SCENARIOS if name not in OWN_KEY_SCENARIOS]
RAY_MISSING = ray_unavailable()
SANDBOX_MISSING = sandbox_unavailable()
SPREAD = {"min", "median", "max"}
EMBED_MEASURES = ("direct_ms", "validate_ms", "validate_files_ms", "execute_graph_ms")


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(bench, list(args), catch_exceptions=False)


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _tree(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _check_case(case: dict[str, Any], contenders: list[str], *, engine_ran: bool = True) -> None:
    """``engine_ran``: False for the sandbox scenario on a machine that cannot sandbox."""
    assert isinstance(case["n"], int) and isinstance(case["concurrency"], int)
    assert isinstance(case["repeats"], int)
    for key in ("per_node_us", "validations_per_s", "latency_us", "peak_rss_mib"):
        assert set(case[key]) >= {"gategraph", "asyncio_gather", "anyio_taskgroup", "langgraph"}
        assert set(case[key]) == set(contenders), key
    for key in ("per_node_us", "validations_per_s", "peak_rss_mib"):
        assert all(_number_or_null(v) for v in case[key].values()), (key, case[key])
    # The engine and the two floors always run; LangGraph is a number or null.
    for name in ("gategraph", "asyncio_gather", "anyio_taskgroup")[0 if engine_ran else 1 :]:
        assert case["per_node_us"][name] > 0
        assert case["validations_per_s"][name] > 0
    if engine_ran:
        assert set(case["latency_us"]["gategraph"]) == {"p50", "p99"}
    else:
        assert case["per_node_us"]["gategraph"] is None
    for value in case["latency_us"].values():
        assert value is None or set(value) == {"p50", "p99"}
    assert _number_or_null(case["per_node_us"]["langgraph"])
    assert set(case["ratios"]) == set(contenders) - {"gategraph"}
    assert all(_number_or_null(v) for v in case["ratios"].values())
    if engine_ran:
        assert case["ratios"]["asyncio_gather"] > 0 and case["ratios"]["anyio_taskgroup"] > 0
    if case["per_node_us"]["langgraph"] is None:
        assert case["ratios"]["langgraph"] is None
        assert "langgraph" in case["skipped"]
    for figure in ("wall_s", "per_node_us", "validations_per_s"):
        spreads = case["min_median_max"][figure]
        assert set(spreads) == set(contenders)
        for value in spreads.values():
            assert value is None or set(value) == SPREAD
    assert isinstance(case["extra"], dict)


def _check_embed(embed: dict[str, Any], calls: int, repeats: int) -> None:
    assert embed["backend"] == "asyncio"
    assert embed["validations"] == 2
    assert embed["calls"] == calls and embed["repeats"] == repeats
    for key in EMBED_MEASURES:
        assert set(embed[key]) == SPREAD, key
        assert 0 < embed[key]["min"] <= embed[key]["median"] <= embed[key]["max"], key
    # The derived figures are differences of the medians, as documented.
    median = {key: embed[key]["median"] for key in EMBED_MEASURES}
    assert embed["overhead_ms"] == pytest.approx(median["validate_ms"] - median["direct_ms"])
    assert embed["files_ms"] == pytest.approx(median["validate_files_ms"] - median["validate_ms"])
    assert embed["over_engine_ms"] == pytest.approx(
        median["validate_ms"] - median["execute_graph_ms"]
    )
    assert set(embed["ratios"]) == {"validate_vs_direct", "validate_vs_execute_graph"}
    assert all(_number_or_null(v) for v in embed["ratios"].values())


def test_quick_json_has_every_scenario_and_n(tmp_path: Path) -> None:
    """--quick --n 4,8 --json: every scenario and N holds the documented keys."""
    out = tmp_path / "bench.json"
    result = _invoke("--quick", "--n", "4,8", "--repeat", "1", "--no-rss", "--json", str(out))
    assert result.exit_code == 0, result.output
    assert "### targets" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["schema"] == harness.SCHEMA_VERSION
    assert {"python", "cpus", "platform", "processor"} <= set(report["machine"])
    assert report["settings"]["quick"] is True
    assert report["settings"]["sizes"] == [4, 8]
    # All but suite and project, which run real projects' tests only when named.
    assert report["settings"]["scenarios"] == [
        n for n in _SCENARIOS if n not in {"suite", "project"}
    ]
    assert report["suite"] is None and report["project"] is None
    assert set(report["baselines"]) >= {"asyncio_gather", "anyio_taskgroup", "langgraph"}
    assert set(report["scenarios"]) == set(WIDTH_SCENARIOS)
    for name, scenario in report["scenarios"].items():
        assert {"title", "backend", "contenders", "notes", "cases", "seconds"} <= set(scenario)
        contenders = scenario["contenders"]
        assert contenders[:4] == ["gategraph", "asyncio_gather", "anyio_taskgroup", "langgraph"]
        assert sorted({case["n"] for case in scenario["cases"]}) == [4, 8], name
        for case in scenario["cases"]:
            _check_case(case, contenders, engine_ran=name != "sandbox" or SANDBOX_MISSING is None)
    sweep = report["scenarios"]["sweep"]["cases"]
    assert len({case["concurrency"] for case in sweep}) > 1  # a sweep, not one level
    assert {"ideal_s", "wall_vs_ideal"} <= set(report["scenarios"]["io"]["cases"][0]["extra"])
    cpu = report["scenarios"]["cpu-process"]["cases"][0]
    assert _number_or_null(cpu["extra"]["speedup_vs_one_core"])
    assert cpu["per_node_us"]["one_core"] > 0
    sandbox = report["scenarios"]["sandbox"]["cases"][0]["extra"]
    assert set(sandbox) >= {
        "sandbox_vs_process_noop",
        "sandbox_vs_process_cpu",
        "speedup_vs_one_core",
    }
    assert all(_number_or_null(v) for k, v in sandbox.items() if k != "sandbox_unavailable")
    share = report["scenarios"]["eventlog"]["cases"][0]["extra"]["sqlite_share_of_memory"]
    assert share > 0
    backends = report["scenarios"]["backends"]["cases"][0]
    assert backends["per_node_us"]["gategraph_trio"] > 0
    # Both loops side by side: the engine and its floor on uvloop too (the test extra has it).
    noop = report["scenarios"]["noop"]["cases"][0]
    io = report["scenarios"]["io"]["cases"][0]
    assert noop["per_node_us"]["gategraph_uvloop"] > 0
    assert noop["per_node_us"]["asyncio_gather_uvloop"] > 0
    assert noop["extra"]["uvloop_vs_asyncio_gather"] > 0
    assert io["per_node_us"]["anyio_workers_uvloop"] > 0
    assert io["extra"]["uvloop_vs_anyio_workers"] > 0
    assert "gategraph on uvloop" in result.stdout
    assert report["machine"]["uvloop"] is not None
    _check_ray(
        report["ray"], result.stdout, {r["id"]: r for r in report["targets"]}["ray-overhead"]
    )
    startup = report["startup"]
    for key in (
        "import_ms",
        "import_engine_ms",
        "import_all_ms",
        "help_ms",
        "python_ms",
        "check_ms",
        "first_run_ms",
        "run_ms",
    ):
        assert set(startup[key]) == SPREAD
    assert (
        startup["check_vs_python"]
        == startup["check_ms"]["median"] / (startup["python_ms"]["median"])
    )
    assert startup["run_beyond_python_ms"] > 0
    targets = {row["id"]: row for row in report["targets"]}
    assert {
        "noop-vs-gather",
        "vs-langgraph",
        "io-floor",
        "io-floor-1k",
        "ray-overhead",
        "sqlite-share",
        "rss-100k",
    } <= set(targets)
    assert {"sandbox-overhead", "sandbox-cpu"} <= set(targets)
    for row in targets.values():
        assert row["met"] in (True, False, None)
        assert _number_or_null(row["measured"])
        assert (row["met"] is None) == (row["measured"] is None)
    # N=10,000 was not measured: that target says so instead of guessing.
    assert targets["noop-vs-gather"]["measured"] is None
    assert targets["import"]["measured"] is not None
    for fixed in ("check", "first-run", "run-overhead"):
        assert targets[fixed]["measured"] is not None, fixed
    _check_embed(report["embed"], calls=50, repeats=1)
    assert targets["validate-overhead"]["measured"] == report["embed"]["overhead_ms"]
    assert "### embed" in result.stdout


def _check_ray(ray: dict[str, Any], table: str, target: dict[str, Any]) -> None:
    """The ``ray`` section: measured where Ray is installed, else said to be not."""
    assert "### ray" in table
    if RAY_MISSING is not None:
        assert ray == {"not_measured": RAY_MISSING}
        assert target["measured"] is None
        assert RAY_MISSING in table
        return
    figures = ray["overhead"]["per_validation_us"]
    assert set(figures) == {"gategraph_ray", "ray_tasks"}
    assert all(set(f) == SPREAD and f["median"] > 0 for f in figures.values())
    assert target["measured"] == ray["overhead"]["ratio"] > 0
    costs = ray["crossover"]["costs"]
    assert [row["call_ms"] for row in costs] == [0, 5]  # --quick
    for row in costs:
        assert set(row["per_call_us"]) == {"gategraph_process", "gategraph_ray"}
        assert row["ray_vs_process"] > 0
    assert ray["crossover"]["crossover_call_ms"] in (None, 0, 5)
    cancel = ray["cancellation"]
    assert cancel["errors"] == ["timeout"]
    # The remote tasks were cancelled: Ray's CPUs came back (within its 30 s wait).
    assert cancel["cpus_released_after_s"] is not None


def test_embed_alone_with_tiny_samples(tmp_path: Path) -> None:
    """The embed scenario alone: its figures, the overhead target measured, no width
    scenario or start-up, and its table before the targets."""
    settings = harness.Settings(quick=True, repeats=2, calls=3, rss=False)
    report = harness.run_benchmarks(["embed"], settings)
    assert report["settings"]["scenarios"] == ["embed"]
    assert report["scenarios"] == {} and report["startup"] is None
    _check_embed(report["embed"], calls=3, repeats=2)
    targets = {row["id"]: row for row in report["targets"]}
    row = targets["validate-overhead"]
    assert row["measured"] == report["embed"]["overhead_ms"]
    assert row["met"] in (True, False)
    assert (row["bound"], row["better"], row["unit"]) == (1.0, "lower", "ms")
    assert row["needs"] == "scenario embed"
    assert targets["import"]["measured"] is None  # startup did not run
    table = harness.render_table(report)
    assert table.index("### embed") < table.index("### targets")
    assert "| validate(None, validations, artifact=...) |" in table
    out = tmp_path / "embed.json"
    harness.write_json(report, out)
    assert json.loads(out.read_text(encoding="utf-8"))["embed"] == report["embed"]


def test_the_eventlog_scenario_measures_postgres_beside_sqlite(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a server named, the PostgreSQL log is a contender of its own, and its share of
    the SQLite log's throughput is a target; without one, it is skipped, saying why."""
    settings = harness.Settings(quick=True, repeats=2, sizes=(200,), rss=False)
    monkeypatch.setenv("GATEGRAPH_BENCH_POSTGRES", postgres_url)
    [case] = harness.run_benchmarks(["eventlog"], settings)["scenarios"]["eventlog"]["cases"]
    assert case["per_node_us"]["gategraph_postgres"] > 0
    assert case["extra"]["postgres_share_of_sqlite"] > 0
    monkeypatch.delenv("GATEGRAPH_BENCH_POSTGRES")
    report = harness.run_benchmarks(["eventlog"], settings)
    [case] = report["scenarios"]["eventlog"]["cases"]
    assert "GATEGRAPH_BENCH_POSTGRES" in case["skipped"]["gategraph_postgres"]
    assert case["extra"]["postgres_share_of_sqlite"] is None
    assert "gategraph, PostgreSQL log" not in harness.render_table(report).split("### targets")[0]


@pytest.mark.parametrize(("overhead", "met"), [(0.4, True), (1.0, True), (1.6, False)])
def test_validate_overhead_target_reads_the_embed_figure(overhead: float, met: bool) -> None:
    """The target is the embed overhead in ms, lower is better, bound 1 ms; without the
    scenario it is not measured."""
    rows = harness.evaluate_targets({"scenarios": {}, "embed": {"overhead_ms": overhead}})
    row = next(r for r in rows if r["id"] == "validate-overhead")
    assert (row["measured"], row["met"]) == (overhead, met)
    rows = harness.evaluate_targets({"scenarios": {}, "embed": None})
    row = next(r for r in rows if r["id"] == "validate-overhead")
    assert row["measured"] is None and row["met"] is None


def test_embed_sample_that_did_other_work_is_refused() -> None:
    """A sample whose calls did not all pass both validations fails, never gets timed."""
    import anyio
    from gategraph.benchmarks.bench_embed import _timed

    async def half() -> int:
        return 1  # one of the two validations passed

    contender = _timed("half", 3, half)
    with pytest.raises(AssertionError, match="embed half: 3 of 6 validations passed"):
        anyio.run(contender.run, backend="asyncio")


def test_peak_rss_is_measured_in_a_fresh_process(tmp_path: Path) -> None:
    """Without --no-rss the engine's peak RSS is a number (MiB), the baselines' null in --quick."""
    if not Path("/proc/self/status").exists():
        pytest.skip("VmHWM needs /proc")
    out = tmp_path / "bench.json"
    result = _invoke(
        "--quick", "--scenario", "noop", "--n", "10", "--repeat", "1", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    case = json.loads(out.read_text(encoding="utf-8"))["scenarios"]["noop"]["cases"][0]
    assert case["peak_rss_mib"]["gategraph"] > 1
    assert case["peak_rss_mib"]["asyncio_gather"] is None


def test_langgraph_missing_is_null_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without LangGraph its figures are null and the table says how to install it."""
    monkeypatch.setitem(sys.modules, "langgraph", None)  # find_spec() then reports it missing
    out = tmp_path / "bench.json"
    result = _invoke(
        "--scenario", "noop", "--n", "10", "--repeat", "1", "--no-rss", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "gategraph[bench]" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["baselines"]["langgraph_installed"] is False
    case = report["scenarios"]["noop"]["cases"][0]
    assert case["per_node_us"]["langgraph"] is None
    assert case["ratios"]["langgraph"] is None
    assert "not installed" in case["skipped"]["langgraph"]


def test_plot_without_matplotlib_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--plot without matplotlib fails at once: one error line naming the extra, exit 2."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = _invoke("--scenario", "noop", "--n", "10", "--plot", str(tmp_path / "p.png"))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: --plot needs matplotlib: pip install 'gategraph[bench]'"
    ]
    assert not (tmp_path / "p.png").exists()


def test_plot_draws_a_png(tmp_path: Path) -> None:
    """--plot writes the figure (when matplotlib is installed)."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "bench.png"
    result = _invoke(
        "--scenario", "noop", "--n", "10,20", "--repeat", "1", "--no-rss", "--plot", str(target)
    )
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_graph_mode_leaves_the_plan_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench GRAPH runs the plan on copies: its folder and the working directory stay as
    they were; the JSON has validations/s, latency and time per layer per level."""
    plan = tmp_path / "demo"
    shutil.copytree(GRAPHS / "demo", plan)
    before = _tree(plan)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    out = tmp_path / "graph.json"
    result = _invoke(
        str(plan / "plan.yaml"), "--repeat", "2", "--concurrency", "1,4", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert _tree(plan) == before
    assert list(work.iterdir()) == []
    figures = json.loads(out.read_text(encoding="utf-8"))["graph"]
    assert figures["name"] == "demo-fix" and figures["applied"] is True
    assert [r["concurrency"] for r in figures["results"]] == [1, 4]
    for row in figures["results"]:
        assert row["runs"] == 2 and row["statuses"] == {"applied": 2}
        assert set(row["wall_s"]) == SPREAD and set(row["validations_per_s"]) == SPREAD
        assert set(row["latency_ms"]) == {"p50", "p99"}
        assert {"routing", "payload", "semantic", "approval"} <= set(row["layer_seconds"])
        assert row["validations_per_run"]["median"] > 0
    assert "semantic ms" in result.stdout


def test_graph_that_is_not_applied_is_reported(tmp_path: Path) -> None:
    """A plan that does not reach `applied` is measured, then said so: exit 1."""
    graph = tmp_path / "stuck.yaml"
    graph.write_text(
        "version: 1\nname: stuck\n"
        "validations:\n  - {name: never, entrypoint: 'gategraph.runtime.testing:failing'}\n"
        "nodes:\n  - {id: gate, validation: never}\n"
        "policy: {retry_limit: 0, strategy_revisions: 0}\n",
        encoding="utf-8",
    )
    result = _invoke(str(graph), "--repeat", "1", "--concurrency", "2")
    assert result.exit_code == 1
    assert "did not reach applied" in result.stderr
    assert "| 2 |" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n", "10,abc"], "'abc' is not a whole number"),
        (["--n", "0"], "'0' is not a whole number"),
        (["--scenario", "nop"], "unknown scenario 'nop' (did you mean 'noop'?)"),
        (["--concurrency", "1,-8"], "'-8' is not a whole number"),
        (["missing.yaml"], "does not exist"),
        (["--json", "/no/such/folder/out.json"], "no such folder"),
    ],
)
def test_bad_input_is_one_error_line(args: list[str], message: str) -> None:
    """Bad input: one `error: ...` line, exit code 2, nothing measured."""
    result = _invoke(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_graph_errors(tmp_path: Path) -> None:
    """A graph that does not load, and scenario options given with a GRAPH: exit 2."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: bad\nnodes: [{id: a, validation: nowhere}]\n")
    result = _invoke(str(bad))
    assert result.exit_code == 2
    assert all(line.startswith("error: ") for line in result.stderr.strip().splitlines())
    assert "nowhere" in result.stderr
    result = _invoke(str(bad), "--scenario", "noop")
    assert result.exit_code == 2
    assert "--scenario applies to the scenarios, not to a GRAPH" in result.stderr


def test_scenario_lists_agree() -> None:
    """The command's list of scenarios (kept import-free) is the harness's."""
    assert harness.SCENARIO_ORDER == _SCENARIOS
    assert harness.ON_REQUEST == _ON_REQUEST
    for name in WIDTH_SCENARIOS:
        scenario = harness.get_scenario(name)
        if name == "sandbox" and SANDBOX_MISSING is not None:
            assert "gategraph" not in scenario.contenders  # skipped: it cannot run here
        else:
            assert scenario.contenders[0] == "gategraph"
        assert {"asyncio_gather", "anyio_taskgroup"} <= set(scenario.contenders)


def test_graph_table_header_and_footnote_agree_on_milliseconds() -> None:
    """The graph table shows every time in ms, and its footnote says ms, not seconds."""
    from gategraph.benchmarks.bench_graph import render_graph_table

    spread = {"min": 0.010, "median": 0.0125, "max": 0.020}
    figures = {
        "name": "p",
        "file": "p.yaml",
        "repeat": 1,
        "results": [
            {
                "concurrency": 1,
                "runs": 1,
                "wall_s": spread,
                "validations_per_s": {"min": 1.0, "median": 1.0, "max": 1.0},
                "latency_ms": {"p50": 0.4, "p99": 3.2},
                "layer_seconds": {"semantic": spread},
                "statuses": {"applied": 1},
            }
        ],
    }
    table = render_graph_table(figures)
    header = next(line for line in table.splitlines() if line.startswith("| concurrency"))
    assert "wall ms" in header and "semantic ms" in header
    assert "| 12.5 (10.0–20.0) | 1 (1–1) | 0.40 / 3.20 | 12.5 (10.0–20.0) |" in table
    assert "milliseconds" in table.splitlines()[-1]


def test_what_a_contender_keeps_spans_its_runs_on_one_loop_and_each_run_across_loops() -> None:
    """``keeps`` is entered once around all of a contender's runs on one event loop (as
    anyio keeps its worker processes), and around each run where every run has a loop of
    its own (contenders on different backends)."""
    import contextlib

    import anyio

    log: list[str] = []

    @contextlib.asynccontextmanager
    async def kept() -> Any:
        log.append("enter")
        yield
        log.append("exit")

    async def run() -> harness.Sample:
        log.append("run")
        return harness.Sample(wall=0.0, latencies=[])

    contender = harness.Contender("engine", run, keeps=kept)
    anyio.run(harness.interleave, [contender], 2, False)
    assert log == ["enter", "run", "run", "run", "exit"]  # the warm-up and two rounds
    log.clear()
    other = harness.Contender("baseline", run, backend="trio")
    harness._interleave_across_loops([contender, other], 1, False)
    assert log.count("enter") == log.count("exit") == 2
    assert log[:3] == ["enter", "run", "exit"]


def test_the_plan_scenario_checks_every_run_and_compares_with_the_engine() -> None:
    """A run of the lifecycle that does not apply with every validation passed is an
    error, not a figure; the ratio is the median walls' (same N on both sides)."""
    import anyio
    from gategraph.benchmarks import bench_plan
    from gategraph.runtime import load_graph

    case = harness.Case("plan", 3, 3)
    failing = load_graph(
        {
            "version": 1,
            "name": "fails",
            "resources": {"notes": {"kind": "memory", "files": {"a.md": "x\n"}}},
            "validations": [{"name": "v", "entrypoint": "gategraph.runtime.testing:failing"}],
            "nodes": [{"id": "a", "validation": "v"}],
        }
    )
    with pytest.raises(AssertionError, match="the plan ended"):
        anyio.run(bench_plan.lifecycle(failing, n=1).run)
    sample = anyio.run(bench_plan.lifecycle(bench_plan.plan_graph(3, 3), n=3).run)
    assert sample.wall > 0 and len(sample.latencies) == 3
    samples = {
        "gategraph": [harness.Sample(wall=3.0), harness.Sample(wall=4.0), harness.Sample(wall=9.0)],
        "gategraph_engine": [harness.Sample(wall=2.0)],
    }
    extra = bench_plan._extra(case, samples)
    assert extra == {"plan_vs_engine": 2.0, "plan_sqlite_vs_engine": None}


# -- suite: a real project's tests --------------------------------------------------------


def _small_project(root: Path) -> Path:
    """A project of its own with a few real tests (offline: nothing is fetched)."""
    (root / "tests").mkdir(parents=True)
    (root / "mathy.py").write_text("def double(x):\n    return 2 * x\n", encoding="utf-8")
    (root / "tests" / "test_mathy.py").write_text(
        "import sys, pathlib\n"
        "sys.path.insert(0, str(pathlib.Path(__file__).parent.parent))\n"
        "import mathy\n"
        + "".join(
            f"def test_double_{i}():\n    assert mathy.double({i}) == {2 * i}\n" for i in range(5)
        ),
        encoding="utf-8",
    )
    return root


def test_suite_runs_a_project_s_tests_three_ways(tmp_path: Path) -> None:
    """--scenario suite --project: the suite sandboxed by default, in a worker process and
    by hand, timed side by side; the ratio is the suite-sandbox target's figure."""
    project = _small_project(tmp_path / "project")
    out = tmp_path / "bench.json"
    result = _invoke(
        "--scenario", "suite", "--project", str(project), "--repeat", "1", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "### suite — project's test suite" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    suite = report["suite"]
    assert suite["project"] == "project" and suite["skipped"] is None
    for way in ("sandbox", "process", "by_hand"):
        assert 0 < suite[f"{way}_s"]["min"] <= suite[f"{way}_s"]["median"]
    ratio = suite["ratios"]["sandbox_vs_process"]
    assert ratio == suite["sandbox_s"]["median"] / suite["process_s"]["median"]
    [row] = [t for t in report["targets"] if t["id"] == "suite-sandbox"]
    assert row["measured"] == ratio
    assert not list(project.rglob("__pycache__"))  # by hand, nothing written in the folder


def test_a_suite_that_fails_is_not_timed(tmp_path: Path) -> None:
    """A project whose tests fail: the run stops with the reason, never a figure."""
    project = _small_project(tmp_path / "project")
    (project / "tests" / "test_broken.py").write_text(
        "def test_no():\n    assert False\n", encoding="utf-8"
    )
    result = _invoke("--scenario", "suite", "--project", str(project), "--repeat", "1")
    assert result.exit_code == 2
    assert "error: suite sandbox: 1 of 6 tests failed" in result.output, result.output
    assert "Traceback" not in result.output


def test_the_suite_s_project_needs_its_tests(tmp_path: Path) -> None:
    """A folder without tests/ is one error line; --project without the suite is a usage
    error."""
    (tmp_path / "empty").mkdir()
    result = _invoke("--scenario", "suite", "--project", str(tmp_path / "empty"), "--repeat", "1")
    assert result.exit_code == 2, result.output
    assert "error: --project " in result.output and "no tests/ folder to run" in result.output
    assert "Traceback" not in result.output
    refused = _invoke("--scenario", "noop", "--project", str(tmp_path / "empty"))
    assert refused.exit_code == 2
    assert "--project applies to the suite and project scenarios" in refused.output


# -- project: an agent's edit of a real project, gated and by hand ----------------------------


@pytest.fixture
def no_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small project's tests need none of pytest's plugins installed here; loading
    them would be most of each run (every way of the scenario starts pytest)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


@pytest.mark.usefixtures("no_plugins")
def test_project_gates_an_edit_and_times_it_against_the_checks_by_hand(tmp_path: Path) -> None:
    """--scenario project --project: gategraph run gates the edit; the same checks by hand,
    one after the other and at once; the ratios are the medians' ratios, and the two
    project targets' figures. The project folder itself is never changed."""
    project = _small_project(tmp_path / "project")
    before = _tree(project)
    out = tmp_path / "bench.json"
    result = _invoke(
        "--scenario", "project", "--project", str(project), "--repeat", "1", "--json", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "### project — an agent's edit of a real project" in result.stdout
    assert "| project (given) | gategraph run" in result.stdout
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["suite"] is None
    assert report["project"]["repeats"] == 1
    [entry] = report["project"]["projects"]
    assert entry["size"] == "given" and entry["project"] == "project"
    assert entry["skipped"] is None
    assert entry["tests"] == ["tests"] and entry["module"] == "mathy.py"
    for way in ("gated", "by_hand_sequential", "by_hand_parallel"):
        assert set(entry[f"{way}_s"]) == SPREAD
        assert 0 < entry[f"{way}_s"]["min"] <= entry[f"{way}_s"]["median"]
    median = {way: entry[f"{way}_s"]["median"] for way in ("gated", "by_hand_sequential")}
    median["by_hand_parallel"] = entry["by_hand_parallel_s"]["median"]
    ratios = entry["ratios"]
    assert ratios == {
        "gated_vs_sequential": median["gated"] / median["by_hand_sequential"],
        "gated_vs_parallel": median["gated"] / median["by_hand_parallel"],
    }
    targets = {row["id"]: row for row in report["targets"]}
    assert targets["project-vs-sequential"]["measured"] == ratios["gated_vs_sequential"]
    assert targets["project-vs-parallel"]["measured"] == ratios["gated_vs_parallel"]
    disk = entry["disk"]
    # The store's snapshot of the tree, at least. The peak is sampled, and is the lesser of
    # the files' blocks and what the file system lost meanwhile: exact on a quiet machine,
    # 0 where other processes freed as much (as on a busy one), never negative.
    assert disk["first_snapshot_mib"] > 0 and disk["first_peak_extra_mib"] >= 0
    assert disk["changed_kib"] > 0 and disk["second_store_growth_kib"] >= 0
    assert targets["project-disk"]["measured"] == disk["first_peak_vs_change_and_snapshot"]
    assert "on disk: a first run's peak" in result.stdout
    assert _tree(project) == before


@pytest.mark.usefixtures("no_plugins")
def test_a_project_whose_tests_fail_is_not_timed(tmp_path: Path) -> None:
    """The checks by hand run first: a project whose tests fail stops the scenario with
    pytest's summary, in one line, before gategraph runs at all."""
    project = _small_project(tmp_path / "project")
    (project / "tests" / "test_broken.py").write_text(
        "def test_no():\n    assert False\n", encoding="utf-8"
    )
    result = _invoke("--scenario", "project", "--project", str(project), "--repeat", "1")
    assert result.exit_code == 2, result.output
    [error] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert error.startswith(
        "error: project project by_hand_sequential: pytest exited with 1 (the checks must "
        "pass to be timed): 1 failed, 5 passed"
    ), result.output
    assert "Traceback" not in result.output


def test_project_targets_read_the_large_project() -> None:
    """The two project targets are the large project's ratios (or --project's): not
    measured without the scenario, nor when the large project was skipped."""

    def rows(project: Any) -> dict[str, Any]:
        found = harness.evaluate_targets({"scenarios": {}, "project": project})
        return {row["id"]: row["measured"] for row in found if row["id"].startswith("project-vs")}

    def measured(size: str, ratio: float) -> dict[str, Any]:
        ratios = {"gated_vs_sequential": ratio, "gated_vs_parallel": ratio + 1}
        return {"size": size, "project": size, "skipped": None, "ratios": ratios}

    skipped = {"size": "large", "project": None, "skipped": "pip could not fetch it"}
    nothing = {"project-vs-sequential": None, "project-vs-parallel": None}
    assert rows(None) == nothing
    assert rows({"repeats": 3, "projects": [measured("small", 0.5), skipped]}) == nothing
    both = {"repeats": 3, "projects": [measured("small", 0.5), measured("large", 0.7)]}
    assert rows(both) == {"project-vs-sequential": 0.7, "project-vs-parallel": 1.7}
    disk = {"first_peak_vs_change_and_snapshot": 1.9}
    with_disk = {"repeats": 3, "projects": [{**measured("large", 0.7), "disk": disk}]}
    [row] = [
        r
        for r in harness.evaluate_targets({"scenarios": {}, "project": with_disk})
        if r["id"] == "project-disk"
    ]
    assert (row["measured"], row["met"]) == (1.9, False)
    given = {"repeats": 3, "projects": [measured("given", 0.9)]}
    assert rows(given) == {"project-vs-sequential": 0.9, "project-vs-parallel": 1.9}


def _release(tmp_path: Path, *names: str) -> Path:
    import io
    import tarfile

    archive = tmp_path / "release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in names:
            data = b"x = 1\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


@pytest.mark.parametrize("filtered", [True, False], ids=["data filter", "older Python"])
def test_a_source_release_unpacks_inside_its_folder_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filtered: bool
) -> None:
    """The project's release is unpacked with tarfile's data filter, or where Python has
    none (before 3.11.4) only after every member is checked: nothing outside the folder."""
    import tarfile

    from gategraph.benchmarks.bench_suite import SuiteError, _extract

    if not filtered:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    safe = _release(tmp_path, "pkg-1.0/tests/test_a.py")
    with tarfile.open(safe) as archive:
        _extract(archive, str(tmp_path / "out"))
    assert (tmp_path / "out" / "pkg-1.0" / "tests" / "test_a.py").is_file()
    hostile = _release(tmp_path, "pkg-1.0/../../escaped.py")
    with tarfile.open(hostile) as archive, pytest.raises((SuiteError, tarfile.TarError)):
        _extract(archive, str(tmp_path / "out2"))
    assert not (tmp_path / "escaped.py").exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("host=db password=hunter2", "GATEGRAPH_BENCH_POSTGRES: not a PostgreSQL URL"),
        ("postgresql://u:hunter2@127.0.0.1:9/x", "cannot open the PostgreSQL bench database"),
    ],
)
def test_a_bench_database_that_cannot_work_is_one_line(
    value: str, said: str, tmp_path: Path
) -> None:
    import os
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gategraph.runtime._cli",
            "bench",
            "--scenario",
            "eventlog",
            "--quick",
            "--n",
            "100",
        ],
        env={**os.environ, "GATEGRAPH_BENCH_POSTGRES": value, "GATEGRAPH_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode != 0 and len(errors) == 1 and said in errors[0], done.stderr
    assert "hunter2" not in done.stderr and "Traceback" not in done.stderr
