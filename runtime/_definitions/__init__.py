"""What a plan file's names mean: the plan graph and its schema, the catalog, plugins,
skills, evidence and acceptance criteria, the plan's pluggable roles, and the validator
tools.

Imports :mod:`.._calls`, :mod:`.._storage`, :mod:`.._data` and :mod:`.._base`: a graph
prepares its tools' calls and checks their folders as it loads.
"""
