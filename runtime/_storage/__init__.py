"""What a plan keeps on disk: the event log's database, the plan's copies of its folders,
and the content store of their snapshots.

Imports only :mod:`.._data` and :mod:`.._base`. Knows nothing of calling code: the two are
independent layers.
"""
