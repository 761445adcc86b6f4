"""Running validations: the actor engine and its fan-out, the layered pipeline (routing,
payload, semantic, approval), a plan's journal in its event log, the observers that watch
events, the sync twins of the entry points, a plan's skills at work, and the standalone
validate-and-fix loop of independent validators.

Imports :mod:`.._definitions` and everything below it; nothing of a plan's lifecycle.
"""
