"""Start an MCP server whose folder is fixed (``mcp-server-git --repository DIR``) so that
it reads a plan's copy of that folder in its place.

``python -m gategraph.runtime._calls._mcp_view COPY FOLDER -- COMMAND ARGS...`` gives the
process mounts of its own, where ``FOLDER`` shows ``COPY`` (the call's folder: the plan's
copy, or a disposable one), and then becomes ``COMMAND``: the server knows only
``FOLDER``, and judges the change. Nothing else on the machine sees the difference, and
the mounts end with the server.
"""

from __future__ import annotations

import os
import sys

from gategraph.runtime._base._kernel import SharedFolderError, show_folder_at

# How the lines a call reports begin when the server could not be shown its folder: a
# configuration that no retry changes (see McpCall._on_view).
NOT_SHOWN = "gategraph cannot show the plan's copy to this MCP server"


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        usage = "python -m gategraph.runtime._calls._mcp_view COPY FOLDER -- COMMAND ..."
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    copy, folder, command = argv[0], argv[1], argv[3:]
    if not os.path.isdir(folder):
        print(f"{NOT_SHOWN}: its folder {folder} is not a folder", file=sys.stderr)
        return 1
    try:
        show_folder_at(copy, folder)
    except SharedFolderError as exc:
        print(f"{NOT_SHOWN} at {folder}: the copy {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # The server's stderr ends with this line, which the run reports.
        print(
            f"{NOT_SHOWN} at {folder}: {exc} (it needs a mount namespace of its own: "
            "unprivileged user namespaces turned on)",
            file=sys.stderr,
        )
        return 1
    # A working directory inside the folder is still the real one until it is entered
    # again: a server that reads `.` must see the copy too.
    os.chdir(os.getcwd())
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"{NOT_SHOWN}: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
