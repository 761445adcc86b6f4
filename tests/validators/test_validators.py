"""The built-in validation library: each check passes, fails, refuses bad arguments, and
never writes (seed 000, "Read-Only Enforcement"; seed 002, "semantic validation")."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import yaml
from _helpers import python_prints
from gategraph import validators
from gategraph.runtime import Catalog, ToolContext, Validation, ValidationMode
from gategraph.runtime._calls._readonly import Guard, guarded
from gategraph.validators import (
    BUILTIN_CONFIGS,
    builtin_validations,
    json_schema,
    paths_exist,
    pytest_suite,
    python_syntax,
    regex,
    unsafe_command,
)
from gategraph.validators import _pytest as pytest_module
from gategraph.validators import _pytest_shard as pytest_shard_module
from gategraph.validators._common import compile_glob
from gategraph.validators._json_schema import format_path
from gategraph.validators._paths_exist import find_paths
from gategraph.validators._unsafe_command import DEFAULT_RULES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "validators.md"

# -- helpers -------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (``None``) under ``root``, symlinks as links."""
    tree: dict[str, bytes | None] = {}
    for folder, dirnames, filenames in os.walk(root):
        for name in dirnames:
            tree[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in filenames:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                tree[relative] = b"-> " + os.fsencode(os.readlink(path))
            else:
                with open(path, "rb") as file:
                    tree[relative] = file.read()
    return tree


def check(
    func: Callable[..., dict[str, Any]], root: object = None, **kwargs: Any
) -> dict[str, Any]:
    """Call a sync built-in under the read-only guard; it must not write or change ``root``."""
    folder = root if isinstance(root, Path) and root.is_dir() else None
    before = snapshot(folder) if folder is not None else None
    if root is not None:
        kwargs["root"] = root
    with guarded(Guard(f"validation {func.__name__!r}")) as guard:
        outcome = func(**kwargs)
    assert guard.violation is None
    if folder is not None:
        assert snapshot(folder) == before
    assert set(outcome) == {"passed", "message", "data"}
    assert type(outcome["passed"]) is bool
    assert isinstance(outcome["message"], str) and outcome["message"]
    json.dumps(outcome["data"], allow_nan=False)  # JSON-compatible
    return outcome


def bad_arguments(outcome: dict[str, Any], *words: str) -> None:
    """Assert ``outcome`` is a bad-arguments failure whose message has each of ``words``."""
    assert outcome["passed"] is False
    assert outcome["data"]["error"] == "bad_arguments"
    for word in words:
        assert word in outcome["message"]


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create files under ``root`` (folders as needed); return ``root``."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small repository: sources, docs, a binary file, a large file, a .git folder."""
    return write(
        tmp_path / "project",
        {
            "README.md": "# demo\nTODO: write docs\n",
            "pyproject.toml": "[project]\nname = 'demo'\n",
            "src/app.py": "def main():\n    return 1  # TODO tidy\n",
            "src/util/helpers.py": "X = 1\n",
            "docs/guide.md": "Run `src/app.py`.\n",
            "data/blob.bin": b"\x00\x01TODO\x02",
            "data/big.txt": "TODO\n" + "x" * (1 << 20),
            ".git/config": "TODO in git metadata\n",
        },
    )


# -- json_schema ---------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "steps": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["title"],
}


def test_json_schema_passes_a_matching_artifact() -> None:
    """An artifact that matches the schema passes with no errors."""
    outcome = check(json_schema, artifact={"title": "x", "steps": [1, 2]}, schema=SCHEMA)
    assert outcome["passed"] is True
    assert outcome["data"] == {"errors": [], "error_count": 0}


def test_json_schema_fails_with_paths_and_messages() -> None:
    """Each error names where it is (``steps[1]``) and what is wrong."""
    outcome = check(json_schema, artifact={"steps": [1, "two"]}, schema=SCHEMA)
    assert outcome["passed"] is False
    errors = outcome["data"]["errors"]
    assert {"path": "steps[1]", "message": "'two' is not of type 'integer'"} in errors
    assert {"path": "", "message": "'title' is a required property"} in errors
    assert outcome["data"]["error_count"] == 2
    assert outcome["message"].startswith("2 schema errors:")
    assert "steps[1]" in outcome["message"] and "(root)" in outcome["message"]


def test_json_schema_caps_the_error_list_but_counts_all() -> None:
    """At most 50 errors are listed; ``error_count`` is the true total."""
    outcome = check(json_schema, artifact=["x"] * 70, schema={"items": {"type": "integer"}})
    assert len(outcome["data"]["errors"]) == 50
    assert outcome["data"]["error_count"] == 70


def test_json_schema_uses_the_draft_named_by_dollar_schema() -> None:
    """``$schema`` picks the draft: Draft 7 allows a list under ``items``, 2020-12 does not."""
    draft7 = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "items": [{"type": "integer"}],
    }
    assert check(json_schema, artifact=["x"], schema=draft7)["passed"] is False
    assert check(json_schema, artifact=[1, "x"], schema=draft7)["passed"] is True
    default = check(json_schema, artifact=[1], schema={"items": [{"type": "integer"}]})
    bad_arguments(default, "not a valid JSON Schema")


def test_json_schema_checks_formats_only_when_asked() -> None:
    """``format`` is an annotation unless ``check_formats`` is true."""
    schema = {"type": "string", "format": "email"}
    assert check(json_schema, artifact="nope", schema=schema)["passed"] is True
    outcome = check(json_schema, artifact="nope", schema=schema, check_formats=True)
    assert outcome["passed"] is False
    assert "email" in outcome["data"]["errors"][0]["message"]


def test_json_schema_resolves_local_refs_and_accepts_boolean_schemas() -> None:
    """``$ref`` into ``$defs`` works; ``true`` and ``false`` are schemas too."""
    schema = {"$defs": {"id": {"type": "integer"}}, "items": {"$ref": "#/$defs/id"}}
    assert check(json_schema, artifact=[1, 2], schema=schema)["passed"] is True
    assert check(json_schema, artifact=[1, "x"], schema=schema)["passed"] is False
    assert check(json_schema, artifact={"any": 1}, schema=True)["passed"] is True
    assert check(json_schema, artifact=1, schema=False)["passed"] is False


@pytest.mark.parametrize(
    ("schema", "check_formats", "words"),
    [
        ("{}", False, ["schema must be an object", "a string"]),
        ({"type": "nope"}, False, ["not a valid JSON Schema", "type"]),
        ({"$schema": "https://example.com/mine"}, False, ["unknown $schema"]),
        ({"$schema": 7}, False, ["$schema must be a string"]),
        ({"$ref": "https://example.com/remote.json"}, False, ["cannot resolve $ref"]),
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, False, ["recursion"]),
        ({}, "yes", ["check_formats must be true or false"]),
    ],
)
def test_json_schema_refuses_bad_arguments(
    schema: object, check_formats: object, words: list[str]
) -> None:
    """A bad schema or flag is ``bad_arguments`` with a clear message, not an exception."""
    outcome = check(json_schema, artifact=[1], schema=schema, check_formats=check_formats)
    bad_arguments(outcome, *words)


def test_format_path_writes_dotted_paths() -> None:
    """Paths read ``a.b[0]``; odd keys are quoted; the document itself is ``""``."""
    assert format_path(["a", "b", 0, "c"]) == "a.b[0].c"
    assert format_path([0, "two words", 'q"']) == '[0]["two words"]["q\\""]'
    assert format_path([]) == ""


# -- paths_exist ---------------------------------------------------------------------------


def test_paths_exist_passes_when_every_mentioned_path_exists(project: Path) -> None:
    """Paths found in an object's values, lists and prose all exist: pass."""
    artifact = {
        "summary": "Changed src/app.py and `docs/guide.md`; see README.md for details.",
        "files": ["src/util/helpers.py", "pyproject.toml"],
        "folder": "src/util/",
        "count": 3,
    }
    outcome = check(paths_exist, project, artifact=artifact)
    assert outcome["passed"] is True
    assert outcome["data"] == {"checked": 6, "missing": [], "outside": []}
    assert outcome["message"] == "All 6 paths exist"


def test_paths_exist_fails_listing_hallucinated_paths(project: Path) -> None:
    """Missing paths are listed, in order, in ``data.missing`` and in the message."""
    artifact = "Edited src/app.py, src/nope.py and README.md; added docs/x.md and setup.cfg."
    outcome = check(paths_exist, project, artifact=artifact)
    assert outcome["passed"] is False
    assert outcome["data"]["missing"] == ["src/nope.py", "docs/x.md", "setup.cfg"]
    assert outcome["data"]["checked"] == 5
    assert outcome["message"] == "3 of 5 paths do not exist: src/nope.py, docs/x.md, setup.cfg"


def test_paths_exist_fails_paths_outside_the_resource(project: Path, tmp_path: Path) -> None:
    """``..``, absolute paths elsewhere, ``~`` and escaping symlinks are outside."""
    write(tmp_path, {"secret.txt": "s"})
    (project / "escape.txt").symlink_to(tmp_path / "secret.txt")
    artifact = [
        "../secret.txt",
        "/etc/passwd",
        "~/.bashrc",
        "escape.txt",
        f"{project}/src/app.py",  # absolute but inside: fine
        "src/../README.md",  # `..` that stays inside: fine
    ]
    outcome = check(paths_exist, project, artifact=artifact)
    assert outcome["passed"] is False
    assert outcome["data"]["outside"] == ["../secret.txt", "/etc/passwd", "~/.bashrc", "escape.txt"]
    assert outcome["data"]["missing"] == []
    assert "4 paths are outside the resource: ../secret.txt" in outcome["message"]


def test_paths_exist_reads_only_the_named_fields(project: Path) -> None:
    """With ``fields``, only those keys count, each value taken as a path as written."""
    artifact = {
        "files": ["src/app.py", "`docs/guide.md`", "src/app.py:2"],
        "main": "pyproject.toml",
        "notes": "mentions src/missing.py, which is not checked",
        "absent": None,
    }
    outcome = check(paths_exist, project, artifact=artifact, fields=["files", "main", "absent"])
    assert outcome["passed"] is True
    assert outcome["data"]["checked"] == 4
    outcome = check(paths_exist, project, artifact={"files": ["Makefile"]}, fields=["files"])
    assert outcome["data"]["missing"] == ["Makefile"]


def test_paths_exist_passes_an_artifact_without_paths(project: Path) -> None:
    """No path mentioned: nothing to check, pass."""
    outcome = check(paths_exist, project, artifact={"answer": "All good, and/or done.", "n": 1})
    assert outcome["passed"] is True
    assert outcome["data"]["checked"] == 0
    assert outcome["message"] == "The artifact mentions no file paths"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("See src/app.py. Then tests/test_a.py:12 fails.", ["src/app.py", "tests/test_a.py"]),
        ("Update README.md and pyproject.toml", ["README.md", "pyproject.toml"]),
        (
            "Look in `src/pkg` and under docs/guide/ and ./scripts",
            ["src/pkg", "docs/guide/", "./scripts"],
        ),
        ("the .github/workflows/ci.yml job", [".github/workflows/ci.yml"]),
        ("tests/test_a.py::test_x failed", ["tests/test_a.py"]),
        ("```bash\npytest tests/unit/ -k fast\n```", ["tests/unit/"]),
        ("see https://example.com/a/b.py or www.example.org/x.md or me@example.com", []),
        ("and/or, client/server, TCP/IP, N/A, 24/7, 2024/01/31, e.g. 3.14 and v1.2.3", []),
        ("built on Node.js and Vue.js", []),
        ("text/plain and application/json bodies", []),
        ("all *.py files, src/*.py and $HOME/x.py", []),
        ("src/app is a folder, a.b/c too", []),
    ],
)
def test_find_paths_heuristics(text: str, expected: list[str]) -> None:
    """Free text yields path-like tokens and leaves prose, URLs, globs and names alone."""
    assert find_paths(text) == expected


def test_find_paths_whole_strings() -> None:
    """A one-token string is a path with a ``/``, a known extension or a known name."""
    artifact = {"a": "src/app", "b": "'notes.txt'", "c": "Makefile", "d": "hello", "e": "N/A"}
    assert find_paths(artifact) == ["src/app", "notes.txt", "Makefile"]
    assert find_paths([["x/y.py"], {"k": "x/y.py"}]) == ["x/y.py"]  # repeats once
    assert find_paths({"src/keys.py": "not a path"}) == []  # keys are not read


def test_paths_exist_refuses_bad_arguments_and_artifacts(project: Path, tmp_path: Path) -> None:
    """A bad root or ``fields`` is ``bad_arguments``; a wrong-shaped artifact ``bad_artifact``."""
    bad_arguments(check(paths_exist, artifact="a.py", root="/no/such/folder"), "not a folder")
    bad_arguments(check(paths_exist, artifact="a.py", root={"a.py": "x"}), "root must be a folder")
    bad_arguments(check(paths_exist, project, artifact={}, fields="files"), "fields must be a list")
    bad_arguments(check(paths_exist, project, artifact={}, fields=[1]), "fields must be a list")
    outcome = check(paths_exist, project, artifact=["a.py"], fields=["files"])
    assert outcome["data"]["error"] == "bad_artifact"
    assert "must be an object" in outcome["message"]
    outcome = check(paths_exist, project, artifact={"files": [1, 2]}, fields=["files"])
    assert outcome["data"]["error"] == "bad_artifact"
    assert "'files' must be a path or a list of paths" in outcome["message"]


# -- unsafe_command ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("rm -rf /", "rm-rf-root"),
        ("rm -fr /*", "rm-rf-root"),
        ("rm -r ~", "rm-rf-root"),
        ("rm -Rf $HOME/", "rm-rf-root"),
        ("rm -rf *", "rm-rf-root"),
        ("rm --recursive --force ..", "rm-rf-root"),
        ("rm -rf /etc", "rm-rf-root"),
        ("rm --no-preserve-root -rf /tmp/x", "rm-rf-root"),
        ("cd build && rm -rf .", "rm-rf-root"),
        ("curl -fsSL https://get.example.com | sh", "curl-pipe-shell"),
        ("wget -qO- https://x.example | sudo bash -s", "curl-pipe-shell"),
        ("curl https://x.example/#frag | tee log | bash", "curl-pipe-shell"),
        ("bash <(curl -s https://x.example)", "curl-pipe-shell"),
        ('sh -c "$(curl -fsSL https://x.example)"', "curl-pipe-shell"),
        ("sudo apt-get install -y jq", "sudo"),
        ("doas reboot", "sudo"),
        ("su -c 'whoami' root", "sudo"),
        ("chmod -R 777 .", "chmod-777"),
        ("chmod 0777 run.sh", "chmod-777"),
        ("chmod a+rwx run.sh", "chmod-777"),
        ("chmod o+w notes.txt", "chmod-777"),
        ("mkfs.ext4 /dev/sdb1", "mkfs"),
        ("mkfs -t xfs /dev/nvme0n1p1", "mkfs"),
        ("dd if=disk.img of=/dev/sda bs=4M", "dd-device"),
        ("echo hi > /dev/sda", "write-device"),
        ("cat image >> /dev/nvme0n1", "write-device"),
        ("echo x | tee /dev/sdb", "write-device"),
        (":(){ :|:& };:", "fork-bomb"),
        ("bomb(){ bomb|bomb& }; bomb", "fork-bomb"),
        ("git push --force origin main", "git-force-push"),
        ("git push -f", "git-force-push"),
        ("git push -fu origin feature", "git-force-push"),
        ("git -C repo push origin +main", "git-force-push"),
        ("git reset --hard HEAD~3", "git-reset-hard"),
        ("shutdown -h now", "shutdown"),
        ("systemctl reboot", "shutdown"),
        ("init 0", "shutdown"),
        ('eval "$(cat cmd.txt)"', "eval"),
        ("echo 'unclosed", "unparseable"),
        ("echo trailing \\", "unparseable"),
        ("echo $(rm -rf ~)", "rm-rf-root"),
        ("echo `rm -rf /`", "rm-rf-root"),
        ("bash -c 'rm -rf ..'", "rm-rf-root"),
        ("env -i PATH=/bin FOO=1 nice -n 5 timeout 10 rm -rf /", "rm-rf-root"),
        ("FOO=1 /usr/bin/sudo -u root /bin/rm -rf /", "rm-rf-root"),
        ('git commit -m "#12 fix"; rm -rf /', "rm-rf-root"),
    ],
)
def test_unsafe_command_catches_the_default_rules(command: str, rule: str) -> None:
    """Each default rule catches its command, through chains, prefixes and substitutions."""
    outcome = check(unsafe_command, artifact=command)
    assert outcome["passed"] is False
    rules = [v["rule"] for v in outcome["data"]["violations"]]
    assert rule in rules
    assert all(
        v["command"] == command.rstrip(" \\") or v["command"] == command
        for v in outcome["data"]["violations"]
    )
    assert outcome["data"]["commands"] == 1


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf build dist",
        "rm -rf ./node_modules",
        "rm -rf ~/.cache/pip",
        "rm *.pyc",
        "chmod 755 run.sh",
        "chmod +x run.sh",
        "chmod -R go-w .",
        "curl -fsSL https://example.com/data.json | python -m json.tool",
        "curl -o install.sh https://example.com/install.sh",
        "git push origin main",
        "git push --force-with-lease origin feature",
        "git reset --soft HEAD~1",
        "dd if=/dev/zero of=/dev/null count=1",
        "dd if=/dev/sda of=backup.img",
        "cat /dev/sda > disk.img",
        "ls -la 2>&1 | grep py > /dev/null",
        "python -m pytest -q tests/",
        "echo 'rm -rf /' > notes.txt",
        "echo a#b",
        "ls  # rm -rf / or $(rm -rf /) or :(){ :|:& };:",
        "echo 'quoted # is data' && ls",
        "FOO=bar make test && ./run.sh --flag || echo failed; echo done",
    ],
)
def test_unsafe_command_passes_ordinary_commands(command: str) -> None:
    """Everyday commands, and dangerous words inside quoted data, pass."""
    outcome = check(unsafe_command, artifact=command)
    assert outcome["passed"] is True, outcome["data"]["violations"]


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("rm -rf -- /", "rm-rf-root"),
        ("cp disk.img /dev/sda", "write-device"),
        ("shred -n1 /dev/sdb", "write-device"),
        ("pkexec rm -rf /tmp/x", "sudo"),
        ("xargs -n 1 sudo ls", "sudo"),
    ],
)
def test_unsafe_command_edge_forms(command: str, rule: str) -> None:
    """``--`` ends options; ``cp``/``shred`` onto a disk; wrappers inside wrappers."""
    outcome = check(unsafe_command, artifact=command)
    assert rule in [v["rule"] for v in outcome["data"]["violations"]]


def test_unsafe_command_policy_reaches_nested_commands() -> None:
    """``deny`` rules apply inside ``sh -c`` scripts and ``$(...)`` substitutions."""
    policy = {"deny": ["docker"]}
    for line in ["bash -c 'docker ps'", "echo $(docker ps -q)"]:
        outcome = check(unsafe_command, artifact=line, policy=policy)
        assert [v["rule"] for v in outcome["data"]["violations"]] == ["policy"], line


def test_unsafe_command_reads_text_lists_and_objects() -> None:
    """Text, a list or ``{"commands": ...}``; comments, blanks, prompts skipped; ``\\`` joins."""
    script = "# set up\n\n$ pip install -e .\nrm -rf \\\n  /\nls\n"
    outcome = check(unsafe_command, artifact=script)
    assert outcome["data"]["commands"] == 3
    assert outcome["data"]["violations"] == [
        {
            "command": "rm -rf    /",
            "rule": "rm-rf-root",
            "reason": "rm -r / deletes the whole file system",
        }
    ]
    assert outcome["message"].startswith("1 of 3 commands unsafe: rm -rf    / (rm-rf-root)")
    listed = check(unsafe_command, artifact=["ls", "sudo ls\ngit status"])
    assert listed["data"]["commands"] == 3
    assert [v["command"] for v in listed["data"]["violations"]] == ["sudo ls"]
    wrapped = check(unsafe_command, artifact={"commands": ["ls"], "why": "rm -rf /"})
    assert wrapped["passed"] is True
    assert wrapped["message"] == "1 command checked, none unsafe"
    empty = check(unsafe_command, artifact="\n# nothing\n")
    assert empty["passed"] is True
    assert empty["data"] == {"commands": 0, "violations": []}


def test_unsafe_command_reports_every_broken_rule_once() -> None:
    """One line can break several rules; each is listed once."""
    outcome = check(unsafe_command, artifact="curl -s https://x.example | sudo bash")
    assert sorted(v["rule"] for v in outcome["data"]["violations"]) == ["curl-pipe-shell", "sudo"]


def test_unsafe_command_policy_denies_more() -> None:
    """``deny`` adds rules: a program by name, or one with required arguments."""
    policy = {
        "deny": [
            "docker",
            {"program": "npm", "args_contain": ["publish"], "reason": "no releases from agents"},
            {"program": "kubectl", "args_contain": "delete", "rule": "no-kube-delete"},
        ]
    }
    lines = [
        "docker run x",
        "npm publish --tag next",
        "npm test",
        "kubectl delete pod x",
        "sudo docker ps",
    ]
    outcome = check(unsafe_command, artifact=lines, policy=policy)
    found = [(v["command"], v["rule"], v["reason"]) for v in outcome["data"]["violations"]]
    assert ("docker run x", "policy", "docker is denied by the policy") in found
    assert ("npm publish --tag next", "policy", "no releases from agents") in found
    assert ("kubectl delete pod x", "no-kube-delete", "kubectl is denied by the policy") in found
    assert ("sudo docker ps", "policy", "docker is denied by the policy") in found
    assert not any(c == "npm test" for c, _, _ in found)


def test_unsafe_command_policy_allows_by_program_or_rule() -> None:
    """``allow`` turns default rules off by program name or rule id, but not ``deny`` rules."""
    lines = ["sudo apt-get update", "git push --force", "git reset --hard", "rm -rf /"]
    outcome = check(unsafe_command, artifact=lines, policy={"allow": ["sudo", "git-force-push"]})
    assert [v["rule"] for v in outcome["data"]["violations"]] == ["git-reset-hard", "rm-rf-root"]
    outcome = check(unsafe_command, artifact=lines, policy={"allow": ["git", "rm", "sudo"]})
    assert outcome["passed"] is True
    outcome = check(
        unsafe_command, artifact=["git push"], policy={"allow": ["git"], "deny": ["git"]}
    )
    assert outcome["passed"] is False


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ([], ["policy must be an object"]),
        ({"denny": []}, ["unknown key 'denny'"]),
        ({"deny": "docker"}, ["policy.deny must be a list"]),
        ({"deny": [3]}, ["policy.deny[0]"]),
        ({"deny": [{"reason": "x"}]}, ["policy.deny[0].program"]),
        ({"deny": [{"program": "x", "args": []}]}, ["unknown key 'args'"]),
        ({"deny": [{"program": "x", "args_contain": [1]}]}, ["args_contain must be a list"]),
        ({"deny": [{"program": "x", "reason": 1}]}, ["reason and rule must be strings"]),
        ({"allow": "sudo"}, ["policy.allow must be a list"]),
    ],
)
def test_unsafe_command_refuses_a_bad_policy(policy: object, words: list[str]) -> None:
    """A malformed policy is ``bad_arguments`` naming the broken part."""
    bad_arguments(check(unsafe_command, artifact="ls", policy=policy), *words)


@pytest.mark.parametrize("artifact", [None, 3, {"cmds": ["ls"]}, ["ls", 3], {"commands": 3}])
def test_unsafe_command_refuses_artifacts_without_commands(artifact: object) -> None:
    """An artifact that holds no commands is ``bad_artifact``."""
    outcome = check(unsafe_command, artifact=artifact)
    assert outcome["passed"] is False
    assert outcome["data"]["error"] == "bad_artifact"


# -- regex ---------------------------------------------------------------------------------


def test_regex_forbids_a_pattern_in_the_artifact() -> None:
    """``forbid`` fails listing each match's line; text is searched as it is."""
    artifact = "line one\nTODO: fix\nok\n"
    outcome = check(regex, pattern=r"TODO", artifact=artifact)
    assert outcome["passed"] is False
    assert outcome["data"]["matches"] == [
        {"file": "<artifact>", "line": 2, "text": "TODO: fix", "match": "TODO"}
    ]
    assert outcome["data"]["match_count"] == 1
    assert outcome["data"]["files_checked"] == 0
    assert outcome["message"] == "1 forbidden match in the artifact: <artifact>:2: TODO: fix"
    clean = check(regex, pattern=r"TODO", artifact="all done")
    assert clean["passed"] is True
    assert clean["message"] == "No match in the artifact"


def test_regex_searches_objects_as_json() -> None:
    """A non-text artifact is searched as indented JSON, so keys and values are lines."""
    outcome = check(regex, pattern=r'"password": "[^"]+"', artifact={"user": "a", "password": "x"})
    assert outcome["passed"] is False
    assert outcome["data"]["matches"][0]["line"] == 3


def test_regex_require_mode() -> None:
    """``require`` passes on a match and fails without one."""
    found = check(
        regex,
        pattern=r"^## Changelog$",
        artifact="# x\n## Changelog\n",
        mode="require",
        flags=["M"],
    )
    assert found["passed"] is True
    assert found["message"] == "1 match in the artifact"
    missing = check(regex, pattern=r"changelog", artifact="# x\n", mode="require")
    assert missing["passed"] is False
    assert missing["message"] == "Required pattern not found in the artifact"


def test_regex_searches_files_under_root(project: Path) -> None:
    """Files are searched by glob; binary, >1 MiB and ``.git`` files are skipped."""
    outcome = check(regex, project, pattern=r"TODO")
    assert outcome["passed"] is False
    places = [(m["file"], m["line"]) for m in outcome["data"]["matches"]]
    assert places == [("README.md", 2), ("src/app.py", 2)]
    assert outcome["data"]["files_checked"] == 5  # .git is never searched
    assert outcome["data"]["files_skipped"] == 2  # blob.bin and big.txt
    assert outcome["message"].startswith(
        "2 forbidden matches in files matching '**/*': README.md:2"
    )
    only_py = check(regex, project, pattern=r"TODO", files="src/**/*.py", exclude=["src/app.py"])
    assert only_py["passed"] is True
    assert only_py["data"]["files_checked"] == 1
    assert only_py["message"] == "No match in files matching 'src/**/*.py' (1 file searched)"


def test_file_searches_do_not_follow_symlinks_out(project: Path, tmp_path: Path) -> None:
    """A symlink leading out of the folder is not read; one that stays inside is."""
    write(tmp_path, {"outside.py": "TODO = (\n"})
    (project / "src" / "out.py").symlink_to(tmp_path / "outside.py")
    (project / "src" / "alias.py").symlink_to(project / "src" / "app.py")
    (project / "linked").symlink_to(tmp_path, target_is_directory=True)
    outcome = check(regex, project, pattern=r"TODO", files="src/**")
    assert [m["file"] for m in outcome["data"]["matches"]] == ["src/alias.py", "src/app.py"]
    assert check(python_syntax, project)["data"]["files_checked"] == 3


def test_regex_prefers_root_over_the_artifact(project: Path) -> None:
    """With a folder, the folder is searched, not the artifact."""
    outcome = check(regex, project, pattern=r"TODO", artifact="nothing", files="*.toml")
    assert outcome["passed"] is True
    assert outcome["data"]["files_checked"] == 1


def test_regex_flags_and_multiline_matches() -> None:
    """Flags by name or letter; a match spanning lines is reported where it starts."""
    text = "a\nBEGIN\nsecret\nEND\n"
    outcome = check(regex, pattern=r"begin.*?end", artifact=text, flags=["ignorecase", "S"])
    assert outcome["data"]["matches"][0]["line"] == 2
    assert check(regex, pattern=r"begin", artifact=text)["passed"] is True


def test_regex_caps_matches_but_counts_all() -> None:
    """At most 50 matches are listed; ``match_count`` is the true total."""
    outcome = check(regex, pattern=r"x", artifact="x\n" * 120)
    assert len(outcome["data"]["matches"]) == 50
    assert outcome["data"]["match_count"] == 120
    assert outcome["data"]["matches"][-1]["line"] == 50


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"pattern": "("}, ["not a valid regex"]),
        ({"pattern": ""}, ["pattern must be a non-empty string"]),
        ({"pattern": 5}, ["pattern must be a non-empty string"]),
        ({"pattern": "x", "flags": ["Z"]}, ["unknown flag 'Z'"]),
        ({"pattern": "x", "flags": "i"}, ["flags must be a list"]),
        ({"pattern": "x", "mode": "deny"}, ["mode must be 'forbid' or 'require'"]),
        ({"pattern": "x", "files": ["*.py"]}, ["files must be a glob string"]),
        ({"pattern": "x", "files": "../*"}, ["not a relative glob"]),
        ({"pattern": "x", "exclude": ["/abs"]}, ["not a relative glob"]),
        ({"pattern": "x", "root": "/no/such/folder"}, ["not a folder"]),
    ],
)
def test_regex_refuses_bad_arguments(kwargs: dict[str, Any], words: list[str]) -> None:
    """Bad patterns, flags, modes and globs are ``bad_arguments``."""
    bad_arguments(check(regex, artifact="x", **kwargs), *words)


# -- python_syntax -------------------------------------------------------------------------


def test_python_syntax_passes_a_clean_tree(project: Path) -> None:
    """Every ``.py`` file parses: pass, and no bytecode cache appears."""
    outcome = check(python_syntax, project)
    assert outcome["passed"] is True
    assert outcome["data"] == {"files_checked": 2, "errors": [], "error_count": 0, "scope": "tree"}
    assert outcome["message"] == "All 2 files parse"
    assert not list(project.rglob("__pycache__"))


def test_python_syntax_fails_with_file_and_line(project: Path) -> None:
    """A file that does not parse is listed with its line and the parser's message."""
    write(project, {"src/broken.py": "def f(:\n    pass\n", "tests/test_x.py": "x = (\n"})
    outcome = check(python_syntax, project)
    assert outcome["passed"] is False
    errors = outcome["data"]["errors"]
    assert [(e["file"], e["line"]) for e in errors] == [
        ("src/broken.py", 1),
        ("tests/test_x.py", 1),
    ]
    assert all(e["message"] for e in errors)
    assert outcome["data"]["error_count"] == 2
    assert outcome["message"].startswith("2 of 4 files do not parse: src/broken.py:1:")


def test_python_syntax_include_and_exclude(project: Path) -> None:
    """``include`` picks the files; ``exclude`` leaves out files and whole folders."""
    write(project, {".venv/lib/bad.py": "def (", "build/gen.py": "(", "scripts/tool": "ok = 1\n"})
    outcome = check(python_syntax, project, exclude=[".venv", "build/**"])
    assert outcome["passed"] is True
    assert outcome["data"]["files_checked"] == 2
    outcome = check(python_syntax, project, include="scripts/*", exclude=[])
    assert outcome["data"]["files_checked"] == 1
    assert outcome["message"] == "1 file parses"


def test_python_syntax_honours_encodings_and_reports_nul_bytes(tmp_path: Path) -> None:
    """A PEP 263 declaration is read; a NUL byte is an error, not a crash."""
    root = write(
        tmp_path / "r",
        {
            "latin.py": "# -*- coding: latin-1 -*-\ns = 'caf\xe9'\n".encode("latin-1"),
            "nul.py": b"x = 1\0\n",
        },
    )
    outcome = check(python_syntax, root)
    assert [e["file"] for e in outcome["data"]["errors"]] == ["nul.py"]
    assert outcome["message"].startswith("1 of 2 files does not parse: nul.py")


def test_python_syntax_passes_a_folder_without_python(tmp_path: Path) -> None:
    """Nothing to parse: pass, saying so."""
    root = write(tmp_path / "r", {"notes.md": "# hi\n"})
    outcome = check(python_syntax, root)
    assert outcome["passed"] is True
    assert outcome["message"] == "No files match '**/*.py'"


def test_python_syntax_refuses_bad_arguments(project: Path) -> None:
    """A bad root, include or exclude is ``bad_arguments``."""
    bad_arguments(python_syntax(root=None), "root must be a folder")
    bad_arguments(check(python_syntax, root=project / "README.md"), "is not a folder")
    bad_arguments(check(python_syntax, project, include=3), "include must be a glob")
    bad_arguments(check(python_syntax, project, exclude="build"), "exclude must be a list")
    bad_arguments(check(python_syntax, project, exclude=["a/../../b"]), "not a relative glob")


def changed_context(root: Path, *changed: str) -> ToolContext:
    """The context of a call in a plan round whose change touched ``changed``."""
    return ToolContext(resources={"root": root}, changed={root: changed})


def test_python_syntax_parses_only_the_change_in_a_plan(project: Path) -> None:
    """Given the change (a plan's round), only its files are parsed, under the same rules
    (include, exclude, version control, links out): a broken file nobody changed was
    there before the plan; ``scope: tree`` parses them all."""
    write(
        project,
        {
            "old_broken.py": "def (",
            "new.py": "x = 1\n",
            "also.py": "def f(:\n",
            "build/gen.py": "(",
            ".git/hooks/h.py": "(",
            "notes.md": "(",
        },
    )
    os.symlink("/usr/lib/os.py", project / "out.py")
    context = changed_context(
        project, "new.py", "also.py", "build/gen.py", ".git/hooks/h.py", "notes.md", "out.py"
    )
    outcome = check(python_syntax, project, exclude=["build"], context=context)
    assert outcome["data"]["scope"] == "change"
    assert outcome["data"]["files_checked"] == 2
    assert [e["file"] for e in outcome["data"]["errors"]] == ["also.py"]
    assert outcome["message"].startswith("1 of 2 changed files does not parse: also.py:1")
    whole = check(python_syntax, project, exclude=["build"], context=context, scope="tree")
    assert whole["data"]["scope"] == "tree"
    assert [e["file"] for e in whole["data"]["errors"]] == ["also.py", "old_broken.py"]
    fixed = check(python_syntax, project, context=changed_context(project, "new.py"))
    assert fixed["message"] == "1 changed file parses"
    nothing = check(python_syntax, project, context=changed_context(project))
    assert nothing["passed"] is True
    assert nothing["message"] == "No changed files match '**/*.py'"
    # A change the call cannot know (not a plan's round, another folder): the whole tree.
    other = ToolContext(resources={"root": project}, changed={project.parent: ["x.py"]})
    assert check(python_syntax, project, context=other)["data"]["scope"] == "tree"
    bad_arguments(check(python_syntax, project, scope="diff"), "scope must be 'change' or")


def test_a_changed_path_through_a_link_out_of_the_folder_is_not_read(
    project: Path, tmp_path: Path
) -> None:
    """A change names files, never where links lead: a path through a linked folder that
    leads out is not read, though no walk would have gone there."""
    outside = write(tmp_path / "outside", {"secret.py": "def ("})
    os.symlink(outside, project / "linked")
    context = changed_context(project, "linked/secret.py")
    assert check(python_syntax, project, context=context)["data"]["files_checked"] == 0
    assert check(regex, project, pattern="def", context=context)["data"]["files_checked"] == 0


def test_regex_forbids_in_the_change_and_requires_in_the_tree(project: Path) -> None:
    """Forbidding judges the change by default (a TODO there before the plan is not its
    doing); requiring looks at the whole tree by default (the pattern may be anywhere)."""
    write(project, {"old.py": "# TODO old\n", "new.py": "# TODO new\n", "lic.py": "# MIT\n"})
    context = changed_context(project, "new.py")
    forbid = check(regex, project, pattern="TODO", context=context)
    assert forbid["data"]["scope"] == "change"
    assert [m["file"] for m in forbid["data"]["matches"]] == ["new.py"]
    assert "in changed files matching" in forbid["message"]
    require = check(regex, project, pattern="MIT", mode="require", context=context)
    assert require["passed"] is True
    assert require["data"]["scope"] == "tree"
    scoped = check(regex, project, pattern="MIT", mode="require", scope="change", context=context)
    assert scoped["passed"] is False
    assert scoped["message"] == (
        "Required pattern not found in changed files matching '**/*' (1 file searched)"
    )
    tree = check(regex, project, pattern="TODO", scope="tree", context=context)
    assert {"old.py", "new.py"} <= {m["file"] for m in tree["data"]["matches"]}
    bad_arguments(check(regex, artifact="x", pattern="x", scope=3), "scope must be")


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("**/*.py", ["a.py", "x/y/a.py", ".hidden/a.py"], ["a.pyc", "a/py"]),
        ("src/*.py", ["src/a.py"], ["src/x/a.py", "a.py"]),
        ("build/**", ["build/a", "build/x/y"], ["builds/a", "build"]),
        ("[!t]?.md", ["ab.md"], ["tb.md", "abc.md"]),
        ("docs/[ab].txt", ["docs/a.txt"], ["docs/c.txt"]),
        ("a[b.txt", ["a[b.txt"], ["ab.txt"]),
        ("[]x].md", ["].md", "x.md"], ["y.md"]),
    ],
)
def test_compile_glob(pattern: str, yes: list[str], no: list[str]) -> None:
    """Globs: ``*`` and ``?`` stay in one folder, ``**`` spans folders, classes work."""
    compiled = compile_glob(pattern)
    assert all(compiled.fullmatch(p) for p in yes)
    assert not any(compiled.fullmatch(p) for p in no)


# -- pytest_suite --------------------------------------------------------------------------

TINY_PROJECT = {
    "pytest.ini": "[pytest]\n",
    "tests/test_demo.py": textwrap.dedent(
        """
        import pytest

        def test_ok():
            assert 1 + 1 == 2

        def test_broken():
            assert 1 + 1 == 3, "arithmetic is off"

        @pytest.mark.skip(reason="not today")
        def test_later():
            pass
        """
    ),
}


async def run_suite(root: Path, **kwargs: Any) -> tuple[dict[str, Any], Guard]:
    """Run ``pytest_suite`` as the runtime would: guarded, with a context cleaned up after."""
    with guarded(Guard("validation 'pytest'")) as guard:
        context = ToolContext(resources={"root": root}, guard=guard)
        try:
            outcome = await pytest_suite(root=root, context=context, **kwargs)
        finally:
            context.cleanup()
    return outcome, guard


@pytest.mark.anyio
async def test_pytest_suite_reports_passes_failures_and_skips(tmp_path: Path) -> None:
    """Pass, failure and skip are counted from JUnit, on a copy; the project is untouched."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    before = snapshot(root)
    outcome, guard = await run_suite(root)
    assert guard.violation is None
    assert snapshot(root) == before
    data = outcome["data"]
    assert outcome["passed"] is False
    assert outcome["message"] == "1 of 3 tests failed: test_broken"
    assert (
        data["tests_run"],
        data["tests_passed"],
        data["tests_failed"],
        data["tests_skipped"],
    ) == (3, 1, 1, 1)
    assert data["exit_code"] == 1
    assert data["failures"][0]["test"] == "tests.test_demo.test_broken"
    assert "arithmetic is off" in data["failures"][0]["message"]
    assert "1 failed" in data["output"]


@pytest.mark.anyio
async def test_pytest_suite_fails_when_no_tests_are_collected(tmp_path: Path) -> None:
    """Exit code 5 (no tests) is a failure with a clear message."""
    root = write(tmp_path / "empty", {"pytest.ini": "[pytest]\n", "src/mod.py": "X = 1\n"})
    outcome, guard = await run_suite(root, args=["-k", "nothing"])
    assert guard.violation is None
    assert outcome["passed"] is False
    assert outcome["data"]["exit_code"] == 5
    assert outcome["message"] == "No tests ran: pytest collected none"


class FakeRun:
    """Stands in for ``anyio.run_process``: records the call, then sleeps or returns."""

    def __init__(self, returncode: int | None, junit: str | None = None) -> None:
        self.returncode = returncode
        self.junit = junit
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, command: list[str], **kwargs: Any) -> Any:
        self.calls.append({"command": command, **kwargs})
        if self.returncode is None:
            await anyio.sleep_forever()
        if self.junit is not None:
            target = next(a for a in command if a.startswith("--junitxml="))
            await anyio.Path(target.partition("=")[2]).write_text(self.junit, encoding="utf-8")

        class Completed:
            returncode = self.returncode
            stdout = b"out\n"
            stderr = b"last line\n"

        return Completed()


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeRun]:
    """Install a :class:`FakeRun` in place of ``anyio.run_process``."""

    def install(returncode: int | None, junit: str | None = None) -> FakeRun:
        fake = FakeRun(returncode, junit)
        monkeypatch.setattr(pytest_module.anyio, "run_process", fake)
        return fake

    return install


@pytest.mark.anyio
@pytest.mark.parametrize(
    "argument", ["--basetemp=/tmp/x", "--junitxml=../out.xml", "-c/etc/passwd", "/abs/tests"]
)
async def test_pytest_suite_refuses_arguments_that_lead_outside_the_project(
    tmp_path: Path, fake_run: Callable[..., FakeRun], argument: str
) -> None:
    """pytest empties --basetemp and writes --junitxml: paths outside the copy are refused
    before anything runs."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    fake = fake_run(0)
    outcome, _ = await run_suite(root, args=["-x", argument])
    bad_arguments(outcome, "leads outside the project")
    assert fake.calls == []


@pytest.mark.anyio
async def test_pytest_suite_runs_pytest_in_a_disposable_copy(
    tmp_path: Path, fake_run: Callable[..., FakeRun]
) -> None:
    """The command runs this interpreter's pytest in the copy, without bytecode or cache."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    junit = (
        '<testsuites><testsuite><testcase classname="t" name="test_a"/></testsuite></testsuites>'
    )
    fake = fake_run(0, junit)
    outcome, _ = await run_suite(root, args=["-x", "tests"])
    assert outcome["passed"] is True
    assert outcome["message"] == "1 test passed"
    call = fake.calls[0]
    command = call["command"]
    assert command[:6] == [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    assert command[-2:] == ["-x", "tests"]
    assert Path(call["cwd"]) != root and Path(call["cwd"]).name == "demo"
    assert call["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    assert call["check"] is False
    assert not await anyio.Path(call["cwd"]).exists()  # scratch is gone after cleanup


@pytest.mark.anyio
async def test_pytest_suite_timeout_kills_the_run(
    tmp_path: Path, fake_run: Callable[..., FakeRun]
) -> None:
    """Past ``timeout`` seconds the run is cancelled and the check fails as ``timeout``."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    fake_run(None)
    outcome, guard = await run_suite(root, timeout=0.01)
    assert guard.violation is None
    assert outcome["passed"] is False
    assert outcome["data"]["error"] == "timeout"
    assert "did not finish within 0.01 seconds" in outcome["message"]


@pytest.mark.anyio
async def test_pytest_suite_lets_cancellation_through(
    tmp_path: Path, fake_run: Callable[..., FakeRun]
) -> None:
    """Cancelling the call cancels the run; nothing turns it into a result."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    fake_run(None)
    outcome = None
    with anyio.move_on_after(0.01) as scope:
        outcome, _ = await run_suite(root)
    assert scope.cancelled_caught
    assert outcome is None


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"args": "-x"}, ["args must be a list"]),
        ({"args": ["-x", 1]}, ["args must be a list"]),
        ({"timeout": 0}, ["timeout must be a positive number"]),
        ({"timeout": True}, ["timeout must be a positive number"]),
        ({"timeout": "10"}, ["timeout must be a positive number"]),
    ],
)
async def test_pytest_suite_refuses_bad_arguments(
    tmp_path: Path, kwargs: dict[str, Any], words: list[str]
) -> None:
    """Bad ``args`` or ``timeout`` are ``bad_arguments``; nothing runs."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    outcome, guard = await run_suite(root, **kwargs)
    assert guard.violation is None
    bad_arguments(outcome, *words)


def junit_report(tmp_path: Path, cases: str) -> pytest_module._Report | None:
    """Parse a JUnit document with the given ``<testcase>`` elements."""
    path = tmp_path / "junit.xml"
    path.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>", encoding="utf-8")
    return pytest_module._read_junit(path)


def test_summarize_counts_and_messages(tmp_path: Path) -> None:
    """Passes, skips, failures, errors and exit codes become the documented messages."""
    ok = '<testcase classname="m" name="test_a"/>'
    skip = '<testcase classname="m" name="test_s"><skipped message="x"/></testcase>'
    fail = '<testcase classname="m.C" name="test_f"><failure message="boom"/></testcase>'
    error = '<testcase classname="" name="tests.test_bad"><error message="ImportError"/></testcase>'

    outcome = pytest_module.summarize(junit_report(tmp_path, ok * 12), 0, "")
    assert (outcome["passed"], outcome["message"]) == (True, "All 12 tests passed")
    outcome = pytest_module.summarize(junit_report(tmp_path, ok * 2 + skip), 0, "")
    assert outcome["message"] == "All 2 tests passed (1 skipped)"
    outcome = pytest_module.summarize(junit_report(tmp_path, skip * 2), 0, "")
    assert (outcome["passed"], outcome["message"]) == (True, "All 2 tests were skipped")
    outcome = pytest_module.summarize(junit_report(tmp_path, ok + fail + error), 2, "")
    assert outcome["passed"] is False
    assert outcome["message"] == (
        "2 of 3 tests failed: test_f, tests.test_bad (the run was interrupted (collection errors?))"
    )
    assert outcome["data"]["failures"] == [
        {"test": "m.C.test_f", "message": "boom"},
        {"test": "tests.test_bad", "message": "ImportError"},
    ]
    outcome = pytest_module.summarize(None, 4, "ERROR: unrecognized arguments: --nope")
    assert outcome["passed"] is False
    assert outcome["message"] == (
        "pytest exited with code 4, pytest was used wrongly (bad arguments?): "
        "ERROR: unrecognized arguments: --nope"
    )
    assert outcome["data"]["tests_run"] == 0
    outcome = pytest_module.summarize(junit_report(tmp_path, fail * 30), 1, "")
    assert len(outcome["data"]["failures"]) == 20
    assert outcome["data"]["tests_failed"] == 30
    assert pytest_module._read_junit(tmp_path / "missing.xml") is None


# -- the library as a whole ----------------------------------------------------------------


def test_all_is_sorted_and_documented() -> None:
    """``__all__`` is sorted and every public function documents its arguments and data."""
    assert validators.__all__ == sorted(validators.__all__)
    # The public surface, pinned: a change to it is a conscious one.
    assert validators.__all__ == [
        "BUILTIN_CONFIGS",
        "IN_PROCESS",
        "builtin_validations",
        "json_schema",
        "paths_exist",
        "pytest_suite",
        "python_syntax",
        "regex",
        "unittest_suite",
        "unsafe_command",
    ]
    for name in validators.__all__:
        assert hasattr(validators, name)
    for name in (
        "json_schema",
        "paths_exist",
        "unsafe_command",
        "regex",
        "python_syntax",
        "pytest_suite",
    ):
        doc = inspect.getdoc(getattr(validators, name)) or ""
        assert "Arguments:" in doc and "Data:" in doc, name


def test_builtin_configs_build_validations_that_resolve() -> None:
    """Each config builds a Validation; its entrypoint and input schema match the function."""
    injected = {"artifact", "root", "context"}
    for name, config in BUILTIN_CONFIGS.items():
        validation = Validation.from_config(config)
        assert validation.name == name
        assert validation.mode is ValidationMode.REQUIRED
        assert validation.capability.read_only is True
        assert validation.timeout is not None
        module_name, _, attribute = (validation.entrypoint or "").partition(":")
        assert module_name == "gategraph.validators"
        func = getattr(importlib.import_module(module_name), attribute)
        parameters = inspect.signature(func).parameters
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters.values())
        assert set(parameters) - injected == set(config["input_schema"]["properties"]), name
        slots = [slot.name for slot in validation.resource_slots]
        assert slots == (["root"] if "root" in parameters else []), name
        assert inspect.iscoroutinefunction(func) is (name in ("pytest_suite", "unittest_suite"))


def test_builtin_validations_register_in_a_catalog() -> None:
    """``builtin_validations()`` can all be added to an in-memory catalog."""
    catalog = Catalog.in_memory()
    for validation in builtin_validations():
        catalog.add(validation)
    assert sorted(v.name for v in catalog.list("validation")) == sorted(BUILTIN_CONFIGS)


def test_docs_cover_every_validator_and_rule() -> None:
    """docs/validators.md names each built-in and each default rule; its YAML parses."""
    text = DOCS.read_text(encoding="utf-8")
    for name in BUILTIN_CONFIGS:
        assert f"## `{name}`" in text, name
    for rule in DEFAULT_RULES:
        assert f"| `{rule.id}` |" in text, rule.id
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= len(BUILTIN_CONFIGS)
    for block in blocks:
        yaml.safe_load(block)


def iter_builtin_calls(project: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """One call of each sync built-in against ``project``."""
    yield "json_schema", {"artifact": {"a": 1}, "schema": {"type": "object"}}
    yield "paths_exist", {"artifact": "see src/app.py", "root": project}
    yield "unsafe_command", {"artifact": "rm -rf /"}
    yield "regex", {"pattern": "TODO", "root": project}
    yield "python_syntax", {"root": project}


def test_no_sync_builtin_writes_even_in_a_read_only_folder(project: Path) -> None:
    """Run against a folder with write permission removed, each built-in still works."""
    for folder, _, _ in os.walk(project):
        os.chmod(folder, 0o555)
    try:
        for name, kwargs in iter_builtin_calls(project):
            root = kwargs.pop("root", None)
            outcome = check(getattr(validators, name), root, **kwargs)
            assert "error" not in outcome["data"], name
    finally:
        for folder, _, _ in os.walk(project):
            os.chmod(folder, 0o755)


# -- pytest_suite in shards ------------------------------------------------------------------

SHARDED_PROJECT = {
    "pytest.ini": "[pytest]\n",
    **{
        f"tests/test_part{n}.py": "".join(
            f"def test_{n}_{k}():\n    assert {k} != {n}, 'part {n} fails at {k}'\n"
            for k in range(n + 2)
        )
        for n in range(4)
    },
}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("broken", "failed", "exit_code"), [(False, 4, 1), (True, 1, 2)], ids=["tests", "collection"]
)
async def test_a_suite_in_shards_says_what_the_suite_in_one_says(
    tmp_path: Path, broken: bool, failed: int, exit_code: int
) -> None:
    """Shards split the tests by file, each test runs once, and the one result is the
    same as one pytest's: the counts, the failures; a collection error (which every shard
    meets, and which stops the run) once."""
    files = dict(SHARDED_PROJECT)
    if broken:
        files["tests/test_broken_import.py"] = "import no_such_module_here\n"
    root = write(tmp_path / "demo", files)
    before = snapshot(root)
    one, _ = await run_suite(root, shards=1)
    three, guard = await run_suite(root, shards=3)
    assert guard.violation is None
    assert snapshot(root) == before
    assert (one["data"]["shards"], three["data"]["shards"]) == (1, 3)
    counts = ("tests_run", "tests_passed", "tests_failed", "tests_skipped", "exit_code")
    assert [three["data"][k] for k in counts] == [one["data"][k] for k in counts]
    assert (one["data"]["tests_failed"], one["data"]["exit_code"]) == (failed, exit_code)
    assert sorted(f["test"] for f in three["data"]["failures"]) == sorted(
        f["test"] for f in one["data"]["failures"]
    )
    assert (
        three["passed"] is False and three["message"].split(":")[0] == one["message"].split(":")[0]
    )
    assert "-- shard 3 of 3 --" in three["data"]["output"]


@pytest.mark.anyio
async def test_auto_shards_are_one_where_copies_cost_a_copy(tmp_path: Path) -> None:
    """Outside the kernel sandbox each shard's copy copies the folder: auto runs one."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    outcome, _ = await run_suite(root)
    assert outcome["data"]["shards"] == 1


@pytest.mark.anyio
@pytest.mark.parametrize("shards", [0, 65, "many", True, 1.5])
async def test_pytest_suite_refuses_a_bad_shard_count(tmp_path: Path, shards: object) -> None:
    root = write(tmp_path / "demo", TINY_PROJECT)
    outcome, _ = await run_suite(root, shards=shards)
    bad_arguments(outcome, "shards must be")


def test_every_shard_cuts_the_suite_into_the_same_units() -> None:
    """The units are the same whatever order the tests come in; a class's tests, or a
    module's functions, stay in one unit; every test is in exactly one."""
    tests = [
        f"tests/test_{n}.py::{'Case::' if n % 2 else ''}test_{k}"
        for n in range(17)
        for k in range(n % 5 + 1)
    ]

    def named(order: list[str]) -> list[list[str]]:
        return [[order[i] for i in unit] for unit in pytest_shard_module.units(order, 3, {})]

    cut = named(tests)
    backwards = named(list(reversed(tests)))
    assert [set(unit) for unit in cut] == [set(unit) for unit in backwards]
    assert sorted(test for unit in cut for test in unit) == sorted(tests)
    assert all(len({pytest_shard_module.group_of(t) for t in unit}) == 1 for unit in cut)
    assert len(cut) == 17  # no group is bigger than a third of the suite: none is cut


def test_a_group_bigger_than_a_share_is_cut_and_durations_order_the_units() -> None:
    """One file of most of the suite is cut into its tests (it would leave the other
    shards idle); a group's recorded seconds weigh more than its number of tests, and the
    heaviest unit comes first."""
    big = [f"tests/test_big.py::test_{k}" for k in range(10)]
    cut = pytest_shard_module.units([*big, "tests/test_small.py::test_a"], 2, {})
    assert sorted(len(unit) for unit in cut) == [1] * 11
    tests = [f"tests/test_{name}.py::test_{k}" for name in "abc" for k in range(2)]
    assert pytest_shard_module.group_of("tests/t.py::Case::test[a::b]") == "tests/t.py::Case"
    first = [tests[unit[0]] for unit in pytest_shard_module.units(tests, 2, {})]
    assert first == [f"tests/test_{name}.py::test_0" for name in "abc"]  # equal: by name
    slow_c = {"tests/test_a.py": 1.0, "tests/test_b.py": 1.0, "tests/test_c.py": 2.0}
    first = [tests[unit[0]] for unit in pytest_shard_module.units(tests, 2, slow_c)]
    assert first[0] == "tests/test_c.py::test_0"


def test_shards_take_every_unit_exactly_once(tmp_path: Path) -> None:
    """Shards taking units from one folder, in turns or not, take each once, in order."""
    claims = [pytest_shard_module.Claims(str(tmp_path), 7) for _ in range(3)]
    taken: list[int] = []
    turn = 0
    while (index := claims[turn % 3].next()) is not None:
        taken.append(index)
        turn += 1 if turn % 2 else 2
    assert taken == list(range(7))
    assert all(claim.next() is None for claim in claims)
    assert sorted(os.listdir(tmp_path)) == sorted(map(str, range(7)))


# One slow test (it waits until every unit of the suite is taken) and ten quick ones: the
# shard that meets the slow test takes nothing more while it runs, the other takes the rest.
UNEVEN_PROJECT = {
    "pytest.ini": "[pytest]\n",
    "tests/test_a.py": (
        "import json, os, time\n\n\ndef test_slow():\n"
        "    queue = json.load(open(os.environ['GATEGRAPH_PYTEST']))['queue']\n"
        "    deadline = time.monotonic() + 60\n"
        "    while len(os.listdir(queue)) < 11 and time.monotonic() < deadline:\n"
        "        time.sleep(0.01)\n"
    ),
    **{f"tests/test_{c}.py": "def test_quick():\n    pass\n" for c in "bcdefghijk"},
}


@pytest.mark.anyio
async def test_a_shard_held_up_by_a_slow_test_leaves_the_rest_to_the_others(
    tmp_path: Path,
) -> None:
    """Shards take the suite's units as they are ready for more, not a share fixed
    before: a slow test no estimate knew about does not hold up tests that another shard
    could run."""
    root = write(tmp_path / "demo", UNEVEN_PROJECT)
    outcome, guard = await run_suite(root, shards=2)
    assert guard.violation is None
    assert outcome["passed"], outcome
    assert outcome["data"]["tests_run"] == 11
    ran = sorted(int(n) for n in re.findall(r"(\d+) passed", outcome["data"]["output"]))
    assert ran == [1, 10], outcome["data"]["output"]


@pytest.mark.anyio
async def test_shards_run_only_what_k_m_and_deselect_leave(tmp_path: Path) -> None:
    """The shards share the tests pytest's own options leave (`-k`, `-m`, `--deselect`),
    as one pytest runs them."""
    files = {
        "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
        "tests/test_a.py": (
            "import pytest\n\n\n@pytest.mark.slow\ndef test_marked():\n    pass\n\n\n"
            "def test_slow_named():\n    pass\n\n\ndef test_kept():\n    pass\n\n\n"
            "def test_dropped():\n    pass\n"
        ),
        "tests/test_b.py": "def test_kept_too():\n    pass\n",
    }
    root = write(tmp_path / "demo", files)
    args = ["-k", "not slow_named", "-m", "not slow", "--deselect", "tests/test_a.py::test_dropped"]
    one, _ = await run_suite(root, shards=1, args=args)
    two, _ = await run_suite(root, shards=2, args=args)
    assert one["passed"] and two["passed"], (one, two)
    assert one["data"]["tests_run"] == two["data"]["tests_run"] == 2


@pytest.mark.anyio
async def test_a_project_named_queue_runs_in_shards(tmp_path: Path) -> None:
    """The shards' queue has a name of its own beside the copies of the project."""
    root = write(tmp_path / "queue", SHARDED_PROJECT)
    outcome, _ = await run_suite(root, shards=2)
    assert outcome["data"]["tests_run"] == sum(n + 2 for n in range(4)), outcome


def test_a_module_s_units_come_one_after_another() -> None:
    """The heaviest module's units first, then the next module's: a shard that takes
    several units of a module takes them in a row, and sets the module up once."""
    tests = [
        *(f"tests/test_m1.py::TestBig::test_{k}" for k in range(3)),
        "tests/test_m1.py::TestSmall::test_0",
        *(f"tests/test_m2.py::test_{k}" for k in range(2)),
        "tests/test_m3.py::test_0",
    ]
    cut = pytest_shard_module.units(tests, 2, {})
    modules = [pytest_shard_module.module_of(tests[unit[0]]) for unit in cut]
    assert modules == sorted(modules, key=modules.index)  # each module's units together
    assert modules[0] == "tests/test_m1.py" and modules[-1] == "tests/test_m3.py"


def test_under_xdist_a_shard_keeps_a_share_fixed_in_advance(tmp_path: Path) -> None:
    """Where pytest-xdist deals the tests out (`-n`, maybe in the project's addopts), each
    shard keeps every n-th unit at collection, the same in each of xdist's workers, and
    leaves the loop to xdist: every test runs once across the shards."""
    ids = [f"tests/test_{n}.py::test_{k}" for n in range(5) for k in range(n + 1)]
    kept: list[list[str]] = []
    for index in range(2):
        items = [SimpleNamespace(nodeid=nodeid) for nodeid in ids]
        config = SimpleNamespace(
            workerinput={},
            option=SimpleNamespace(numprocesses=2),
            hook=SimpleNamespace(pytest_deselected=lambda items: None),
        )
        pytest_shard_module._said.clear()
        pytest_shard_module._said.update({"shard": [index, 2], "queue": str(tmp_path)})
        try:
            pytest_shard_module.pytest_collection_modifyitems(config, items)
            session = SimpleNamespace(config=config)
            assert pytest_shard_module.pytest_runtestloop(session) is None
        finally:
            pytest_shard_module._said.clear()
        kept.append([item.nodeid for item in items])
    assert sorted(kept[0] + kept[1]) == sorted(ids) and kept[0] and kept[1]


FAILING_ONCE = {
    "pytest.ini": "[pytest]\n",
    "tests/test_one.py": "def test_fine():\n    pass\n\n\ndef test_other():\n    pass\n",
    "tests/test_two.py": (
        "import pathlib\n\n\ndef test_fixed():\n"
        "    assert pathlib.Path('fixed').exists(), 'not fixed yet'\n"
    ),
}


async def suite_with(root: Path, earlier: Any, **kwargs: Any) -> dict[str, Any]:
    """``pytest_suite`` as a plan's later round calls it: told what it found before."""
    with guarded(Guard("validation 'pytest'")) as guard:
        context = ToolContext(resources={"root": root}, guard=guard, earlier=earlier)
        try:
            outcome = await pytest_suite(root=root, context=context, **kwargs)
        finally:
            context.cleanup()
    assert guard.violation is None
    return outcome


@pytest.mark.anyio
async def test_what_failed_last_time_runs_first_and_a_failure_again_stops_the_suite(
    tmp_path: Path,
) -> None:
    """A result records each group's seconds and the failed tests' ids; told them, the
    next call runs those tests first: failing again, it stops there; fixed, the rest of
    the suite runs and the counts are the whole suite's, each test once."""
    root = write(tmp_path / "demo", FAILING_ONCE)
    before = snapshot(root)
    one, _ = await run_suite(root, shards=2)
    data = one["data"]
    assert (one["passed"], data["failed_ids"]) == (False, ["tests/test_two.py::test_fixed"])
    assert set(data["durations"]) == {"tests/test_one.py", "tests/test_two.py"}
    assert (data["first"], data["stopped_early"]) == (0, False)
    again = await suite_with(root, data, shards=2)
    assert again["passed"] is False and again["data"]["stopped_early"] is True
    assert again["message"].startswith("1 of 1 test failed: test_fixed (run first")
    assert (again["data"]["tests_run"], again["data"]["first"]) == (1, 1)
    assert "that failed last time" in again["data"]["output"]
    # What was not run this time is still known next time.
    assert set(again["data"]["durations"]) == set(data["durations"])
    (root / "fixed").write_text("")
    fixed = await suite_with(root, again["data"], shards=2)
    assert fixed["passed"] is True, fixed["message"]
    assert fixed["message"] == "All 3 tests passed"
    assert (fixed["data"]["tests_run"], fixed["data"]["first"]) == (3, 1)
    assert fixed["data"]["failed_ids"] == [] and fixed["data"]["stopped_early"] is False
    (root / "fixed").unlink()
    assert snapshot(root) == before
    # Told not to, or told of a call that did not finish, it runs the whole suite.
    whole = await suite_with(root, data, failed_first=False)
    assert (whole["data"]["tests_run"], whole["data"]["first"]) == (3, 0)
    timed_out = {**data, "error": "timeout"}
    assert (await suite_with(root, timed_out))["data"]["first"] == 0


@pytest.mark.anyio
async def test_a_test_that_failed_before_and_is_gone_runs_the_suite(tmp_path: Path) -> None:
    """The tests that failed last time are gone (renamed): nothing runs first, the whole
    suite does; nonsense in what it was told is left aside."""
    root = write(tmp_path / "demo", TINY_PROJECT)
    told = {"failed_ids": ["tests/test_gone.py::test_x", 3], "durations": {"x": "slow", "y": -1}}
    outcome = await suite_with(root, told)
    assert (outcome["data"]["tests_run"], outcome["data"]["stopped_early"]) == (3, False)
    assert "x" not in outcome["data"]["durations"]


@pytest.mark.anyio
async def test_bad_failed_first_is_refused(tmp_path: Path) -> None:
    root = write(tmp_path / "demo", TINY_PROJECT)
    outcome, _ = await run_suite(root, failed_first="yes")
    bad_arguments(outcome, "failed_first must be true or false, got a string")


def test_a_projects_test_durations_file_weighs_the_groups(tmp_path: Path) -> None:
    """pytest-split's ``.test_durations`` (seconds by test id) is read by group; a file
    that is not that is left aside."""
    root = write(
        tmp_path / "demo",
        {
            ".test_durations": json.dumps(
                {"tests/a.py::T::test_1": 1.5, "tests/a.py::T::test_2": 0.5, "tests/b.py::t": 2}
            )
        },
    )
    assert pytest_module._durations_file(root) == {"tests/a.py::T": 2.0, "tests/b.py": 2.0}
    (root / ".test_durations").write_text("[1, 2")
    assert pytest_module._durations_file(root) == {}
    (root / ".test_durations").write_text('{"tests/a.py::t": true}')
    assert pytest_module._durations_file(root) == {}


def test_the_documented_validation_of_the_change_runs(tmp_path: Path) -> None:
    """docs/validators.md's own validation that reads ``context.changed``: given the
    change, it judges only that; told nothing, it judges the whole folder."""
    text = DOCS.read_text(encoding="utf-8")
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "no_tabs" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "validators.md", "exec"), namespace)
    no_tabs = namespace["no_tabs"]
    root = write(tmp_path / "r", {"old.py": "if x:\n\tpass\n", "new.py": "x = 1\n"})
    told = ToolContext(resources={"root": root}, changed={root: ["new.py"]})
    assert no_tabs(root, told) == {"passed": True, "message": "no tabs"}
    assert no_tabs(root, ToolContext(resources={"root": root})) == {
        "passed": False,
        "message": "old.py",
    }


def test_each_check_loads_when_first_asked_for() -> None:
    """``gategraph.validators`` loads a check's module on first use: a plan that uses one
    built-in pays for that one."""

    code = (
        "import sys, gategraph.validators as v; "
        "before = sorted(m for m in sys.modules if m.startswith('gategraph.validators.')); "
        "v.python_syntax; "
        "after = sorted(m for m in sys.modules if m.startswith('gategraph.validators.')); "
        "print(before, after, 'regex' in dir(v))"
    )
    assert python_prints(code).split("] [") == [
        "[",
        "'gategraph.validators._common', 'gategraph.validators._python_syntax'] True",
    ]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        validators.nothing  # noqa: B018


def test_every_builtin_schema_is_a_json_schema() -> None:
    """The built-ins' schemas are not checked when a plan loads them (they are
    gategraph's own): checked here instead, each against its metaschema."""
    from gategraph.runtime._data._validator_declarations import VALIDATOR_TOOLS
    from jsonschema import validators as schema_validators

    for config in [*BUILTIN_CONFIGS.values(), *VALIDATOR_TOOLS.values()]:
        for key in ("input_schema", "output_schema"):
            if config.get(key) is not None:
                schema_validators.validator_for(config[key]).check_schema(config[key])


def test_a_config_of_its_own_is_checked_and_a_trusted_one_is_not() -> None:
    """A user's schema that is no JSON Schema is refused; a built-in's is taken as it is."""
    from gategraph.runtime import ConfigError

    config = {"name": "v", "entrypoint": "m:f", "input_schema": {"type": 3}}
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        Validation.from_config(config)
    assert Validation.from_config(config, trusted=True).input_schema == {"type": 3}


@pytest.mark.parametrize(
    ("schema", "empty_passes"),
    [
        ({"type": "object", "properties": {"a": {"type": "string"}}}, True),
        ({"type": "object", "additionalProperties": False}, True),
        ({"type": ["object", "null"], "required": []}, True),
        ({"type": "object", "required": ["a"]}, False),
        ({"type": "object", "minProperties": 1}, False),
        ({"type": "object", "anyOf": [{"required": ["a"]}]}, False),
        ({"type": "array"}, False),
        ({"not": {}}, False),
        (
            {
                "$schema": "http://json-schema.org/draft-03/schema#",
                "type": "object",
                "properties": {"a": {"type": "string", "required": True}},
            },
            False,
        ),
    ],
)
def test_an_empty_argument_list_is_judged_without_a_validator_where_it_surely_passes(
    schema: dict[str, Any], empty_passes: bool
) -> None:
    """A node without arguments: its schema decides without jsonschema where the empty
    object surely passes, and jsonschema decides the rest (the same answer)."""
    from gategraph.runtime._data._models import _takes_nothing

    assert _takes_nothing(schema) is empty_passes
    tool = Validation.from_config({"name": "v", "entrypoint": "m:f", "input_schema": schema})
    assert (tool.argument_problems({}) == []) is empty_passes


def test_a_context_with_two_folders_needs_the_folder_named(tmp_path: Path) -> None:
    """``changed()`` without a folder answers only where the call has exactly one."""
    one, two = tmp_path / "one", tmp_path / "two"
    context = ToolContext(resources={"a": one, "b": two}, changed={one: ["x.py"]})
    assert context.changed() is None
    assert context.changed(one) == frozenset({"x.py"})
    assert context.changed(two) is None


SET_ORDERED = {
    "pytest.ini": "[pytest]\n",
    "tests/test_set.py": (
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('pair', list({('a', 1), ('b', 2), ('c', 3), ('d', 4), "
        "('e', 5), ('f', 6)}))\n"
        "def test_pair(pair):\n    assert pair != ('d', 4)\n"
    ),
}


@pytest.mark.anyio
async def test_ids_from_a_set_s_order_are_the_same_test_in_every_shard(tmp_path: Path) -> None:
    """A parametrization over a set gets ids by position (`pair0`, `pair1`, ...), which
    point at values in the set's order, and that order follows the hash seed. Every shard
    of one call runs with one seed, so each test runs exactly once and the failing one
    always fails the suite."""
    root = write(tmp_path / "demo", SET_ORDERED)
    for _ in range(3):
        outcome, _ = await run_suite(root, shards=3)
        assert (outcome["passed"], outcome["data"]["tests_run"]) == (False, 6), outcome
        assert outcome["data"]["tests_failed"] == 1


@pytest.mark.anyio
async def test_shards_that_collect_different_tests_fail_the_suite(tmp_path: Path) -> None:
    """Ids that change from one process to the next (here, random ones): no shard can be
    trusted to have run every test once, so the suite fails, saying why."""
    root = write(
        tmp_path / "demo",
        {
            "pytest.ini": "[pytest]\n",
            "tests/test_random.py": (
                "import os, pytest\n\n\n"
                "@pytest.mark.parametrize('n', [os.urandom(4).hex() for _ in range(4)])\n"
                "def test_n(n):\n    pass\n"
            ),
        },
    )
    outcome, _ = await run_suite(root, shards=2)
    assert outcome["passed"] is False
    assert outcome["message"].startswith("the suite's 2 processes collected different tests")


@pytest.mark.anyio
async def test_two_tests_of_one_name_in_two_folders_both_count(tmp_path: Path) -> None:
    """The JUnit reports name a test by module and name only: two tests of the same name
    in two folders are two tests, whichever shard ran them."""
    body = "def test_same():\n    assert False, 'both run'\n"
    root = write(
        tmp_path / "demo",
        {
            "pytest.ini": "[pytest]\naddopts = --import-mode=importlib\n",
            "tests/v1/test_x.py": body,
            "tests/v2/test_x.py": body,
        },
    )
    for shards in (1, 2):
        outcome, _ = await run_suite(root, shards=shards)
        assert (outcome["data"]["tests_run"], outcome["data"]["tests_failed"]) == (2, 2)


def test_a_durations_file_that_is_no_record_is_left_aside(tmp_path: Path) -> None:
    """Nested past what JSON can be read to, or seconds that are not finite: nothing, or
    only the finite ones, and never more than a day and a half each."""
    root = write(tmp_path / "demo", {".test_durations": "[" * 100_000 + "]" * 100_000})
    assert pytest_module._durations_file(root) == {}
    (root / ".test_durations").write_text('{"a.py::t": 1e999, "b.py::t": 1e300, "c.py::t": 2}')
    assert pytest_module._durations_file(root) == {"b.py": 1e6, "c.py": 2.0}
