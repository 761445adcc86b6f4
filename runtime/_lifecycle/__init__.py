"""A plan's lifecycle: the supervisor (Strategize, Execute, Apply) and its parts: the
shared plan state, the round of validations, reuse of earlier results, the escalation
ladder, coverage of acceptance criteria, the plan's sandboxes, Apply, executors, the
validators a plan spawns, and re-running a finished plan.

Inside, the supervisor imports its parts and they import what they share (:mod:`._plan`);
never the other way. Imports :mod:`.._running` and everything below it.
"""
