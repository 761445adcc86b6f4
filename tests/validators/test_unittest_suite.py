"""``unittest_suite``: a project's unittest suite, run on a disposable copy, never on the
project itself; bad arguments, failures, no tests and a timeout each fail with a reason."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from gategraph.runtime import ToolContext
from gategraph.runtime._calls._readonly import Guard, guarded
from gategraph.validators import _unittest as unittest_module
from gategraph.validators import unittest_suite


def project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def suite(root: Any, earlier: Any = None, **kwargs: Any) -> dict[str, Any]:
    """Run the check as the runtime does: guarded, its context cleaned up after (told
    ``earlier``, as a plan's later round); the project must be unchanged and the guard
    must have refused nothing."""
    folder = root if isinstance(root, Path) and root.is_dir() else None
    before = snapshot(folder) if folder is not None else None
    with guarded(Guard("validation 'unittest'")) as guard:
        context = ToolContext(resources={"root": root}, guard=guard, earlier=earlier)
        try:
            outcome = await unittest_suite(root=root, context=context, **kwargs)
        finally:
            context.cleanup()
    assert guard.violation is None
    if folder is not None:
        assert snapshot(folder) == before
    assert set(outcome) == {"passed", "message", "data"}
    return outcome


LIBRARY = {
    "src/calc.py": """
        def add(a, b):
            return a + b
        """,
}

PASSING = {
    **LIBRARY,
    "tests/test_calc.py": """
        import unittest
        from calc import add

        class Calc(unittest.TestCase):
            def test_add(self):
                self.assertEqual(add(2, 2), 4)

            def test_negative(self):
                self.assertEqual(add(-1, 1), 0)

            @unittest.skip("not today")
            def test_later(self):
                pass
        """,
}

FAILING = {
    **LIBRARY,
    "tests/test_calc.py": """
        import unittest
        from calc import add

        class Calc(unittest.TestCase):
            def test_add(self):
                self.assertEqual(add(2, 2), 4)

            def test_wrong(self):
                self.assertEqual(add(2, 2), 5)

            def test_broken(self):
                raise RuntimeError("boom")
        """,
}


@pytest.mark.anyio
async def test_a_passing_suite_passes_counting_skips(tmp_path: Path) -> None:
    """Tests import the project's ``src``; skips are counted and said."""
    outcome = await suite(project(tmp_path / "p", PASSING))
    assert outcome["passed"] is True, outcome
    assert outcome["message"] == "All 3 tests passed (1 skipped)"
    data = outcome["data"]
    assert (data["tests_run"], data["tests_failed"], data["tests_skipped"]) == (3, 0, 1)
    assert data["failures"] == [] and data["exit_code"] == 0
    assert "OK (skipped=1)" in data["output"]


@pytest.mark.anyio
async def test_one_passing_test_is_said_in_the_singular(tmp_path: Path) -> None:
    """One test: "1 test passed"."""
    files = {
        "checks/check_one.py": "import unittest\n\nclass One(unittest.TestCase):\n"
        "    def test_it(self):\n        pass\n"
    }
    outcome = await suite(project(tmp_path / "p", files), start="checks", pattern="check_*.py")
    assert outcome["passed"] is True
    assert outcome["message"] == "1 test passed"


@pytest.mark.anyio
async def test_failures_and_errors_are_named(tmp_path: Path) -> None:
    """Each failing or erroring test is listed with its kind, and counted."""
    outcome = await suite(project(tmp_path / "p", FAILING))
    assert outcome["passed"] is False
    data = outcome["data"]
    assert (data["tests_run"], data["tests_failed"]) == (3, 2)
    assert data["exit_code"] == 1
    kinds = sorted((f["test"].rsplit(".", 1)[-1], f["kind"]) for f in data["failures"])
    assert kinds == [("test_broken", "ERROR"), ("test_wrong", "FAIL")]
    assert all(f["test"].startswith("test_calc.Calc.") for f in data["failures"])
    assert outcome["message"].startswith("2 of 3 tests failed: ")
    assert "test_wrong" in outcome["message"] and "test_broken" in outcome["message"]
    assert "RuntimeError: boom" in data["output"]


@pytest.mark.anyio
async def test_a_failure_is_named_by_its_dotted_test_id(tmp_path: Path) -> None:
    """``failures[].test`` is the test's id, module.Class.method, as unittest names it."""
    outcome = await suite(project(tmp_path / "p", FAILING))
    assert sorted(f["test"] for f in outcome["data"]["failures"]) == [
        "test_calc.Calc.test_broken",
        "test_calc.Calc.test_wrong",
    ]


@pytest.mark.anyio
async def test_a_run_that_fails_after_its_tests_passed_is_a_failure(tmp_path: Path) -> None:
    """Every test passed but the runner exited non-zero (here, at exit): not a pass, and
    the message ends with the runner's last line."""
    files = {
        "tests/test_exit.py": """
            import atexit, os, unittest

            atexit.register(os._exit, 3)

            class Fine(unittest.TestCase):
                def test_ok(self):
                    pass
            """
    }
    outcome = await suite(project(tmp_path / "p", files))
    assert outcome["passed"] is False
    assert outcome["data"]["exit_code"] == 3
    assert outcome["data"]["tests_failed"] == 0
    assert outcome["message"] == "the tests passed but the runner exited with code 3: OK"


@pytest.mark.anyio
async def test_a_folder_without_tests_is_a_failure(tmp_path: Path) -> None:
    """No test found is never a pass."""
    root = project(tmp_path / "p", {**LIBRARY, "tests/helpers.py": "X = 1\n"})
    outcome = await suite(root)
    assert outcome["passed"] is False
    assert outcome["message"] == "No tests ran: unittest found none in 'tests'"
    assert outcome["data"]["tests_run"] == 0


@pytest.mark.anyio
async def test_a_missing_start_folder_is_a_failure(tmp_path: Path) -> None:
    """Without the folder to discover in, nothing runs: said so."""
    outcome = await suite(project(tmp_path / "p", LIBRARY))
    assert outcome == {
        "passed": False,
        "message": "No tests ran: there is no folder 'tests' in the project",
        "data": {},
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"start": ""}, "start must be a non-empty string, got ''"),
        ({"start": 3}, "start must be a non-empty string, got 3"),
        ({"pattern": "  "}, "pattern must be a non-empty string, got '  '"),
        ({"paths": "src"}, "paths must be a list of strings"),
        ({"paths": ["src", 1]}, "paths must be a list of strings"),
        ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        ({"timeout": -5}, "timeout must be a positive number of seconds, got -5"),
        ({"timeout": True}, "timeout must be a positive number of seconds, got True"),
        ({"timeout": "10"}, "timeout must be a positive number of seconds, got '10'"),
        ({"timeout": float("inf")}, "timeout must be a positive number of seconds, got inf"),
        ({"start": "/etc"}, "start: '/etc' leads outside the project"),
        ({"start": "tests/../../x"}, "start: 'tests/../../x' leads outside the project"),
        ({"paths": ["src", "../up"]}, "paths: '../up' leads outside the project"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_runs(
    tmp_path: Path, kwargs: dict[str, Any], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each bad argument is ``bad_arguments`` naming it; no copy is made, nothing runs."""

    async def never(*args: Any, **kw: Any) -> Any:
        raise AssertionError("nothing may run for bad arguments")

    monkeypatch.setattr(unittest_module.anyio, "run_process", never)
    outcome = await suite(project(tmp_path / "p", PASSING), **kwargs)
    assert outcome["passed"] is False
    assert outcome["data"]["error"] == "bad_arguments"
    assert words in outcome["message"]


@pytest.mark.anyio
@pytest.mark.parametrize("root", ["", None, "{missing}"])
async def test_a_root_that_is_not_a_folder_is_refused(tmp_path: Path, root: Any) -> None:
    """The root must be an existing folder (a directory resource)."""
    if root == "{missing}":
        root = str(tmp_path / "missing")
    outcome = await suite(root)
    assert outcome["data"]["error"] == "bad_arguments"
    assert outcome["message"].startswith("root ")


@pytest.mark.anyio
async def test_a_suite_past_its_timeout_is_killed_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``timeout`` the run is cancelled and the check fails as ``timeout``."""
    started: list[dict[str, Any]] = []

    async def hangs(command: list[str], **kwargs: Any) -> Any:
        started.append({"command": command, **kwargs})
        await anyio.sleep_forever()

    monkeypatch.setattr(unittest_module.anyio, "run_process", hangs)
    outcome = await suite(project(tmp_path / "p", PASSING), timeout=0.05)
    assert outcome["passed"] is False
    assert outcome["data"]["error"] == "timeout"
    assert outcome["message"] == "the tests did not finish within 0.05 seconds"
    (call,) = started
    assert call["command"][-4:] == [
        "-m",
        "gategraph.validators._unittest_shard",
        "tests",
        "test*.py",
    ]
    assert Path(call["cwd"]).name == "p" and Path(call["cwd"]) != tmp_path / "p"
    assert call["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    assert call["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(Path(call["cwd"]) / "src")


def test_status_counts_ignore_what_is_not_a_number() -> None:
    """unittest's "FAILED (failures=1, errors=2)" is read key by key."""
    assert unittest_module._counts("failures=1, errors=2, skipped=x") == {
        "failures": 1,
        "errors": 2,
    }
    assert unittest_module._counts(None) == {}


SHARDED = {
    **LIBRARY,
    **{
        f"tests/test_part{n}.py": "import unittest\n\n\nclass Part(unittest.TestCase):\n"
        + "".join(
            f"    def test_{k}(self):\n        self.assertNotEqual({k}, {n}, 'part {n}')\n"
            for k in range(n + 2)
        )
        for n in range(4)
    },
}


@pytest.mark.anyio
async def test_a_suite_in_shards_says_what_the_suite_in_one_says(tmp_path: Path) -> None:
    """Shards split the tests by class, each test runs once, and the one result is the
    same as one runner's: the counts, the failures."""
    root = project(tmp_path / "p", SHARDED)
    one = await suite(root, shards=1)
    three = await suite(root, shards=3)
    counts = ("tests_run", "tests_failed", "tests_skipped", "exit_code")
    assert [three["data"][k] for k in counts] == [one["data"][k] for k in counts] == [14, 4, 0, 1]
    assert sorted(f["test"] for f in three["data"]["failures"]) == sorted(
        f["test"] for f in one["data"]["failures"]
    )
    assert (one["data"]["shards"], three["data"]["shards"]) == (1, 3)
    assert "-- shard 3 of 3 --" in three["data"]["output"]
    assert set(one["data"]["durations"]) == {f"test_part{n}.Part" for n in range(4)}
    assert sorted(one["data"]["failed_ids"]) == [f"test_part{n}.Part.test_{n}" for n in range(4)]


# One slow test (it waits until every unit of the suite is taken) and ten quick ones.
UNEVEN = {
    **LIBRARY,
    "tests/test_a.py": """
        import json, os, time, unittest

        class Slow(unittest.TestCase):
            def test_slow(self):
                queue = json.load(open(os.environ["GATEGRAPH_UNITTEST"]))["queue"]
                deadline = time.monotonic() + 60
                while len(os.listdir(queue)) < 11 and time.monotonic() < deadline:
                    time.sleep(0.01)
        """,
    **{
        f"tests/test_{c}.py": "import unittest\n\nclass Quick(unittest.TestCase):\n"
        "    def test_quick(self):\n        pass\n"
        for c in "bcdefghijk"
    },
}


@pytest.mark.anyio
async def test_a_shard_held_up_by_a_slow_test_leaves_the_rest_to_the_others(
    tmp_path: Path,
) -> None:
    """The shards take classes as they are ready for more: the one held up by a slow
    test takes nothing more while it runs, the other runs the rest."""
    root = project(tmp_path / "p", UNEVEN)
    outcome = await suite(root, shards=2)
    assert outcome["passed"] and outcome["data"]["tests_run"] == 11, outcome
    ran = sorted(int(n) for n in re.findall(r"Ran (\d+) tests?", outcome["data"]["output"]))
    assert ran == [1, 10], outcome["data"]["output"]


ONCE = {
    **LIBRARY,
    "tests/test_calc.py": """
        import os, unittest

        class Calc(unittest.TestCase):
            def test_fine(self):
                pass

            def test_fixed(self):
                self.assertTrue(os.path.exists("fixed"), "not fixed yet")
        """,
}


@pytest.mark.anyio
async def test_what_failed_last_time_runs_first_and_a_failure_again_stops(tmp_path: Path) -> None:
    root = project(tmp_path / "p", ONCE)
    one = await suite(root, shards=2)
    assert one["data"]["failed_ids"] == ["test_calc.Calc.test_fixed"]
    again = await suite(root, one["data"], shards=2)
    assert again["passed"] is False and again["data"]["stopped_early"] is True
    assert again["message"].startswith("1 of 1 test failed: test_fixed (run first")
    assert (again["data"]["tests_run"], again["data"]["first"]) == (1, 1)
    (root / "fixed").write_text("")
    try:
        fixed = await suite(root, again["data"], shards=2)
    finally:
        (root / "fixed").unlink()
    assert fixed["message"] == "All 2 tests passed", fixed["message"]
    assert (fixed["data"]["first"], fixed["data"]["stopped_early"]) == (1, False)
    whole = await suite(root, one["data"], failed_first=False)
    assert (whole["data"]["tests_run"], whole["data"]["first"]) == (2, 0)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"shards": 0}, "shards must be"),
        ({"shards": "two"}, "shards must be"),
        ({"failed_first": 1}, "failed_first must be true or false"),
    ],
)
async def test_bad_shards_or_failed_first_are_refused(
    tmp_path: Path, arguments: dict[str, Any], words: str
) -> None:
    outcome = await suite(project(tmp_path / "p", PASSING), **arguments)
    assert outcome["data"]["error"] == "bad_arguments" and words in outcome["message"]


SUBTESTS = {
    **LIBRARY,
    "tests/test_calc.py": """
        import unittest

        class Calc(unittest.TestCase):
            def test_many(self):
                for n in range(3):
                    with self.subTest(n=n):
                        self.assertNotEqual(n, 1)
        """,
}


@pytest.mark.anyio
async def test_a_failing_subtest_runs_its_test_first_next_time(tmp_path: Path) -> None:
    outcome = await suite(project(tmp_path / "p", SUBTESTS))
    assert outcome["passed"] is False
    assert outcome["data"]["failed_ids"] == ["test_calc.Calc.test_many"]
