"""gategraph's built-in validation library.

Each validation here is a real check a user can attach on day one. The library grows with the
engine (issue 3); it uses only the public names of :mod:`gategraph.runtime`.
"""

__all__: list[str] = []
