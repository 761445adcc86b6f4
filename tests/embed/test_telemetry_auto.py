"""Traces and metrics with no wiring: a program that sets OpenTelemetry up (a tracer and a
meter provider of its own) gets gategraph's spans and metrics from ``validate()``, a plan,
a gate and the adapters' rounds, each ended when its run ends, with no observer to make
and nothing to close. Run in a process of its own: a global provider is set once per
process, and every later run there would be traced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

PROGRAM = '''
import json
import tempfile
from collections import Counter
from pathlib import Path

import anyio
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

spans = InMemorySpanExporter()
tracing = TracerProvider()
tracing.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(tracing)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

from gategraph.runtime import (
    MaxNPolicy, RetryBudget, load_graph, open_gate, run_plan_sync, validate_sync,
)

def finished(before):
    return Counter(s.name for s in spans.get_finished_spans()[before:])

seen = {}
# A change validated in two rounds, as an agent's fix loop does.
budget = RetryBudget(MaxNPolicy())
first = validate_sync({"a.py": "def (:\\n"}, ["python_syntax"], budget=budget)
second = validate_sync({"a.py": "x = 1\\n"}, ["python_syntax"], budget=budget)
runs = [s for s in spans.get_finished_spans() if s.name == "gategraph.run"]
seen["validate"] = {
    "passed": [first.passed, second.passed],
    "runs": [s.attributes["gategraph.plan.id"] for s in runs] == [first.plan_id, second.plan_id],
    "run_status": [s.status.status_code.name for s in runs],
    "validations_under_runs": sorted(
        s.parent.span_id in {r.context.span_id for r in runs}
        for s in spans.get_finished_spans() if s.name == "gategraph.validation"
    ),
}
before = len(spans.get_finished_spans())
outcome = run_plan_sync(load_graph("""\\
version: 1
name: traced
validations:
  - {name: ok, entrypoint: "gategraph.runtime.testing:passing"}
nodes:
  - {id: ok, validation: ok}
"""))
plan = [s for s in spans.get_finished_spans()[before:] if s.name == "gategraph.plan"]
seen["plan"] = {
    "status": str(outcome.status),
    "spans": dict(finished(before)),
    "stats_on_plan": plan[0].attributes.get("gategraph.stats.rounds") if plan else None,
}
before = len(spans.get_finished_spans())
repo = Path(tempfile.mkdtemp())
(repo / "app.py").write_text("x = 1\\n")

async def gate():
    async with open_gate({"repo": repo}, ["python_syntax"]) as opened:
        box = opened.sandbox()
        (box / "new.py").write_text("def f(:\\n")
        await opened.submit()
        (box / "new.py").write_text("def f():\\n    return 1\\n")
        return (await opened.submit()).passed

seen["gate"] = {"passed": anyio.run(gate), "spans": dict(finished(before))}

figures = {}
for resource in reader.get_metrics_data().resource_metrics:
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            for point in metric.data.data_points:
                key = metric.name + "".join(f"|{k}={v}" for k, v in sorted(point.attributes.items()))
                figures[key] = point.value if hasattr(point, "value") else point.count
seen["metrics"] = figures
print(json.dumps(seen))
'''


def test_an_sdk_set_up_is_enough_for_spans_and_metrics(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    # Both rounds of validate(): a root span each, ended, the validations under them.
    assert seen["validate"] == {
        "passed": [False, True],
        "runs": True,
        "run_status": ["ERROR", "UNSET"],  # the first round was rejected
        "validations_under_runs": [True, True],
    }
    # A plan: its whole tree, the plan span ended with the statistics on it.
    assert seen["plan"]["status"] == "applied"
    assert seen["plan"]["spans"] == {
        "gategraph.plan": 1,
        "gategraph.strategize": 1,
        "gategraph.work": 1,
        "gategraph.round": 1,
        "gategraph.validation": 1,
        "gategraph.apply": 1,
    }
    assert seen["plan"]["stats_on_plan"] == 1
    # A gate's two rounds, a plan of their own.
    assert seen["gate"]["passed"] is True
    assert seen["gate"]["spans"]["gategraph.plan"] == 1
    assert seen["gate"]["spans"]["gategraph.round"] == 2
    metrics = seen["metrics"]
    syntax = "|gategraph.validation=python_syntax"
    assert metrics[f"gategraph.semantic.invocations|gategraph.passed=False{syntax}"] == 2
    assert metrics[f"gategraph.semantic.invocations|gategraph.passed=True{syntax}"] == 2
    assert metrics["gategraph.pipeline.completions"] == 3  # validate's 2nd, the plan, the gate
    assert metrics["gategraph.rejections|gategraph.layer=semantic"] == 2
    assert metrics["gategraph.rounds"] == 5
    assert metrics["gategraph.fixes"] == 1  # the gate's second submission
    assert metrics["gategraph.layer.duration|gategraph.layer=semantic"] == 4
