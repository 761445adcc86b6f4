"""What a plan's files and results hold: the configuration models (tools, validations),
validation results, verdicts, events, the fault catalogue and retry budget (Max-N), and the
built-in validations and tools that ship with gategraph.

Imports only :mod:`.._base` (and ``gategraph.runtime.testing``'s names, to know its fakes as
gategraph's own code).
"""
