"""``python -m gategraph.runtime._cli`` runs the ``gategraph`` command line."""

from gategraph.runtime._cli import main

main()
