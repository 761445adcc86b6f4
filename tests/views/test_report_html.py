"""`gategraph report PLAN_ID --html FILE` and `run --report html FILE`: one self-contained
page, checked in a real headless browser (Debian's chromium): it loads with no console
message, and its timeline and diff are laid out where a person can see them."""

from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from _helpers import run_gategraph, run_process

EDIT = """
version: 1
name: change
resources: {repo: {kind: directory, path: repo}}
tools:
  - name: edit
    code: |
      from pathlib import Path
      def run(root):
          p = Path(root) / "hello.py"
          p.write_text(p.read_text().replace("hi", "hello <&> world"))
          return {"files": ["hello.py"]}
    resource_slots: [root]
validations:
  - {name: ok, entrypoint: "gategraph.runtime.testing:passing"}
  - {name: hint, entrypoint: "gategraph.runtime.testing:failing", mode: informational}
nodes:
  - {id: work, tool: edit}
  - {id: check, validation: ok, needs: [work]}
  - {id: advice, validation: hint, needs: [work]}
acceptance: [{id: AC1, text: "The edit is <fine>.", validations: [check]}]
"""

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI installs the browser: there, a missing one fails the check instead of skipping it.
needs_browser = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("GATEGRAPH_REQUIRE_BROWSER"),
    reason="no chromium here",
)

# Loads the report in a frame and writes, on its own element, which of the report's
# sections the browser laid out with a size (the DOM dump below reads it back).
WRAPPER = """<!doctype html><html><body><div id="seen"></div>
<iframe id="page" src="%s" style="width:1200px;height:2400px"></iframe>
<script>
document.getElementById("page").addEventListener("load", () => {
  const doc = document.getElementById("page").contentDocument;
  const seen = [...doc.querySelectorAll("section[id]")].filter((s) => {
    const box = s.getBoundingClientRect();
    const style = doc.defaultView.getComputedStyle(s);
    return box.width > 0 && box.height > 0 && style.visibility !== "hidden"
      && style.display !== "none";
  }).map((s) => s.id);
  const rows = doc.querySelectorAll("#timeline tr").length;
  const lines = doc.querySelectorAll("#diff .add, #diff .del").length;
  document.getElementById("seen").textContent = JSON.stringify({seen, rows, lines});
});
</script></body></html>
"""


def project(folder: Path) -> None:
    (folder / "repo").mkdir()
    (folder / "repo" / "hello.py").write_text("print('hi')\n")
    (folder / "plan.yaml").write_text(textwrap.dedent(EDIT).lstrip())


def in_the_browser(page: Path) -> tuple[dict[str, object], list[str]]:
    """What chromium laid out of ``page`` (via the wrapper), and every console line it
    logged while loading it."""
    assert CHROMIUM is not None, "chromium is needed here (apt-get install chromium)"
    wrapper = page.with_name("wrapper.html")
    wrapper.write_text(WRAPPER % page.name)
    done = run_process(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--virtual-time-budget=10000",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            wrapper.as_uri(),
        ]
    )
    found = re.search(r'<div id="seen">(.*?)</div>', done.stdout)
    assert found is not None, done.stdout[-2000:] + done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return json.loads(found.group(1)), console


def test_the_report_page_of_an_applied_plan(tmp_path: Path) -> None:
    project(tmp_path)
    home = tmp_path / "home"
    done = run_gategraph(home, "run", "plan.yaml", "--report", "html", "report.html", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    # Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch).
    assert not re.search(r'(src|href)="(?!#)', page)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
    assert "<script" not in page
    for section in ("graph", "timeline", "steps", "criteria", "diff", "statistics"):
        assert f'<section id="{section}">' in page
    assert "hello &lt;&amp;&gt; world" in page and "The edit is &lt;fine&gt;." in page
    assert "<svg" in page and "AC1: The edit is &lt;fine&gt;." in page
    plan_id = json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout)[0]["plan_id"]
    again = run_gategraph(home, "report", plan_id, "--html", "again.html", cwd=tmp_path)
    assert again.returncode == 0 and again.stderr == "wrote again.html\n"
    assert (tmp_path / "again.html").read_text(encoding="utf-8") == page


@needs_browser
def test_the_report_loads_in_a_browser_with_its_timeline_and_diff_in_view(
    tmp_path: Path,
) -> None:
    project(tmp_path)
    done = run_gategraph(
        tmp_path / "home", "run", "plan.yaml", "--report", "html", "report.html", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    laid_out, console = in_the_browser(tmp_path / "report.html")
    assert console == []
    assert set(laid_out["seen"]) >= {"graph", "timeline", "steps", "criteria", "diff"}  # type: ignore[arg-type]
    assert laid_out["rows"] == 3  # the header and the round's two validations
    assert laid_out["lines"] == 2  # one line out, one in


@needs_browser
def test_the_browser_check_sees_a_broken_page(tmp_path: Path) -> None:
    """The check can fail: a page whose script throws logs to the console, and a section
    that is not displayed is not seen."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!doctype html><html><body><section id="timeline" style="display:none">x</section>'
        '<section id="diff">y</section><script>undefinedFunction()</script></body></html>'
    )
    laid_out, console = in_the_browser(page)
    assert laid_out["seen"] == ["diff"]
    assert any("undefinedFunction" in line for line in console)


def test_report_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    home = tmp_path / "home"
    missing = run_gategraph(home, "report", "nope", "--html", "r.html", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.startswith("error: no plan 'nope'")
    project(tmp_path)
    assert run_gategraph(home, "run", "plan.yaml", cwd=tmp_path).returncode == 0
    plan_id = json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout)[0]["plan_id"]
    nowhere = run_gategraph(home, "report", plan_id, "--html", "no/r.html", cwd=tmp_path)
    assert nowhere.returncode == 2 and "no such folder" in nowhere.stderr
    bare = run_gategraph(home, "report", plan_id, cwd=tmp_path)
    assert bare.returncode == 2 and "--html" in bare.stderr
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob(".*.tmp"))
    # The graph file changed since: the page says so instead of drawing another graph.
    (tmp_path / "plan.yaml").write_text((tmp_path / "plan.yaml").read_text() + "\n# edited\n")
    assert run_gategraph(home, "report", plan_id, "--html", "r.html", cwd=tmp_path).returncode == 0
    assert "not at hand" in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_a_long_chain_and_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A valid plan of any shape gets its page: 1,200 nodes each needing the next (listed
    last first), and a work node that writes a file whose name is not UTF-8."""
    (tmp_path / "repo").mkdir()
    count = 1_200
    nodes = [
        {"id": f"v{i}", "validation": "ok", **({"needs": [f"v{i - 1}"]} if i else {})}
        for i in reversed(range(count))
    ]
    plan = {
        "version": 1,
        "name": "chain",
        "resources": {"repo": {"kind": "directory", "path": "repo"}},
        "tools": [
            {
                "name": "odd",
                "code": "import os\ndef run(root):\n"
                "    open(os.path.join(os.fsencode(root), b'caf\\xe9.txt'), 'w').write('x')\n",
                "resource_slots": ["root"],
            }
        ],
        "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
        "nodes": [{"id": "work", "tool": "odd"}, *nodes],
    }
    nodes[-1]["needs"] = ["work"]
    (tmp_path / "plan.yaml").write_text(json.dumps(plan))
    home = tmp_path / "home"
    done = run_gategraph(home, "run", "plan.yaml", "--report", "html", "r.html", cwd=tmp_path)
    # Apply refuses the name (its journal cannot record it): the plan fails, and its page
    # says why, with the name shown as it is.
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "caf\ufffd.txt" in page and "<svg" in page  # the odd byte, shown as one mark


def test_a_wide_fan_out_ends_in_one_box(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    plan = {
        "version": 1,
        "name": "wide",
        "resources": {"repo": {"kind": "directory", "path": "repo"}},
        "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
        "nodes": [{"id": f"v{i}", "validation": "ok"} for i in range(30)],
    }
    (tmp_path / "plan.yaml").write_text(json.dumps(plan))
    done = run_gategraph(
        tmp_path / "home", "run", "plan.yaml", "--report", "html", "r.html", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert ">+7 more</text>" in page and page.count("<g><title>") == 23


def test_the_report_page_of_a_paused_plan(tmp_path: Path) -> None:
    project(tmp_path)
    plan = (tmp_path / "plan.yaml").read_text()
    (tmp_path / "plan.yaml").write_text(
        plan + "policy: {approval: {rules: [{match: check, tier: high, action: require}]}}\n"
    )
    home = tmp_path / "home"
    paused = run_gategraph(home, "run", "plan.yaml", "--json", cwd=tmp_path)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    plan_id = json.loads(paused.stdout)["plan_id"]
    done = run_gategraph(home, "report", plan_id, "--html", "paused.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "paused.html").read_text(encoding="utf-8")
    assert "awaiting_approval" in page and "what Apply would commit" in page
    assert "a person&#x27;s approval (tier high)" in page
    assert '<span class="add">+print(&#x27;hello &lt;&amp;&gt; world&#x27;)</span>' in page
    assert not (tmp_path / "repo" / "hello.py").read_text().startswith("print('hello")
