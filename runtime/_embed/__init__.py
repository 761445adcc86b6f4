"""The ways in for code that embeds gategraph: ``validate`` (one change, no plan), the gate
around a framework's plan, and OpenTelemetry tracing.

Imports :mod:`.._lifecycle` and everything below it. Independent of :mod:`.._views`.
"""
