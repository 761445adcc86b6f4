"""Resources: sandboxes, changesets, an atomic at-most-once Apply, and crash recovery."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _helpers import run_process
from gategraph.runtime import ConfigError, GategraphError, RuntimeFault
from gategraph.runtime._storage import _resources as resources
from gategraph.runtime._storage._resources import (
    ApplyConflictError,
    ApplyReport,
    ApplyTwiceError,
    Change,
    Changeset,
    DirectoryResource,
    DirectorySandbox,
    MemoryResource,
    MemorySandbox,
    Resource,
    Sandbox,
)

JOURNAL = ".gategraph-journal"

Entry = bytes | tuple[str, str]


def tree(root: Path) -> dict[str, Entry]:
    """Files (bytes) and links (("link", target)) below root, journal left out."""
    found: dict[str, Entry] = {}
    for folder, dirs, files in os.walk(root):
        rel_folder = Path(folder).relative_to(root)
        if rel_folder == Path():
            dirs[:] = [d for d in dirs if d != JOURNAL]
        for name in [*dirs, *files]:
            path = Path(folder) / name
            rel = (rel_folder / name).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                found[rel] = path.read_bytes()
    return found


def folders(root: Path) -> set[str]:
    """Every real folder below root, journal left out."""
    found: set[str] = set()
    for folder, dirs, _ in os.walk(root):
        rel_folder = Path(folder).relative_to(root)
        if rel_folder == Path():
            dirs[:] = [d for d in dirs if d != JOURNAL]
        found.update(
            (rel_folder / d).as_posix() for d in dirs if not (Path(folder) / d).is_symlink()
        )
    return found


def parents(paths: Iterable[str]) -> set[str]:
    """The folders that files at these paths need."""
    return {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}


def write(root: Path, files: dict[str, Entry]) -> None:
    """Create files and links below root."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):
            if path.is_symlink() or path.exists():
                path.unlink()
            path.symlink_to(content[1])
        else:
            if path.is_symlink():
                path.unlink()
            path.write_bytes(content)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def link_sha(target: str) -> str:
    return sha(b"symlink\0" + target.encode())


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small project folder."""
    folder = tmp_path / "repo"
    write(
        folder,
        {
            "README.md": b"# demo\n",
            "src/app.py": b"print('hi')\n",
            "src/pkg/util.py": b"X = 1\n",
            "src/pkg/deep/er.py": b"Y = 2\n",
            "data/blob.bin": bytes(range(256)) * 4,
            "data/empty.txt": b"",
            "docs/a.md": b"a\n",
            "docs/b.md": b"b\n",
            "link-to-app": ("link", "src/app.py"),
        },
    )
    return folder


@pytest.fixture
def resource(root: Path) -> DirectoryResource:
    return DirectoryResource("repo", root)


@contextlib.contextmanager
def apply_fails_midway() -> Iterator[None]:
    """The disk refuses the second file an apply moves into place, past the point of no
    return (a PermissionError)."""

    def fail(phase: str, index: int) -> None:
        if (phase, index) == ("applying", 1):
            raise PermissionError("disk says no")

    resources._crash_point = fail
    try:
        yield
    finally:
        resources._crash_point = None


def open_box(resource: DirectoryResource, tmp_path: Path, name: str = "box") -> DirectorySandbox:
    return resource.open_sandbox(tmp_path / "work" / name)


# --- the protocols -------------------------------------------------------------------


def test_built_in_resources_and_sandboxes_satisfy_the_protocols(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """DirectoryResource and MemoryResource are Resources; their sandboxes are Sandboxes."""
    memory = MemoryResource("notes", {"a.txt": "a"})
    assert isinstance(resource, Resource)
    assert isinstance(memory, Resource)
    assert isinstance(open_box(resource, tmp_path), Sandbox)
    assert isinstance(memory.open_sandbox(tmp_path / "m"), Sandbox)
    assert (resource.kind, memory.kind) == ("directory", "memory")


def test_errors_are_gategraph_errors() -> None:
    """Every refusal is an ApplyConflictError; applying twice is one too."""
    assert issubclass(ApplyConflictError, GategraphError)
    assert issubclass(ApplyTwiceError, ApplyConflictError)
    error = ApplyTwiceError(resource="repo", plan_id="p1")
    assert (error.resource, error.plan_id, error.paths) == ("repo", "p1", ())
    assert "at most once" in str(error)


def test_changeset_summary_counts_kinds() -> None:
    """summary() counts added, modified and deleted; empty says whether anything changed."""
    changes = (
        Change(path="a", kind="added", size=1, sha256="x", base_sha256=None),
        Change(path="b", kind="added", size=1, sha256="x", base_sha256=None),
        Change(path="c", kind="modified", size=1, sha256="x", base_sha256="y"),
    )
    assert Changeset(resource="r", changes=changes).summary() == "2 added, 1 modified, 0 deleted"
    assert not Changeset(resource="r", changes=changes).empty
    assert Changeset(resource="r").empty
    assert Changeset(resource="r").summary() == "0 added, 0 modified, 0 deleted"


def test_records_round_trip_through_json() -> None:
    """Changesets and reports encode to JSON and back unchanged."""
    changeset = Changeset(
        resource="r",
        changes=(Change(path="a", kind="deleted", size=0, sha256=None, base_sha256="y"),),
    )
    assert msgspec.json.decode(msgspec.json.encode(changeset), type=Changeset) == changeset
    report = ApplyReport(resource="r", plan_id="p", changes=1)
    assert msgspec.json.decode(msgspec.json.encode(report), type=ApplyReport) == report


# --- sandboxes and changesets ---------------------------------------------------------


def test_sandbox_is_a_copy_and_changes_there_do_not_touch_the_root(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A sandbox copies the tree (links as links); writing in it leaves the root alone."""
    before = tree(root)
    box = open_box(resource, tmp_path)
    assert box.view == tmp_path / "work" / "box"
    assert tree(box.view) == before
    assert (box.view / "link-to-app").is_symlink()
    (box.view / "src/app.py").write_text("changed")
    (box.view / "new.txt").write_text("new")
    (box.view / "docs/a.md").unlink()
    assert tree(root) == before
    assert not (root / JOURNAL).exists()


def test_unchanged_sandbox_has_an_empty_changeset(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """A sandbox nobody touched has no changes."""
    changeset = open_box(resource, tmp_path).changeset()
    assert changeset.resource == "repo"
    assert changeset.empty


def test_changeset_reports_added_modified_and_deleted(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """Nested, binary and empty files show as added, modified or deleted, with hashes and sizes."""
    box = open_box(resource, tmp_path)
    binary = bytes(range(255, -1, -1)) * 3
    write(
        box.view,
        {
            "src/pkg/deep/er.py": b"Y = 3\n",
            "src/new/deeper/mod.py": b"Z = 0\n",
            "data/blob.bin": binary,
            "data/empty.txt": b"now full",
            "data/new-empty": b"",
        },
    )
    (box.view / "docs/b.md").unlink()
    changes = {c.path: c for c in box.changeset().changes}
    assert list(changes) == sorted(changes)
    assert changes["src/pkg/deep/er.py"] == Change(
        path="src/pkg/deep/er.py",
        kind="modified",
        size=6,
        sha256=sha(b"Y = 3\n"),
        base_sha256=sha(b"Y = 2\n"),
    )
    assert changes["src/new/deeper/mod.py"] == Change(
        path="src/new/deeper/mod.py", kind="added", size=6, sha256=sha(b"Z = 0\n"), base_sha256=None
    )
    assert changes["data/blob.bin"].sha256 == sha(binary)
    assert changes["data/blob.bin"].size == len(binary)
    assert changes["data/empty.txt"].base_sha256 == sha(b"")
    assert changes["data/new-empty"] == Change(
        path="data/new-empty", kind="added", size=0, sha256=sha(b""), base_sha256=None
    )
    assert changes["docs/b.md"] == Change(
        path="docs/b.md", kind="deleted", size=0, sha256=None, base_sha256=sha(b"b\n")
    )
    assert box.changeset().summary() == "2 added, 3 modified, 1 deleted"


def test_changeset_treats_symlinks_as_links(resource: DirectoryResource, tmp_path: Path) -> None:
    """A link is added, retargeted, turned into a file or deleted as a link; it is never followed."""
    outside = tmp_path / "outside"
    write(outside, {"secret.txt": b"do not copy"})
    box = open_box(resource, tmp_path)
    write(
        box.view,
        {
            "link-to-app": ("link", "README.md"),  # retargeted
            "out": ("link", os.fspath(outside)),  # a link to a folder outside the root
            "src/app.py": ("link", "../README.md"),  # a file becomes a link
        },
    )
    changes = {c.path: c for c in box.changeset().changes}
    assert set(changes) == {"link-to-app", "out", "src/app.py"}
    assert changes["link-to-app"].kind == "modified"
    assert changes["link-to-app"].sha256 == link_sha("README.md")
    assert changes["link-to-app"].base_sha256 == link_sha("src/app.py")
    assert changes["out"] == Change(
        path="out",
        kind="added",
        size=len(os.fsencode(outside)),
        sha256=link_sha(os.fspath(outside)),
        base_sha256=None,
    )
    assert changes["src/app.py"].base_sha256 == sha(b"print('hi')\n")
    (box.view / "link-to-app").unlink()
    assert {c.path: c.kind for c in box.changeset().changes}["link-to-app"] == "deleted"


def test_a_link_and_a_file_with_the_same_text_differ() -> None:
    """A link's digest is not the digest of a file holding its target text."""
    assert resources._link_digest("abc").sha256 != sha(b"abc")


def test_journal_is_excluded_from_sandbox_and_changeset(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """The journal folder is never copied into a sandbox nor reported as a change."""
    write(root, {f"{JOURNAL}/applied/old-plan": b"{}", f"{JOURNAL}/leftover/x": b"x"})
    box = open_box(resource, tmp_path)
    assert not (box.view / JOURNAL).exists()
    write(
        box.view,
        {f"{JOURNAL}/made-by-a-node": b"x", "src/pkg/.gategraph-journal": b"not the journal"},
    )
    assert [c.path for c in box.changeset().changes] == ["src/pkg/.gategraph-journal"]


def test_sandbox_folder_must_be_empty_and_outside_the_root(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """open_sandbox refuses a folder that is not empty or that lies inside the resource."""
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        resource.open_sandbox(tmp_path / "busy")
    with pytest.raises(ValueError, match="inside resource"):
        resource.open_sandbox(root / "src" / "box")
    with pytest.raises(ValueError, match="inside resource"):
        resource.open_sandbox(root / JOURNAL / "sandboxes")
    with pytest.raises(ValueError, match="inside resource"):
        resource.open_sandbox(root)


def test_missing_root_is_refused(tmp_path: Path) -> None:
    """A resource whose folder does not exist cannot open a sandbox."""
    with pytest.raises(NotADirectoryError):
        DirectoryResource("gone", tmp_path / "gone").open_sandbox(tmp_path / "box")


def test_discarded_sandbox_is_gone(resource: DirectoryResource, tmp_path: Path) -> None:
    """discard() removes the copy; its changeset and its apply are refused after."""
    box = open_box(resource, tmp_path)
    changeset = box.changeset()
    box.discard()
    assert not box.view.exists()
    with pytest.raises(RuntimeFault, match="discarded"):
        box.changeset()
    with pytest.raises(ApplyConflictError, match="discarded"):
        resource.apply(box, changeset, plan_id="p1")


# --- apply ------------------------------------------------------------------------------


def test_apply_makes_the_root_equal_to_the_sandbox(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """After apply, the root holds exactly the sandbox's files, links and folders."""
    box = open_box(resource, tmp_path)
    write(
        box.view,
        {
            "README.md": b"# changed\n",
            "src/new/deeper/mod.py": b"Z = 0\n",
            "data/blob.bin": b"\x00\xff" * 1000,
            "data/empty.txt": b"",
            "new-empty": b"",
            "link-to-app": ("link", "README.md"),
            "abs-link": ("link", "/nonexistent/target"),
        },
    )
    os.chmod(box.view / "src/new/deeper/mod.py", 0o755)
    for name in ("docs/a.md", "docs/b.md", "src/pkg/deep/er.py"):
        (box.view / name).unlink()
    (box.view / "docs").rmdir()  # a folder emptied and removed in the sandbox
    changeset = box.changeset()
    report = resource.apply(box, changeset, plan_id="p1")
    assert report == ApplyReport(
        resource="repo", plan_id="p1", changes=len(changeset.changes), recovered=False
    )
    assert tree(root) == tree(box.view)
    assert folders(root) == folders(
        box.view
    )  # docs/ went; src/pkg/deep/ stays (the sandbox kept it)
    assert os.stat(root / "src/new/deeper/mod.py").st_mode & 0o777 == 0o755
    assert os.readlink(root / "abs-link") == "/nonexistent/target"
    assert sorted(os.listdir(root / JOURNAL)) == ["applied", "lock"]
    assert resource.applied("p1")


def test_apply_turns_files_into_folders_and_folders_into_files(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A file replaced by a folder, a folder by a file and a link by a folder all apply."""
    box = open_box(resource, tmp_path)
    (box.view / "README.md").unlink()
    write(box.view, {"README.md/index.md": b"now a folder"})
    for name in ("docs/a.md", "docs/b.md"):
        (box.view / name).unlink()
    (box.view / "docs").rmdir()
    write(box.view, {"docs": b"now a file"})
    (box.view / "link-to-app").unlink()
    write(box.view, {"link-to-app/inner": b"behind a former link"})
    resource.apply(box, box.changeset(), plan_id="p1")
    assert tree(root) == tree(box.view)
    assert folders(root) == folders(box.view)


def test_apply_keeps_unrelated_changes_to_the_root(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Files the changeset does not touch may change in the root meanwhile; they are kept."""
    box = open_box(resource, tmp_path)
    write(box.view, {"src/app.py": b"print('bye')\n"})
    write(root, {"docs/a.md": b"edited by someone else\n", "elsewhere.txt": b"new\n"})
    resource.apply(box, box.changeset(), plan_id="p1")
    assert (root / "src/app.py").read_bytes() == b"print('bye')\n"
    assert (root / "docs/a.md").read_bytes() == b"edited by someone else\n"
    assert (root / "elsewhere.txt").exists()


def test_folder_holding_unknown_files_is_kept(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A folder the plan empties stays when the root has gained other files in it."""
    box = open_box(resource, tmp_path)
    for name in ("docs/a.md", "docs/b.md"):
        (box.view / name).unlink()
    (box.view / "docs").rmdir()
    write(root, {"docs/c.md": b"added by someone else\n"})
    resource.apply(box, box.changeset(), plan_id="p1")
    assert tree(root)["docs/c.md"] == b"added by someone else\n"
    assert "docs/a.md" not in tree(root)


def test_empty_changeset_applies_and_counts(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Applying nothing still happens once: the plan is marked applied."""
    before = tree(root)
    box = open_box(resource, tmp_path)
    assert resource.apply(box, box.changeset(), plan_id="p1").changes == 0
    assert tree(root) == before
    assert resource.applied("p1")


@pytest.mark.parametrize(
    ("edit", "change"),
    [
        pytest.param({"src/app.py": b"theirs\n"}, {"src/app.py": b"ours\n"}, id="modified-both"),
        pytest.param({"new.txt": b"theirs\n"}, {"new.txt": b"ours\n"}, id="added-both"),
        pytest.param({"docs/a.md": b"theirs\n"}, None, id="deleted-ours-modified-theirs"),
        pytest.param(
            {"link-to-app": ("link", "README.md")},
            {"link-to-app": ("link", "docs/a.md")},
            id="link",
        ),
    ],
)
def test_conflicts_are_refused_and_change_nothing(
    resource: DirectoryResource,
    root: Path,
    tmp_path: Path,
    edit: dict[str, Entry],
    change: dict[str, Entry] | None,
) -> None:
    """A path changed in the root since the snapshot refuses the whole apply."""
    box = open_box(resource, tmp_path)
    write(box.view, {"README.md": b"unrelated change\n"})
    if change is None:
        (box.view / "docs/a.md").unlink()
    else:
        write(box.view, change)
    write(root, edit)
    before = tree(root)
    with pytest.raises(ApplyConflictError, match="changed in the real folder") as caught:
        resource.apply(box, box.changeset(), plan_id="p1")
    assert caught.value.paths == (next(iter(edit)),)
    assert caught.value.resource == "repo"
    assert caught.value.plan_id == "p1"
    assert tree(root) == before
    assert not resource.applied("p1")
    assert not (root / JOURNAL / "p1").exists()


def test_deleted_in_the_root_meanwhile_is_a_conflict(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A file the plan modifies but someone deleted meanwhile refuses the apply."""
    box = open_box(resource, tmp_path)
    write(box.view, {"src/app.py": b"ours\n"})
    (root / "src/app.py").unlink()
    with pytest.raises(ApplyConflictError):
        resource.apply(box, box.changeset(), plan_id="p1")
    assert not (root / "src/app.py").exists()


def test_stale_changeset_is_refused(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """The sandbox must still hold what the changeset says: what was validated is what applies."""
    box = open_box(resource, tmp_path)
    write(box.view, {"src/app.py": b"validated\n"})
    (box.view / "docs/a.md").unlink()
    changeset = box.changeset()
    write(box.view, {"src/app.py": b"changed after validation\n", "docs/a.md": b"back\n"})
    before = tree(root)
    with pytest.raises(ApplyConflictError, match="no longer holds") as caught:
        resource.apply(box, changeset, plan_id="p1")
    assert set(caught.value.paths) == {"src/app.py", "docs/a.md"}
    assert tree(root) == before
    assert not (root / JOURNAL / "p1").exists()


def test_a_subset_of_a_changeset_applies_alone(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Only the changes given are applied, even when the sandbox holds more."""
    box = open_box(resource, tmp_path)
    write(box.view, {"src/app.py": b"ours\n", "new.txt": b"new\n"})
    full = box.changeset()
    part = Changeset(resource="repo", changes=tuple(c for c in full.changes if c.path == "new.txt"))
    resource.apply(box, part, plan_id="p1")
    assert (root / "new.txt").read_bytes() == b"new\n"
    assert (root / "src/app.py").read_bytes() == b"print('hi')\n"


def test_apply_twice_is_refused(resource: DirectoryResource, root: Path, tmp_path: Path) -> None:
    """A plan applies at most once, even with a fresh sandbox or a second resource object."""
    assert not resource.applied("p1")
    box = open_box(resource, tmp_path)
    write(box.view, {"new.txt": b"once\n"})
    resource.apply(box, box.changeset(), plan_id="p1")
    assert resource.applied("p1")
    assert not resource.applied("p2")
    with pytest.raises(ApplyTwiceError):
        resource.apply(box, box.changeset(), plan_id="p1")
    again = DirectoryResource("repo", root)
    assert again.applied("p1")
    box2 = open_box(again, tmp_path, "box2")
    write(box2.view, {"other.txt": b"twice\n"})
    with pytest.raises(ApplyTwiceError, match="at most once"):
        again.apply(box2, box2.changeset(), plan_id="p1")
    assert not (root / "other.txt").exists()
    assert again.recover(plan_id="p1") is None


def _apply_at_once(boxes: Sequence[Any], apply: Callable[[Any, Any], object]) -> list[str]:
    """Apply each box's changes from a thread of its own, all at once: what each got."""
    outcomes: list[str] = []
    barrier = threading.Barrier(len(boxes))

    def run(box: Any) -> None:
        changeset = box.changeset()
        barrier.wait()
        try:
            apply(box, changeset)
            outcomes.append("applied")
        except ApplyTwiceError:
            outcomes.append("twice")

    threads = [threading.Thread(target=run, args=(box,)) for box in boxes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_concurrent_applies_of_one_plan_apply_once(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Eight threads applying the same plan: exactly one succeeds, the others are refused."""
    boxes = []
    for i in range(8):
        box = open_box(DirectoryResource("repo", root), tmp_path, f"box{i}")
        write(box.view, {f"from-{i}.txt": b"x"})
        boxes.append(box)
    outcomes = _apply_at_once(
        boxes,
        lambda box, changeset: DirectoryResource("repo", root).apply(box, changeset, plan_id="p1"),
    )
    assert sorted(outcomes) == ["applied"] + ["twice"] * 7
    assert len([name for name in os.listdir(root) if name.startswith("from-")]) == 1


@pytest.mark.anyio
async def test_apply_from_a_worker_thread(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Async callers run the synchronous methods in a worker thread."""
    box = await anyio.to_thread.run_sync(open_box, resource, tmp_path)
    write(box.view, {"async.txt": b"yes\n"})
    changeset = await anyio.to_thread.run_sync(box.changeset)
    report = await anyio.to_thread.run_sync(lambda: resource.apply(box, changeset, plan_id="p1"))
    assert report.changes == 1
    assert (root / "async.txt").read_bytes() == b"yes\n"


# --- paths that escape ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("../escape.txt", "escapes the root"),
        ("src/../../escape.txt", "escapes the root"),
        ("/tmp/escape.txt", "is absolute"),
        ("src/./app.py", "not a normalised"),
        ("src//app.py", "not a normalised"),
        (f"{JOURNAL}/applied/p9", "inside the journal"),
        ("", "empty"),
        ("a\0b", "NUL"),
    ],
)
def test_escaping_paths_are_refused(
    resource: DirectoryResource, root: Path, tmp_path: Path, path: str, why: str
) -> None:
    """A forged changeset whose path is not a plain path inside the root is refused."""
    box = open_box(resource, tmp_path)
    forged = Changeset(
        resource="repo",
        changes=(Change(path=path, kind="added", size=1, sha256=sha(b"x"), base_sha256=None),),
    )
    before = tree(root)
    with pytest.raises(ApplyConflictError, match=why):
        resource.apply(box, forged, plan_id="p1")
    assert tree(root) == before
    assert not (tmp_path / "escape.txt").exists()


def test_a_file_name_that_is_not_utf8_is_refused(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A changed file whose name is not valid UTF-8 cannot be journaled: refused, nothing changed."""
    box = open_box(resource, tmp_path)
    (box.view / os.fsdecode(b"bad-\xff.txt")).write_bytes(b"x")
    before = tree(root)
    with pytest.raises(ApplyConflictError, match="UTF-8"):
        resource.apply(box, box.changeset(), plan_id="p1")
    assert tree(root) == before


def test_malformed_changesets_are_refused(resource: DirectoryResource, tmp_path: Path) -> None:
    """Duplicate paths, hashes that disagree with the kind, a file inside a file, another resource."""
    box = open_box(resource, tmp_path)
    added = Change(path="a", kind="added", size=1, sha256=sha(b"x"), base_sha256=None)
    cases = {
        "twice": (added, added),
        "malformed": (Change(path="a", kind="added", size=1, sha256=None, base_sha256=None),),
        "both a file and the folder": (
            added,
            Change(path="a/b", kind="added", size=1, sha256=sha(b"x"), base_sha256=None),
        ),
    }
    for message, changes in cases.items():
        with pytest.raises(ApplyConflictError, match=message):
            resource.apply(box, Changeset(resource="repo", changes=changes), plan_id="p1")
    with pytest.raises(ApplyConflictError, match="belongs to resource 'other'"):
        resource.apply(box, Changeset(resource="other"), plan_id="p1")


def test_links_in_the_root_are_never_followed(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A change below a linked folder is refused; nothing outside the root is written."""
    outside = tmp_path / "outside"
    write(outside, {"passwd": b"root:x:0:0\n"})
    (root / "etc").symlink_to(outside)
    box = open_box(resource, tmp_path)
    assert (box.view / "etc").is_symlink()
    for change in (
        Change(
            path="etc/passwd",
            kind="modified",
            size=4,
            sha256=sha(b"evil"),
            base_sha256=sha(b"root:x:0:0\n"),
        ),
        Change(path="etc/new", kind="added", size=4, sha256=sha(b"evil"), base_sha256=None),
    ):
        (box.view / "etc").unlink()
        write(box.view, {change.path: b"evil"})
        with pytest.raises(ApplyConflictError):
            resource.apply(box, Changeset(resource="repo", changes=(change,)), plan_id="p1")
        (box.view / "etc").rename(tmp_path / f"junk-{change.path.replace('/', '-')}")
        (box.view / "etc").symlink_to(outside)
    assert tree(outside) == {"passwd": b"root:x:0:0\n"}


def test_a_sandbox_link_to_the_outside_is_applied_as_a_link(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A link the sandbox points outside the root lands as that link; its target is not copied."""
    outside = tmp_path / "outside"
    write(outside, {"secret.txt": b"secret"})
    box = open_box(resource, tmp_path)
    (box.view / "src").rename(tmp_path / "old-src")
    (box.view / "src").symlink_to(outside)
    resource.apply(box, box.changeset(), plan_id="p1")
    assert (root / "src").is_symlink()
    assert os.readlink(root / "src") == os.fspath(outside)
    assert tree(outside) == {"secret.txt": b"secret"}
    assert tree(root) == tree(box.view)


# --- plan ids and wrong arguments -------------------------------------------------------


@pytest.mark.parametrize("plan_id", ["", "../x", "a/b", "applied", "LOCK", ".hidden", "x" * 201])
def test_plan_ids_must_name_a_journal_folder(resource: DirectoryResource, plan_id: str) -> None:
    """A plan id that cannot be a folder name is a ConfigError."""
    with pytest.raises(ConfigError, match="plan_id"):
        resource.applied(plan_id)
    with pytest.raises(ConfigError):
        resource.recover(plan_id=plan_id)


def test_sandbox_of_another_kind_or_resource_is_refused(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """apply takes only a sandbox of its own resource."""
    memory_box = MemoryResource("notes").open_sandbox()
    with pytest.raises(TypeError):
        resource.apply(memory_box, Changeset(resource="repo"), plan_id="p1")
    other_root = tmp_path / "other"
    other_root.mkdir()
    other_box = DirectoryResource("repo", other_root).open_sandbox(tmp_path / "obox")
    with pytest.raises(ApplyConflictError, match="another resource"):
        resource.apply(other_box, Changeset(resource="repo"), plan_id="p1")


def test_recover_with_nothing_to_recover_is_none(resource: DirectoryResource, root: Path) -> None:
    """recover() of a plan that never applied, or applied cleanly, returns None."""
    assert resource.recover(plan_id="never") is None
    assert not (root / JOURNAL).exists()


def test_unfinished_apply_blocks_until_recovered(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """An apply left in ``prepared`` refuses a new apply; recover() drops it and the retry works."""
    box = open_box(resource, tmp_path)
    write(box.view, {"new.txt": b"new\n"})
    changeset = box.changeset()

    class Crash(BaseException):
        pass

    def crash(phase: str, index: int) -> None:
        if phase == "prepared":
            raise Crash

    resources._crash_point = crash
    try:
        with pytest.raises(Crash):
            resource.apply(box, changeset, plan_id="p1")
    finally:
        resources._crash_point = None
    # An exception (not a kill) before the point of no return cleans up by itself.
    assert not (root / JOURNAL / "p1").exists()
    # A kill would leave the prepared journal: fake one.
    write(root, {f"{JOURNAL}/p1/journal.json": b"{}"})
    with pytest.raises(RuntimeFault, match="unreadable"):
        resource.applied("p1")
    (root / JOURNAL / "p1" / "journal.json").unlink()
    assert not resource.applied("p1")
    with pytest.raises(ApplyConflictError, match="did not finish"):
        resource.apply(box, changeset, plan_id="p1")
    assert resource.recover(plan_id="p1") == ApplyReport(
        resource="repo", plan_id="p1", changes=0, recovered=True
    )
    assert resource.apply(box, changeset, plan_id="p1").changes == 1
    assert (root / "new.txt").read_bytes() == b"new\n"


def test_failure_after_the_point_of_no_return_is_a_runtime_fault(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """An OSError while applying leaves the journal; recover() then finishes the apply."""
    box = open_box(resource, tmp_path)
    write(box.view, {"a.txt": b"a", "b.txt": b"b", "src/app.py": b"new"})
    changeset = box.changeset()

    with apply_fails_midway(), pytest.raises(RuntimeFault, match="point of no return"):
        resource.apply(box, changeset, plan_id="p1")
    assert resource.applied("p1")
    assert (root / "a.txt").exists()
    assert not (root / "b.txt").exists()
    report = resource.recover(plan_id="p1")
    assert report == ApplyReport(resource="repo", plan_id="p1", changes=3, recovered=True)
    assert {k: v for k, v in tree(root).items() if k in {"a.txt", "b.txt", "src/app.py"}} == {
        "a.txt": b"a",
        "b.txt": b"b",
        "src/app.py": b"new",
    }


# --- crash tests: a real process killed mid-apply ------------------------------------

CHILD = r"""
import json, os, signal, sys
from pathlib import Path
from gategraph.runtime._storage import _resources as r

mode, root, work, spec_path, phase, index = sys.argv[1:]
resource = r.DirectoryResource("repo", Path(root))

def crash(at, n):
    if (at, n) == (phase, int(index)):
        os.kill(os.getpid(), signal.SIGKILL)

if mode == "apply":
    spec = json.loads(Path(spec_path).read_text())
    box = resource.open_sandbox(Path(work))
    for rel, hexdata in spec["write"].items():
        path = box.view / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes.fromhex(hexdata))
    for rel, target in spec["link"].items():
        path = box.view / rel
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(target)
    for rel in spec["delete"]:
        (box.view / rel).unlink()
    for rel in spec["rmdir"]:
        (box.view / rel).rmdir()
    changeset = box.changeset()
    r._crash_point = crash
    print(resource.apply(box, changeset, plan_id="plan-1").changes)
else:
    r._crash_point = crash
    print(resource.recover(plan_id="plan-1"))
"""


def crash_fixture(root: Path) -> tuple[dict[str, Entry], dict[str, Entry], dict[str, object]]:
    """An original tree of 70 entries, a plan of ~50 changes, and the tree it should give."""
    original: dict[str, Entry] = {}
    for i in range(40):
        original[f"src/pkg{i % 4}/mod{i:02}.py"] = f"value = {i}\n".encode()
    for i in range(10):
        original[f"data/blob{i}.bin"] = bytes([i]) * (1000 + i) + bytes(range(256))
    for i in range(6):
        original[f"docs/old/page{i}.md"] = f"page {i}\n".encode()
    original["README.md"] = b"# demo\n"
    original["latest"] = ("link", "src/pkg0/mod00.py")
    original["empty.txt"] = b""
    write(root, original)

    spec: dict[str, object] = {"write": {}, "link": {}, "delete": [], "rmdir": ["docs/old", "docs"]}
    writes: dict[str, str] = spec["write"]  # type: ignore[assignment]
    for i in range(0, 40, 2):
        writes[f"src/pkg{i % 4}/mod{i:02}.py"] = f"value = {i * 10 + 1}\n".encode().hex()
    for i in range(5):
        writes[f"data/blob{i}.bin"] = (bytes([255 - i]) * 5000).hex()
    for i in range(12):
        writes[f"src/new/sub{i % 3}/added{i:02}.py"] = f"added = {i}\n".encode().hex()
    writes["empty.txt"] = b"no longer empty".hex()
    spec["link"] = {"latest": "src/pkg1/mod01.py", "docs-link": "README.md"}
    spec["delete"] = [f"docs/old/page{i}.md" for i in range(6)] + ["data/blob9.bin"]

    expected = dict(original)
    for rel, hexdata in writes.items():
        expected[rel] = bytes.fromhex(hexdata)
    for rel, target in spec["link"].items():  # type: ignore[attr-defined]
        expected[rel] = ("link", target)
    for rel in spec["delete"]:  # type: ignore[attr-defined]
        del expected[rel]
    return original, expected, spec


def run_child(
    mode: str, root: Path, work: Path, spec_file: Path, phase: str, index: int
) -> subprocess.CompletedProcess[str]:
    """Run CHILD in a fresh interpreter."""
    return run_process(
        [
            sys.executable,
            "-c",
            CHILD,
            mode,
            os.fspath(root),
            os.fspath(work),
            os.fspath(spec_file),
            phase,
            str(index),
        ],
        timeout=60,
    )


CHANGES = 7 + 20 + 5 + 12 + 1 + 2  # deleted, modified, blobs, added, empty.txt, links

# Ops run deletions first (0-6), then writes by path: 7-11 are data/blob0-4.bin, 12 docs-link,
# 13 empty.txt, 14 latest, 15-26 src/new/..., 27-46 src/pkgN/modNN.py.
CRASH_POINTS = [
    pytest.param("staging", 20, "original", id="while-staging"),
    pytest.param("prepared", 0, "original", id="prepared"),
    pytest.param("applying", 0, "result", id="applying-first-op"),
    pytest.param("applying", 17, "result", id="applying-op-17"),
    pytest.param("backup", 3, "result", id="mid-delete"),
    pytest.param("backup", 9, "result", id="mid-op-9-modified-blob"),
    pytest.param("backup", 30, "result", id="mid-op-30-modified"),
    pytest.param("backup", 20, "result", id="mid-op-20-added"),
    pytest.param("applying", CHANGES - 1, "result", id="applying-last-op"),
    pytest.param("committed", 0, "result", id="committed"),
    pytest.param("marked", 0, "result", id="marked"),
]


@pytest.mark.parametrize(("phase", "index", "outcome"), CRASH_POINTS)
def test_killed_apply_recovers_to_all_or_nothing(
    tmp_path: Path, phase: str, index: int, outcome: str
) -> None:
    """A process killed anywhere in apply leaves a tree that recover() makes the original or the result, never a mix."""
    root = tmp_path / "repo"
    original, expected, spec = crash_fixture(root)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))

    child = run_child("apply", root, tmp_path / "work", spec_file, phase, index)
    assert child.returncode == -signal.SIGKILL, child.stderr

    resource = DirectoryResource("repo", root)
    plan_dir = root / JOURNAL / "plan-1"
    if phase == "backup":
        # Truly mid-op: op `index` moved the old file away, the new one is not in place yet.
        journal = json.loads((plan_dir / "journal.json").read_text())
        path, kind, staged, backup = journal["ops"][index]
        assert not os.path.lexists(root / path)
        assert (kind == "added") != (plan_dir / "backup" / backup).exists()
        assert (staged is None) or (plan_dir / "staged" / staged).exists()
    assert resource.applied("plan-1") is (outcome == "result")

    report = resource.recover(plan_id="plan-1")
    wanted = expected if outcome == "result" else original
    assert report == ApplyReport(
        resource="repo",
        plan_id="plan-1",
        changes=CHANGES if outcome == "result" else 0,
        recovered=True,
    )
    assert tree(root) == wanted
    assert folders(root) == parents(wanted)
    assert resource.applied("plan-1") is (outcome == "result")
    assert sorted(os.listdir(root / JOURNAL)) == (
        ["applied", "lock"] if outcome == "result" else ["lock"]
    )
    assert resource.recover(plan_id="plan-1") is None  # a second recover is a no-op
    assert tree(root) == wanted

    if outcome == "original":
        # Nothing was applied: the plan may still apply, once.
        done = run_child("apply", root, tmp_path / "work2", spec_file, "never", 0)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(CHANGES)
        assert tree(root) == expected


def test_apply_without_a_crash_in_a_child_process(tmp_path: Path) -> None:
    """The crash test's plan applies cleanly when nothing kills it."""
    root = tmp_path / "repo"
    _, expected, spec = crash_fixture(root)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    child = run_child("apply", root, tmp_path / "work", spec_file, "never", 0)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == str(CHANGES)
    assert tree(root) == expected
    assert folders(root) == parents(expected)


@pytest.mark.parametrize(
    ("again_phase", "again_index"), [("applying", 5), ("backup", 25), ("committed", 0)]
)
def test_killed_recovery_recovers(tmp_path: Path, again_phase: str, again_index: int) -> None:
    """A recovery killed part-way is itself recovered: the result is still exactly the plan's."""
    root = tmp_path / "repo"
    _, expected, spec = crash_fixture(root)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    first = run_child("apply", root, tmp_path / "work", spec_file, "backup", 17)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = run_child("recover", root, tmp_path / "work", spec_file, again_phase, again_index)
    assert second.returncode == -signal.SIGKILL, second.stderr
    resource = DirectoryResource("repo", root)
    assert resource.recover(plan_id="plan-1") == ApplyReport(
        resource="repo", plan_id="plan-1", changes=CHANGES, recovered=True
    )
    assert tree(root) == expected
    assert folders(root) == parents(expected)
    assert resource.recover(plan_id="plan-1") is None


# --- memory resource --------------------------------------------------------------------


def test_memory_sandbox_is_isolated() -> None:
    """The memory sandbox is a copy: mutating it leaves the resource's files alone."""
    memory = MemoryResource("notes", {"a.txt": "a", "b/c.txt": "c"})
    box = memory.open_sandbox()
    assert isinstance(box, MemorySandbox)
    box.view["a.txt"] = "changed"
    box.view["new.txt"] = "new"
    assert dict(memory.files) == {"a.txt": "a", "b/c.txt": "c"}
    with pytest.raises(TypeError):
        memory.files["a.txt"] = "x"  # type: ignore[index]


def test_memory_changeset_and_apply() -> None:
    """The memory changeset lists added, modified and deleted; apply swaps in the result."""
    memory = MemoryResource("notes", {"a.txt": "a", "b/c.txt": "c", "gone.txt": "bye"})
    box = memory.open_sandbox()
    box.view["a.txt"] = "é"
    box.view["new/deep.txt"] = ""
    del box.view["gone.txt"]
    changeset = box.changeset()
    assert [(c.path, c.kind, c.size) for c in changeset.changes] == [
        ("a.txt", "modified", 2),
        ("gone.txt", "deleted", 0),
        ("new/deep.txt", "added", 0),
    ]
    assert changeset.changes[0].sha256 == sha("é".encode())
    assert changeset.changes[0].base_sha256 == sha(b"a")
    before = memory.files
    assert not memory.applied("p1")
    assert memory.apply(box, changeset, plan_id="p1") == ApplyReport(
        resource="notes", plan_id="p1", changes=3
    )
    assert dict(memory.files) == box.view
    assert dict(before) == {
        "a.txt": "a",
        "b/c.txt": "c",
        "gone.txt": "bye",
    }  # an old view stays whole
    assert memory.applied("p1")
    with pytest.raises(ApplyTwiceError):
        memory.apply(box, changeset, plan_id="p1")
    assert memory.recover(plan_id="p1") is None


def test_memory_conflicts_and_stale_changesets_are_refused() -> None:
    """A memory apply refuses files changed meanwhile, and a sandbox changed after its changeset."""
    memory = MemoryResource("notes", {"a.txt": "a", "b.txt": "b"})
    first = memory.open_sandbox()
    second = memory.open_sandbox()
    first.view["a.txt"] = "first"
    second.view["a.txt"] = "second"
    memory.apply(first, first.changeset(), plan_id="p1")
    with pytest.raises(ApplyConflictError, match="changed since") as caught:
        memory.apply(second, second.changeset(), plan_id="p2")
    assert caught.value.paths == ("a.txt",)
    third = memory.open_sandbox()
    third.view["b.txt"] = "validated"
    changeset = third.changeset()
    third.view["b.txt"] = "changed after validation"
    with pytest.raises(ApplyConflictError, match="no longer holds"):
        memory.apply(third, changeset, plan_id="p3")
    del third.view["b.txt"]
    with pytest.raises(ApplyConflictError, match="no longer holds"):
        memory.apply(third, changeset, plan_id="p3")
    assert dict(memory.files) == {"a.txt": "first", "b.txt": "b"}
    assert not memory.applied("p2")
    assert not memory.applied("p3")


def test_memory_deletion_needs_the_file_gone_from_the_sandbox() -> None:
    """A deletion applies only while the sandbox still lacks the file."""
    memory = MemoryResource("notes", {"a.txt": "a"})
    box = memory.open_sandbox()
    del box.view["a.txt"]
    changeset = box.changeset()
    box.view["a.txt"] = 5  # type: ignore[assignment]
    with pytest.raises(ApplyConflictError):
        memory.apply(box, changeset, plan_id="p1")
    del box.view["a.txt"]
    memory.apply(box, changeset, plan_id="p1")
    assert dict(memory.files) == {}


def test_memory_paths_must_stay_inside() -> None:
    """A memory changeset with an escaping path is refused."""
    memory = MemoryResource("notes")
    box = memory.open_sandbox()
    box.view["../x"] = "x"
    with pytest.raises(ApplyConflictError, match="escapes the root"):
        memory.apply(box, box.changeset(), plan_id="p1")
    assert dict(memory.files) == {}


def test_memory_sandbox_holds_only_text() -> None:
    """A changeset of a memory sandbox holding something other than text is a TypeError."""
    box = MemoryResource("notes").open_sandbox()
    box.view["a"] = b"bytes"  # type: ignore[assignment]
    with pytest.raises(TypeError, match="text"):
        box.changeset()


def test_memory_discard_and_foreign_sandboxes() -> None:
    """A discarded sandbox, or one of another memory resource, is refused."""
    memory = MemoryResource("notes", {"a": "a"})
    other = MemoryResource("other", {"a": "a"}).open_sandbox()
    with pytest.raises(ApplyConflictError, match="copy of 'other'"):
        memory.apply(other, other.changeset(), plan_id="p1")
    box = memory.open_sandbox()
    changeset = box.changeset()
    box.discard()
    assert box.view == {}
    with pytest.raises(RuntimeFault):
        box.changeset()
    with pytest.raises(ApplyConflictError, match="discarded"):
        memory.apply(box, changeset, plan_id="p1")
    with pytest.raises(TypeError):
        memory.apply(object(), changeset, plan_id="p1")  # type: ignore[arg-type]


def test_concurrent_memory_applies_of_one_plan_apply_once() -> None:
    """Threads applying the same plan to a memory resource: one applies."""
    memory = MemoryResource("notes")
    boxes = [memory.open_sandbox() for _ in range(8)]
    for i, box in enumerate(boxes):
        box.view[f"from-{i}"] = "x"
    outcomes = _apply_at_once(
        boxes, lambda box, changeset: memory.apply(box, changeset, plan_id="p1")
    )
    assert sorted(outcomes) == ["applied"] + ["twice"] * 7
    assert len(memory.files) == 1


def test_an_apply_waits_for_the_journal_lock_only_so_long(
    resource: DirectoryResource, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any process that can read the folder can take the journal's lock (a read lock will
    do): an apply waits a bounded time for it, then refuses, changing nothing."""
    import fcntl

    from gategraph.runtime._storage import _resources

    monkeypatch.setattr(_resources, "_JOURNAL_WAIT", 0.2)
    box = open_box(resource, tmp_path)
    write(box.view, {"new.txt": b"new\n"})
    journal = root / ".gategraph-journal"
    journal.mkdir()
    holder = os.open(journal / "lock", os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(holder, fcntl.LOCK_SH)
        with pytest.raises(
            ApplyConflictError,
            match=r"journal's lock .* held by another .* without changing the folder",
        ):
            resource.apply(box, box.changeset(), plan_id="p1")
    finally:
        os.close(holder)
    assert not (root / "new.txt").exists()
    resource.apply(box, box.changeset(), plan_id="p1")  # free again: it applies
    assert (root / "new.txt").read_bytes() == b"new\n"
