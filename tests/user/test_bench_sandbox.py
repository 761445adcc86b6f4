"""``gategraph bench --scenario sandbox``: its figures, its targets, and its skip on a
machine that cannot sandbox.

Timings are never asserted (STYLE: speed is measured in benchmarks/, not tested); only that
each figure is where docs/benchmarks.md says it is, and a number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from gategraph.benchmarks import harness
from gategraph.benchmarks.bench_sandbox import SANDBOXED, sandbox_unavailable
from gategraph.benchmarks.cli import bench

RATIOS = ("sandbox_vs_process_noop", "sandbox_vs_process_cpu", "speedup_vs_one_core")
OWN = ("gategraph_process", "gategraph_noop", "gategraph_process_noop", "one_core")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _run(tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        bench,
        [
            "--scenario",
            "sandbox",
            "--quick",
            "--n",
            "4",
            "--repeat",
            "1",
            "--no-rss",
            "--json",
            f"{out}",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return result, json.loads(out.read_text(encoding="utf-8"))


def test_sandbox_scenario_reports_its_ratios_and_targets(tmp_path: Path) -> None:
    """Quick, N=4: every sandboxed and process contender timed, the three ratios, the
    process speed-up and cpus numbers, both targets measured, the notes in the table."""
    missing = sandbox_unavailable()
    if missing is not None:
        pytest.skip(f"this machine cannot sandbox: {missing}")
    result, report = _run(tmp_path)
    scenario = report["scenarios"]["sandbox"]
    assert scenario["contenders"][0] == "gategraph"
    assert set(OWN) <= set(scenario["contenders"])
    (case,) = scenario["cases"]
    assert (case["n"], case["concurrency"], case["repeats"]) == (4, 4, 1)
    for name in ("gategraph", *OWN, "asyncio_gather", "anyio_taskgroup"):
        assert _number(case["per_node_us"][name]), name
    assert case["per_node_us"]["langgraph"] is None and "langgraph" in case["skipped"]
    extra = case["extra"]
    for key in (*RATIOS, "process_speedup_vs_one_core"):
        assert _number(extra[key]), key
    assert extra["cpus"] >= 1 and extra["sandbox_unavailable"] is None
    # The ratios are of the contenders' own medians, as documented.
    per_node = case["per_node_us"]
    assert extra["sandbox_vs_process_cpu"] == pytest.approx(case["ratios"]["gategraph_process"])
    assert extra["sandbox_vs_process_noop"] == pytest.approx(
        per_node["gategraph_noop"] / per_node["gategraph_process_noop"]
    )
    assert extra["speedup_vs_one_core"] == pytest.approx(
        per_node["one_core"] / per_node["gategraph"]
    )
    targets = {row["id"]: row for row in report["targets"]}
    assert targets["sandbox-overhead"]["measured"] == extra["sandbox_vs_process_noop"]
    assert targets["sandbox-cpu"]["measured"] == extra["speedup_vs_one_core"]
    for key in ("sandbox-overhead", "sandbox-cpu"):
        assert targets[key]["met"] in (True, False)
    assert "### sandbox" in result.stdout
    assert "sandbox_vs_process_noop" in result.stdout
    assert "timed: the execute_graph call only" in result.stdout


def test_sandbox_scenario_on_a_machine_that_cannot_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the kernel's support: the sandboxed contenders are skipped with the reason
    (in the notes, the table and extra), the rest still runs, the targets say not measured."""
    from gategraph.runtime._base import _kernel

    why = "the sandbox needs Landlock, and this kernel was built without Landlock"
    monkeypatch.setattr(_kernel, "_support", _kernel.Support(0, True, "x86_64", why))
    result, report = _run(tmp_path)
    scenario = report["scenarios"]["sandbox"]
    assert any(why in note for note in scenario["notes"])
    assert why in result.stdout
    (case,) = scenario["cases"]
    for name in SANDBOXED:
        assert case["per_node_us"].get(name) is None, name  # null or absent
    for name in ("gategraph_process", "gategraph_process_noop", "one_core"):
        assert _number(case["per_node_us"][name]), name
    extra = case["extra"]
    assert extra["sandbox_unavailable"] == why
    assert all(extra[key] is None for key in RATIOS)
    assert _number(extra["process_speedup_vs_one_core"])
    targets = {row["id"]: row for row in report["targets"]}
    for key in ("sandbox-overhead", "sandbox-cpu"):
        assert targets[key]["measured"] is None and targets[key]["met"] is None


@pytest.mark.parametrize(
    ("target", "key", "value", "met"),
    [
        ("sandbox-overhead", "sandbox_vs_process_noop", 1.1, True),
        ("sandbox-overhead", "sandbox_vs_process_noop", 1.3, False),
        ("sandbox-cpu", "speedup_vs_one_core", 1.8, True),
        ("sandbox-cpu", "speedup_vs_one_core", 1.5, False),
    ],
)
def test_sandbox_targets_read_the_largest_case(
    target: str, key: str, value: float, met: bool
) -> None:
    """Each target reads its ratio at the scenario's largest N: ≤ 1.2x, ≥ 1.7x."""
    small = {"n": 20, "concurrency": 20, "extra": {key: 99.0}}
    large = {"n": 100, "concurrency": 100, "extra": {key: value}}
    report = {"scenarios": {"sandbox": {"cases": [small, large]}}, "embed": None}
    row = next(r for r in harness.evaluate_targets(report) if r["id"] == target)
    assert (row["measured"], row["met"]) == (value, met)
