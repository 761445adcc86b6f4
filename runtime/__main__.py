"""``python -m gategraph.runtime`` runs the ``gategraph`` command line."""

# Absolute: a worker process (process isolation) runs the parent's __main__ again from its
# path, outside any package, where a relative import fails and the worker with it.
from gategraph.runtime._cli import main

# Guarded: in that worker it must not start a second command line.
if __name__ == "__main__":
    main()
