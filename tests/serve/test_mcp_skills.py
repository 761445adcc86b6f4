"""`gategraph mcp serve --skill`: an MCP client is given a skill's tools and validations,
and nothing else of the catalog."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from _helpers import cli_env, run_gategraph
from _mcp_session import call, session_with
from gategraph.runtime import Catalog, Skill, Validation, tool_from_config
from gategraph.runtime._serve._mcp_serve import create_mcp_server
from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.timeout(180)

SHORT = {
    "name": "short-lines",
    "code": (
        "from pathlib import Path\n"
        "def run(root):\n"
        "    long = [p.name for p in Path(root).rglob('*.py') if len(p.read_text()) > 40]\n"
        "    return {'passed': not long, 'message': ', '.join(long) or 'ok'}\n"
    ),
    "resource_slots": ["root"],
}


@pytest.mark.anyio
async def test_a_skill_serves_its_members_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("x = " + "1" * 60 + "\n")
    warned: list[str] = []
    with Catalog.in_memory() as catalog:
        catalog.add(Validation.from_config(SHORT))
        catalog.add(Validation.from_config({**SHORT, "name": "elsewhere"}))
        catalog.add(tool_from_config({"name": "fmt", "code": "def run(): pass", "writes": True}))
        catalog.add_skill(Skill(name="review", tools=("short-lines", "python_syntax", "fmt")))
        catalog.add_skill(Skill(name="other", tools=("python_syntax",)))
        server = create_mcp_server(
            catalog, skills=["review", "other"], root=tmp_path, warn=warned.append
        )
        async with session_with(server) as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["short-lines", "python_syntax"]  # each once, in the skill's order
            assert warned == [
                "not serving fmt: it is not read-only (only read-only tools are served)"
            ]
            result, text = await call(session, "short-lines", {"root": str(tmp_path)})
            assert json.loads(text)["passed"] is False and not result.is_error
            result, text = await call(session, "elsewhere", {"root": str(tmp_path)})
            assert result.is_error and text == "Unknown tool: elsewhere"  # not in the skills
            # The skill is read afresh: updated while serving, it is served as it is now.
            catalog.add_skill(Skill(name="review", tools=("elsewhere",)), update=True)
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["elsewhere", "python_syntax"]
        with pytest.raises(LookupError, match="no skill named 'ghost'"):
            create_mcp_server(catalog, skills=["ghost"])
        async with session_with(create_mcp_server(catalog, skills="other")) as session:
            names = [t.name for t in (await session.list_tools()).tools]  # one name, not letters
            assert names == ["python_syntax"]


@pytest.mark.anyio
async def test_serve_skill_from_the_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        run_gategraph(home, "skill", "add", "syntax", "python_syntax", cwd=tmp_path).returncode == 0
    )
    unknown = run_gategraph(home, "mcp", "serve", "--skill", "ghost", cwd=tmp_path)
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "error: --skill ghost: no skill named 'ghost' in the catalog "
        "(gategraph skill list shows them)\n"
    )
    elsewhere = tmp_path / "elsewhere"
    refused = run_gategraph(elsewhere, "mcp", "serve", "--validators", "--skill", "x", cwd=tmp_path)
    assert refused.returncode == 2 and "--skill x: no skill named 'x'" in refused.stderr
    assert not elsewhere.exists()  # refused before --validators made a catalog
    both = run_gategraph(home, "mcp", "serve", "--skill", "syntax", "--no-builtins", cwd=tmp_path)
    assert both.returncode == 2 and "--no-builtins does not apply with --skill" in both.stderr
    (tmp_path / "ok.py").write_text("x = 1\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gategraph.runtime", "mcp", "serve", "--skill", "syntax"],
        env=cli_env(home),
        cwd=str(tmp_path),
    )
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                assert names == ["python_syntax"]
                _, text = await call(session, "python_syntax", {"root": "."})
                assert json.loads(text)["passed"] is True
