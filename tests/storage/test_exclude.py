"""What a directory resource leaves out of its plans' copies: its ``exclude`` patterns, and
by default ``.git`` and what the folder's ``.gitignore`` files ignore."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from _helpers import run_gategraph
from gategraph.runtime import DirectoryResource
from gategraph.runtime._storage._resources import Exclusion

pytestmark = pytest.mark.timeout(180)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A checkout: tracked code, what git ignores (at the top and in a sub-folder, with an
    exception), the repository itself, and a folder the resource excludes on its own."""
    return _tree(
        tmp_path / "project",
        {
            ".gitignore": "*.log\nbuild/\n!keep.log\n.venv/\n",
            "app.py": "x = 1\n",
            "keep.log": "kept\n",
            "debug.log": "ignored\n",
            "build/out.bin": "ignored\n",
            ".venv/lib/big.py": "ignored\n",
            ".git/HEAD": "ref: refs/heads/main\n",
            ".git/info/exclude": "secret.txt\n",
            "secret.txt": "ignored through .git/info/exclude\n",
            "pkg/.gitignore": "local.txt\n",
            "pkg/local.txt": "ignored below pkg\n",
            "pkg/mod.py": "y = 2\n",
            "local.txt": "tracked: pkg's rules do not reach up\n",
            "data/raw.csv": "excluded by the resource\n",
        },
    )


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def test_a_copy_leaves_out_what_git_ignores_and_what_the_resource_excludes(
    project: Path, tmp_path: Path
) -> None:
    box = DirectoryResource("repo", project, exclude=["data/"]).open_sandbox(tmp_path / "box")
    assert _files(box.view) == [
        ".gitignore",
        "app.py",
        "keep.log",
        "local.txt",
        "pkg/.gitignore",
        "pkg/mod.py",
    ]
    assert box.changeset().empty


def test_gitignore_false_copies_everything(project: Path, tmp_path: Path) -> None:
    box = DirectoryResource("repo", project, gitignore=False).open_sandbox(tmp_path / "box")
    assert _files(box.view) == _files(project)


def test_what_is_left_out_is_never_a_change_and_apply_never_touches_it(
    project: Path, tmp_path: Path
) -> None:
    """A build output or a cache the work makes is not applied; an ignored file in the real
    folder survives an apply that empties its folder; and a plan that edits .gitignore
    changes the file, not what the plan tracks (its tracked file is not deleted)."""
    repo = DirectoryResource("repo", project)
    box = repo.open_sandbox(tmp_path / "box")
    (box.view / "build").mkdir()
    (box.view / "build" / "new.bin").write_text("made by the work")
    (box.view / "trace.log").write_text("made by the work")
    (box.view / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n.venv/\napp.py\n")
    (box.view / "app.py").write_text("x = 2\n")
    changes = box.changeset()
    assert [(c.path, c.kind) for c in changes.changes] == [
        (".gitignore", "modified"),
        ("app.py", "modified"),
    ]
    repo.apply(box, changes, plan_id="01J9ZQ3K5W8X2M4N6P7R8S9T0V")
    assert (project / "app.py").read_text() == "x = 2\n"
    assert (project / "debug.log").read_text() == "ignored\n"
    assert not (project / "build" / "new.bin").exists()
    assert (project / ".git" / "HEAD").exists()


def test_a_reopened_copy_keeps_the_rules_it_was_made_with(project: Path, tmp_path: Path) -> None:
    """A plan resumed after a crash diffs its copy with the rules read when it was made,
    not with the .gitignore the work has changed since."""
    repo = DirectoryResource("repo", project)
    box = repo.open_sandbox(tmp_path / "box")
    (box.view / "pkg" / ".gitignore").write_text("")  # pkg/local.txt no longer ignored
    (box.view / "pkg" / "local.txt").write_text("still left out")
    again = DirectoryResource("repo", project).reopen_sandbox(tmp_path / "box")
    assert again is not None
    assert [c.path for c in again.changeset().changes] == ["pkg/.gitignore"]
    box.discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project"]


def test_exclusion_follows_git_precedence() -> None:
    """The deepest .gitignore with a matching pattern decides; a negation re-includes; the
    resource's own patterns always leave out; a link is never a folder."""
    exclusion = Exclusion(
        ["*.tmp"], rules={"": ["*.log", "!keep.log", "out/"], "sub/": ["!*.log", "deep.py"]}
    )
    assert exclusion.excludes("a.log", folder=False)
    assert not exclusion.excludes("keep.log", folder=False)
    assert not exclusion.excludes("sub/a.log", folder=False)  # sub's negation wins
    assert exclusion.excludes("sub/deep.py", folder=False)
    assert not exclusion.excludes("deep.py", folder=False)
    assert exclusion.excludes("out", folder=True)
    assert not exclusion.excludes("out", folder=False)  # a file (or a link) called out
    assert exclusion.excludes("sub/x.tmp", folder=False)
    assert exclusion.excludes("sub/.git", folder=True)
    assert Exclusion.decode(exclusion.encode()).excludes("sub/deep.py", folder=False)


def _plan(tmp_path: Path, project: Path, resource: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            version: 1
            name: leaves-out
            resources:
              repo: {resource.format(project=project)}
            nodes:
              - {{id: syntax, validation: python_syntax, resources: [repo]}}
            """)
    )
    return path


def test_check_says_what_each_folder_leaves_out(project: Path, tmp_path: Path) -> None:
    plan = _plan(
        tmp_path, project, '{{kind: directory, path: "{project}", exclude: ["data/", "*.csv"]}}'
    )
    done = run_gategraph(tmp_path / "home", "check", str(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == (
        f"  repo: {project} — leaves out .git and what .gitignore ignores; exclude: data/, *.csv"
    )
    plan = _plan(tmp_path, project, '{{kind: directory, path: "{project}", gitignore: false}}')
    done = run_gategraph(tmp_path / "home", "check", "--json", str(plan), cwd=tmp_path)
    assert json.loads(done.stdout)["resources"] == [
        {"name": "repo", "path": str(project), "exclude": [], "gitignore": False}
    ]


@pytest.mark.parametrize(
    ("resource", "problem"),
    [
        ('{{kind: memory, files: {{a.py: "x"}}, exclude: ["*.log"]}}', "only for directory"),
        ('{{kind: memory, files: {{a.py: "x"}}, gitignore: false}}', "only for directory"),
        ('{{kind: directory, path: "{project}", exclude: [""]}}', "resources.repo.exclude"),
        ('{{kind: directory, path: "{project}", gitignore: maybe}}', "resources.repo.gitignore"),
    ],
)
def test_a_bad_exclusion_is_one_clear_line(
    project: Path, tmp_path: Path, resource: str, problem: str
) -> None:
    plan = _plan(tmp_path, project, resource)
    done = run_gategraph(tmp_path / "home", "check", str(plan), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and str(plan) in lines[0] and problem in lines[0], done.stderr


def test_a_run_keeps_no_ignored_file_in_its_store(project: Path, tmp_path: Path) -> None:
    """What git ignores (a virtual environment, say) never reaches the content store."""
    (project / ".venv" / "lib" / "big.py").write_bytes(b"# " + os.urandom(1 << 20).hex().encode())
    plan = _plan(tmp_path, project, '{{kind: directory, path: "{project}"}}')
    home = tmp_path / "home"
    done = run_gategraph(home, "run", str(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    stored = sum(p.stat().st_size for p in home.rglob("*") if p.is_file() and "store" in p.parts)
    assert 0 < stored < 64 << 10


def test_a_file_git_tracks_is_kept_whatever_gitignore_says(tmp_path: Path) -> None:
    """A file added before its rule, or with ``git add -f``, is the project's: copied, and
    a plan's edit of it applied (git's index says which files those are)."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    project = _tree(
        tmp_path / "project",
        {
            ".gitignore": "*.log\nbuild/\n",
            "app.py": "x = 1\n",
            "fixtures/sample.log": "tracked fixture\n",
            "build/keep.txt": "tracked, in an ignored folder\n",
            "debug.log": "ignored\n",
        },
    )
    git = ["git", "-C", str(project)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-f", "app.py", ".gitignore", "fixtures", "build"], check=True)
    repo = DirectoryResource("repo", project)
    box = repo.open_sandbox(tmp_path / "box")
    assert _files(box.view) == [".gitignore", "app.py", "build/keep.txt", "fixtures/sample.log"]
    (box.view / "fixtures" / "sample.log").write_text("edited\n")
    (box.view / "build" / "new.bin").write_text("a build output")
    changes = box.changeset()
    assert [c.path for c in changes.changes] == ["fixtures/sample.log"]
    repo.apply(box, changes, plan_id="01J9ZQ3K5W8X2M4N6P7R8S9T0V")
    assert (project / "fixtures" / "sample.log").read_text() == "edited\n"
    again = DirectoryResource("repo", project).reopen_sandbox(tmp_path / "box")
    assert again is not None  # the index read when the copy was made, kept beside it
    assert [c.path for c in again.changeset().changes] == ["fixtures/sample.log"]


def test_lines_git_skips_are_skipped_and_a_byte_order_mark_is_no_pattern(
    tmp_path: Path,
) -> None:
    project = _tree(
        tmp_path / "project",
        {
            ".gitignore": "\ufeffsecret.env\n!\nfoo\\\n*.log\n",
            "secret.env": "TOKEN=x\n",
            "x.log": "ignored\n",
            "app.py": "x = 1\n",
        },
    )
    box = DirectoryResource("repo", project).open_sandbox(tmp_path / "box")
    assert _files(box.view) == [".gitignore", "app.py"]


def test_a_comment_as_an_exclude_pattern_is_refused(project: Path, tmp_path: Path) -> None:
    plan = _plan(tmp_path, project, '{{kind: directory, path: "{project}", exclude: ["#x"]}}')
    done = run_gategraph(tmp_path / "home", "check", str(plan), cwd=tmp_path)
    assert done.returncode == 2
    assert "resources.repo.exclude" in done.stderr and "is a comment" in done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_rules_that_cannot_be_read_are_none(tmp_path: Path) -> None:
    """A .gitignore that is a folder or a link (never followed) holds no rules."""
    from gategraph.runtime._storage._resources import _rule_lines

    (tmp_path / "folder").mkdir()
    (tmp_path / "real").write_text("*.log\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert _rule_lines(str(tmp_path / "folder")) == []
    assert _rule_lines(str(tmp_path / "link")) == []
    assert _rule_lines(str(tmp_path / "missing")) == []
    assert _rule_lines(str(tmp_path / "real")) == ["*.log"]


def test_without_git_or_a_repository_git_trusts_the_patterns_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No git installed, a `.git` git does not take, or git that cannot start: nothing is
    known tracked, and .gitignore's patterns alone decide."""
    import subprocess

    from gategraph.runtime._storage import _resources

    (tmp_path / ".git").write_text("gitdir: /nowhere\n")
    assert _resources._git_tracked(str(tmp_path)) is None  # git says no
    monkeypatch.setattr(_resources.shutil, "which", lambda name: None)
    assert _resources._git_tracked(str(tmp_path)) is None

    def cannot_start(*args: object, **kwargs: object) -> None:
        raise OSError("no such program")

    monkeypatch.setattr(_resources.shutil, "which", lambda name: "/usr/bin/git")
    monkeypatch.setattr(subprocess, "run", cannot_start)
    assert _resources._git_tracked(str(tmp_path)) is None


def test_a_copy_made_before_exclusions_reopens_with_nothing_left_out_and_damage_is_said(
    project: Path, tmp_path: Path
) -> None:
    from gategraph.runtime import RuntimeFault

    repo = DirectoryResource("repo", project)
    box = repo.open_sandbox(tmp_path / "box")
    kept = tmp_path / "box.exclude"
    kept.unlink()  # as a copy made by an earlier release left it
    (box.view / "new.log").write_text("reported: nothing was left out of this copy")
    again = repo.reopen_sandbox(tmp_path / "box")
    assert again is not None
    assert [c.path for c in again.changeset().changes] == ["new.log"]
    kept.write_text("{not json")
    with pytest.raises(RuntimeFault, match=r"exclusions .* are damaged"):
        repo.reopen_sandbox(tmp_path / "box")
