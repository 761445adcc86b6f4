"""``python -m gategraph.runtime`` runs the ``gategraph`` command line."""

from ._cli import main

# Guarded: a worker process (process isolation) imports the parent's __main__ again, and
# must not start a second command line in it.
if __name__ == "__main__":
    main()
