"""``python -m gategraph.runtime._cli`` runs the ``gategraph`` command line."""

# Absolute, and guarded: a worker process (process isolation) runs the parent's __main__
# again as a plain file, and must not start a second command line in it.
from gategraph.runtime._cli import main

if __name__ == "__main__":
    main()
