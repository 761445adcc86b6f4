"""A directory resource after its Apply: releasing the applied marker (a finished plan
leaves nothing in the user's folder, issue 9 item 10), recovering from damaged or
interrupted journals, and reopening a sandbox after a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _helpers import write_tree
from gategraph.runtime import ConfigError, RuntimeFault
from gategraph.runtime._storage import _resources as resources
from gategraph.runtime._storage._resources import (
    ApplyReport,
    ApplyTwiceError,
    DirectoryResource,
    DirectorySandbox,
    MemoryResource,
)
from test_resources import apply_fails_midway

JOURNAL = ".gategraph-journal"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "repo", {"src/app.py": "x = 1\n"})


@pytest.fixture
def resource(root: Path) -> DirectoryResource:
    return DirectoryResource("repo", root)


def changed_box(
    resource: DirectoryResource, tmp_path: Path, name: str, files: dict[str, str]
) -> DirectorySandbox:
    box = resource.open_sandbox(tmp_path / "work" / name)
    for rel, text in files.items():
        (box.view / rel).parent.mkdir(parents=True, exist_ok=True)
        (box.view / rel).write_text(text)
    return box


def apply(
    resource: DirectoryResource, tmp_path: Path, plan_id: str, files: dict[str, str]
) -> ApplyReport:
    box = changed_box(resource, tmp_path, plan_id, files)
    return resource.apply(box, box.changeset(), plan_id=plan_id)


# -- release ----------------------------------------------------------------------------------


def test_release_without_a_journal_makes_nothing(resource: DirectoryResource, root: Path) -> None:
    """Releasing a plan that never applied here leaves the folder as it was."""
    resource.release(plan_id="never")
    assert sorted(p.name for p in root.iterdir()) == ["src"]


def test_release_of_the_last_plan_removes_the_journal(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """After its apply the marker keeps the plan at most once; once released, the folder
    holds only the project, and the resource no longer counts the plan as applied."""
    apply(resource, tmp_path, "p1", {"src/new.py": "y = 2\n"})
    assert resource.applied("p1")
    assert (root / JOURNAL / "applied" / "p1").exists()
    with pytest.raises(ApplyTwiceError):
        box = changed_box(resource, tmp_path, "p1-again", {"src/other.py": "z = 3\n"})
        resource.apply(box, box.changeset(), plan_id="p1")
    resource.release(plan_id="p1")
    assert not (root / JOURNAL).exists()
    assert not resource.applied("p1")
    assert (root / "src" / "new.py").read_text() == "y = 2\n"


def test_release_keeps_the_journal_while_another_plan_is_marked(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """Two applied plans: releasing one keeps the other's marker, and the journal with it."""
    apply(resource, tmp_path, "p1", {"a.txt": "a"})
    apply(resource, tmp_path, "p2", {"b.txt": "b"})
    resource.release(plan_id="p1")
    assert not resource.applied("p1") and resource.applied("p2")
    assert sorted(os.listdir(root / JOURNAL / "applied")) == ["p2"]
    resource.release(plan_id="p2")
    assert not (root / JOURNAL).exists()


def test_release_keeps_the_journal_of_an_unfinished_apply(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """An apply another plan has not finished stays recoverable: its journal is kept."""
    box = changed_box(resource, tmp_path, "stuck", {"a.txt": "a", "b.txt": "b"})

    with apply_fails_midway(), pytest.raises(RuntimeFault, match="point of no return"):
        resource.apply(box, box.changeset(), plan_id="stuck")
    apply(resource, tmp_path, "p1", {"c.txt": "c"})
    resource.release(plan_id="p1")
    resource.release(plan_id="not-applied-here")
    assert (root / JOURNAL / "stuck" / "journal.json").exists()
    assert resource.applied("stuck")
    report = resource.recover(plan_id="stuck")
    assert report == ApplyReport(resource="repo", plan_id="stuck", changes=2, recovered=True)
    assert (root / "b.txt").read_text() == "b"
    resource.release(plan_id="stuck")
    assert not (root / JOURNAL).exists()


@pytest.mark.parametrize("plan_id", ["", "applied", "LOCK", "../up", "a b"])
def test_release_refuses_a_plan_id_that_cannot_name_a_journal_entry(
    resource: DirectoryResource, plan_id: str
) -> None:
    """The plan id becomes a file name in the user's folder: checked first."""
    with pytest.raises(ConfigError, match="cannot name a journal folder"):
        resource.release(plan_id=plan_id)


# -- recover --------------------------------------------------------------------------------------


def test_recover_reports_a_committed_apply_whose_marker_is_damaged(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A commit whose clean-up was cut short is finished; a marker that cannot be read
    counts no changes rather than failing the recovery."""
    apply(resource, tmp_path, "p1", {"a.txt": "a"})
    (root / JOURNAL / "p1").mkdir()  # the clean-up after the marker never ran
    (root / JOURNAL / "applied" / "p1").write_bytes(b"\x00 not json")
    report = resource.recover(plan_id="p1")
    assert report == ApplyReport(resource="repo", plan_id="p1", changes=0, recovered=True)
    assert not (root / JOURNAL / "p1").exists()
    assert resource.recover(plan_id="p1") is None


def test_recover_that_fails_again_is_a_runtime_fault_and_can_be_retried(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """An OSError while recovery rolls forward is a RuntimeFault; a later recover finishes."""
    box = changed_box(resource, tmp_path, "p1", {"a.txt": "a", "b.txt": "b"})

    def fail(phase: str, index: int) -> None:
        if (phase, index) == ("applying", 1):
            raise PermissionError("disk says no")

    resources._crash_point = fail
    try:
        with pytest.raises(RuntimeFault):
            resource.apply(box, box.changeset(), plan_id="p1")
        with pytest.raises(RuntimeFault, match="stopped after its point of no return"):
            resource.recover(plan_id="p1")
    finally:
        resources._crash_point = None
    assert resource.recover(plan_id="p1") == ApplyReport(
        resource="repo", plan_id="p1", changes=2, recovered=True
    )
    assert (root / "a.txt").read_text() == "a" and (root / "b.txt").read_text() == "b"


# -- sandboxes --------------------------------------------------------------------------------


def test_a_sandbox_is_reopened_as_the_work_left_it(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """After a restart the sandbox is found again with its changes; one never made, or
    whose folder is gone, is None."""
    box = changed_box(resource, tmp_path, "box", {"src/app.py": "x = 2\n"})
    again = resource.reopen_sandbox(box.root)
    assert again is not None
    assert [c.path for c in again.changeset().changes] == ["src/app.py"]
    assert resource.reopen_sandbox(tmp_path / "work" / "never") is None
    box.discard()
    assert resource.reopen_sandbox(box.root) is None


def test_a_damaged_sandbox_snapshot_is_a_runtime_fault(
    resource: DirectoryResource, tmp_path: Path
) -> None:
    """A snapshot that is not gategraph's is never trusted to compute a changeset."""
    box = changed_box(resource, tmp_path, "box", {})
    resources._base_path(box.root).write_bytes(b"{not json")
    with pytest.raises(RuntimeFault, match="is damaged"):
        resource.reopen_sandbox(box.root)


def test_special_files_are_not_content(
    resource: DirectoryResource, root: Path, tmp_path: Path
) -> None:
    """A FIFO in the project is not copied into the sandbox; one the work makes in the
    sandbox is not part of its changeset."""
    os.mkfifo(root / "src" / "pipe")
    box = resource.open_sandbox(tmp_path / "work" / "box")
    assert not (box.view / "src" / "pipe").exists()
    assert (box.view / "src" / "app.py").read_text() == "x = 1\n"
    os.mkfifo(box.view / "made-by-work")
    assert box.changeset().changes == ()


def test_resources_show_what_they_are(resource: DirectoryResource, root: Path) -> None:
    """The reprs name the resource and where (or how much) it holds."""
    assert repr(resource) == f"DirectoryResource('repo', {os.fspath(root)!r})"
    assert repr(MemoryResource("notes", {"a.txt": "hi", "b.txt": "ho"})) == (
        "MemoryResource('notes', 2 files)"
    )


def test_a_resource_collected_while_its_thread_holds_the_kept_out_lock_lets_in_later(
    root: Path,
) -> None:
    """The collector runs a dropped resource's finalizer at any allocation, also in a
    thread inside the kept-out bookkeeping: letting its journal in then must not take that
    lock again (it deadlocked a test run), and is done at the next use instead."""
    import gc

    from gategraph.runtime._base import _kernel

    journal = os.path.realpath(root / JOURNAL)
    dropped = DirectoryResource("repo", root)
    assert journal in _kernel.kept_out()
    with _kernel._kept_lock:
        del dropped
        gc.collect()
        assert journal in _kernel._kept_out  # not yet: the lock is held
    assert journal not in _kernel.kept_out()
