"""The ground everything stands on: gategraph's errors, ids, its folder and its databases'
settings, Ctrl-C, the current span, a plan's statuses by name, the protocols users plug in,
the YAML reader, and the kernel's controls (Landlock, seccomp, namespaces).

Imports nothing of the runtime. Each module here is small and cheap to import: the command
line loads some of them at start-up.
"""
