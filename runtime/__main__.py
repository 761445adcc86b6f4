"""``python -m gategraph.runtime`` runs the ``gategraph`` command line."""

from ._cli import main

main()
