"""gategraph's benchmark harness: ``gategraph bench`` and its scenarios.

One module per topic, each runnable alone (``python benchmarks/bench_noop.py --quick``):
``bench_noop``, ``bench_io`` (and the concurrency sweep), ``bench_cpu`` (thread and process
isolation), ``bench_sandbox`` (the kernel sandbox beside process isolation), ``bench_mix``, ``bench_eventlog``, ``bench_backends``, ``bench_startup`` and
``bench_graph`` (a user's own plan). :mod:`.harness` interleaves the runs and reports;
:mod:`.baselines` holds what the engine is compared with; :mod:`.cli` is the command.
Nothing is imported here, so that loading the command stays cheap. See
``docs/benchmarks.md``.
"""
