"""The sandboxes of one plan, on their own: opened per strategy revision, reopened when a
plan resumes, snapshotted for each round, discarded when the plan ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from gategraph.runtime import ContentStore, DirectoryResource, MemoryResource, ResumeError
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._data._events import (
    ArtifactValidationStarted,
    FixRequested,
    StrategyProduced,
    WorkFinished,
)
from gategraph.runtime._lifecycle._plan_sandboxes import PlanSandboxes


def boxes(tmp_path: Path, plan_id: str | None = None, *, memory: bool = True) -> PlanSandboxes:
    folder = tmp_path / "repo"
    folder.mkdir(exist_ok=True)
    (folder / "a.txt").write_text("one\n")
    resources: dict[str, Any] = {"repo": DirectoryResource("repo", folder)}
    if memory:
        resources["notes"] = MemoryResource("notes", {"n.md": "hi"})
    return PlanSandboxes(
        resources,
        plan_id=plan_id or new_ulid(),
        home=lambda: tmp_path / "home",
        store=ContentStore(tmp_path / "store"),
    )


@pytest.mark.anyio
async def test_open_snapshot_and_discard(tmp_path: Path) -> None:
    """Fresh copies per revision below the plan's folder; a snapshot pins each sandbox's
    manifest; discarding everything leaves no folder of the plan."""
    plan = boxes(tmp_path)
    await plan.open(0, replaying=False)
    assert plan.ready and set(plan.held) == {"repo", "notes"}
    views = await plan.views()
    assert views["repo"] == tmp_path / "home" / "sandboxes" / plan.plan_id / "r0" / "repo"
    assert (views["repo"] / "a.txt").read_text() == "one\n" and views["notes"] == {"n.md": "hi"}
    first = await plan.inputs(pin=True)
    assert first is not None and set(first) == {"repo", "notes"}
    kept = set(first.values()) | set((plan.left_out() or {}).values())
    assert plan.store.pinned(plan.plan_id) == kept  # and what each folder leaves out
    views["notes"]["n.md"] = "changed"
    second = await plan.inputs(pin=False)
    assert second is not None and second["notes"] != first["notes"]
    assert second["repo"] == first["repo"]
    await plan.open(1, replaying=False)  # a revised strategy: fresh copies, r0 dropped
    assert (await plan.views())["notes"] == {"n.md": "hi"}
    assert sorted(p.name for p in (tmp_path / "home" / "sandboxes" / plan.plan_id).iterdir()) == [
        "r1"
    ]
    plan.discard(True)
    assert not plan.ready and plan.held == {}
    assert not (tmp_path / "home" / "sandboxes").exists()


@pytest.mark.anyio
async def test_replaying_opens_nothing(tmp_path: Path) -> None:
    plan = boxes(tmp_path)
    await plan.open(0, replaying=True)
    assert not plan.ready and plan.held == {}
    assert await plan.inputs(pin=True) is None
    assert not (tmp_path / "home").exists()


@pytest.mark.anyio
async def test_a_resumed_plan_reopens_its_sandboxes_or_says_they_are_gone(
    tmp_path: Path,
) -> None:
    """Reopened as the earlier run left them; gone while the log shows work in them, the
    resume is refused saying which, and before anything is appended (check_kept)."""
    plan_id = new_ulid()
    earlier = boxes(tmp_path, plan_id)
    await earlier.open(0, replaying=False)
    (await earlier.views())["repo"].joinpath("a.txt").write_text("worked\n")
    later = boxes(tmp_path, plan_id, memory=False)
    later.resumed = True
    await later.open(0, replaying=True)
    later.work_from_log = True
    views = await later.views()
    assert (views["repo"] / "a.txt").read_text() == "worked\n"
    # A memory resource's sandbox lives only in the process (the object) that made it.
    steps: list[Any] = [
        StrategyProduced(id=new_ulid(), plan_id=plan_id, seq=2, at=time.time(), revision=0),
        WorkFinished(id=new_ulid(), plan_id=plan_id, seq=3, at=time.time(), attempt=1),
    ]
    with pytest.raises(ResumeError, match="resource 'notes' \\(revision 0\\), and it is gone"):
        await boxes(tmp_path, plan_id).check_kept(steps)
    earlier.discard(True)
    gone = boxes(tmp_path, plan_id, memory=False)
    gone.resumed = True
    await gone.open(0, replaying=True)
    gone.work_from_log = True
    with pytest.raises(
        ResumeError, match="the sandbox of resource 'repo' \\(revision 0\\) is gone"
    ):
        await gone.ensure()


def _step(plan_id: str, seq: int, kind: type[Any], **fields: Any) -> Any:
    return kind(id=new_ulid(), plan_id=plan_id, seq=seq, at=time.time(), **fields)


async def _round(plan: PlanSandboxes, seq: int, number: int) -> Any:
    """The event of round ``number``, on what ``plan``'s sandboxes hold now."""
    return _step(
        plan.plan_id,
        seq,
        ArtifactValidationStarted,
        round=number,
        attempt=number,
        revision=0,
        inputs=await plan.inputs(pin=True),
        bases=plan.bases(),
        exclusions=plan.left_out(),
    )


@pytest.mark.anyio
async def test_a_sandbox_gone_with_its_host_is_made_again_from_the_store(
    tmp_path: Path,
) -> None:
    """Resumed where the sandbox is not (another host, the same store): made again from
    the last round's inputs, with the base and the exclusion it had, so its changeset,
    its snapshot and what it leaves out are the lost one's; work after that round, a
    store that keeps no copies or lost the round, and a log without the record refuse."""
    import shutil

    plan_id = new_ulid()
    real = tmp_path / "repo"
    real.mkdir()
    (real / ".gitignore").write_text("*.log\n")
    (real / "x.log").write_text("left out\n")
    (real / "run.sh").write_text("echo one\n")
    (real / "run.sh").chmod(0o755)
    earlier = boxes(tmp_path, plan_id, memory=False)
    await earlier.open(0, replaying=False)
    work = (await earlier.views())["repo"]
    (work / "a.txt").write_text("worked\n")
    (work / "run.sh").write_text("echo two\n")  # keeps its mode
    (work / "new.py").write_text("x = 1\n")
    one = await _round(earlier, 4, 1)
    inputs, bases, left_out = one.inputs, one.bases, one.exclusions
    assert inputs and bases and left_out and set(left_out) == {"repo"}
    before = earlier.held["repo"].changeset()
    steps = [
        _step(plan_id, 2, StrategyProduced, revision=0),
        _step(plan_id, 3, WorkFinished, attempt=1),
        one,
    ]
    shutil.rmtree(tmp_path / "home")  # the host that worked in it is gone
    (real / ".gitignore").write_text("")  # the real folder changed since: not what counts

    later = boxes(tmp_path, plan_id, memory=False)
    later.resumed = True
    await later.check_kept(steps)
    await later.open(0, replaying=True)
    later.work_from_log = True
    again = (await later.views())["repo"]
    assert (again / "a.txt").read_text() == "worked\n" and not (again / "x.log").exists()
    assert (again / "run.sh").stat().st_mode & 0o777 == 0o755  # as the real file's
    assert later.held["repo"].changeset() == before
    assert await later.inputs(pin=False) == inputs  # what Apply checks: the validated change
    assert later.bases() == bases and later.left_out() == left_out
    (again / "build.log").write_text("made by a fix\n")  # still left out
    assert later.held["repo"].changeset() == before
    # Made again, it is a sandbox like any other: a later resume here reopens it.
    copy = tmp_path / "home" / "sandboxes" / plan_id / "r0" / "repo.copy"
    made = copy.read_text()
    await boxes(tmp_path, plan_id, memory=False).check_kept(steps)
    assert copy.read_text() == made  # reopened, not made again

    async def refused(steps: list[Any], store: ContentStore | None = None) -> str:
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
        other = boxes(tmp_path, plan_id, memory=False)
        if store is not None:
            other.store = store
        with pytest.raises(ResumeError) as caught:
            await other.check_kept(steps)
        return str(caught.value)

    fix = _step(plan_id, 5, WorkFinished, attempt=2)
    assert "the work done since its last validation round was only there" in await refused(
        [*steps, fix]
    )
    assert "keeps no copies" in await refused(steps, ContentStore(None))
    assert "no longer holds its last round's inputs" in await refused(
        steps, ContentStore(tmp_path / "other-store")
    )
    old_log = [*steps[:2], msgspec.structs.replace(steps[2], exclusions=None)]
    assert "did not record how to make it again" in await refused(old_log)


@pytest.mark.anyio
async def test_a_copy_another_host_went_on_without_is_not_taken_for_the_plan(
    tmp_path: Path,
) -> None:
    """Host B made the sandbox again from round 1 and died; host A did the fix and round 2.
    Resumed on B again, B's copy is older than the plan: made again from round 2. With
    work after the last round (only in A's copy), B's copy is refused. The copy the last
    work was done in stays the plan's, whatever it holds now (a write after its round is
    Apply's to refuse)."""
    import shutil

    plan_id = new_ulid()
    a = boxes(tmp_path, plan_id, memory=False)
    await a.open(0, replaying=False)
    copy_a = a.copies["repo"]
    work_a = (await a.views())["repo"]
    (work_a / "a.txt").write_text("round one\n")
    first = [
        _step(plan_id, 2, StrategyProduced, revision=0),
        _step(plan_id, 3, WorkFinished, attempt=1, sandboxes={"repo": copy_a}),
        await _round(a, 4, 1),
    ]
    # Host B: its own home, the copy made again from round 1.
    b_home = tmp_path / "b"
    b = boxes(tmp_path, plan_id, memory=False)
    b._home = lambda: b_home
    b.resumed = True
    await b.check_kept(first)
    await b.open(0, replaying=True)
    assert ((await b.views())["repo"] / "a.txt").read_text() == "round one\n"
    assert b.copies["repo"] not in (None, copy_a)  # another copy
    # Host A goes on: a fix, then round 2.
    (work_a / "a.txt").write_text("fixed\n")
    fix = _step(plan_id, 5, WorkFinished, attempt=2, sandboxes={"repo": copy_a})
    second = await _round(a, 6, 2)
    two = second.inputs
    again = boxes(tmp_path, plan_id, memory=False)
    again._home = lambda: b_home
    again.resumed = True
    with pytest.raises(ResumeError, match=r"the copy here is older \(it is not the copy the last"):
        await again.check_kept([*first, fix])
    await again.check_kept([*first, fix, second])
    await again.open(0, replaying=True)
    assert ((await again.views())["repo"] / "a.txt").read_text() == "fixed\n"
    assert await again.inputs(pin=False) == two
    # A's own copy, written after its round, is still A's: kept for Apply to refuse.
    (work_a / "a.txt").write_text("written after the round\n")
    mine = (work_a.parent / "repo.copy").read_text()
    await boxes(tmp_path, plan_id, memory=False).check_kept([*first, fix, second])
    assert (work_a.parent / "repo.copy").read_text() == mine
    shutil.rmtree(b_home)


@pytest.mark.anyio
async def test_what_a_round_changed_comes_from_its_manifests(tmp_path: Path) -> None:
    """The files a change added or modified (links too) since the sandbox opened, never
    what it deleted; only folders, and only where the store holds both manifests."""
    import os

    plan = boxes(tmp_path)
    await plan.open(0, replaying=False)
    repo = (await plan.views())["repo"]
    (repo / "keep.txt").write_text("same\n")  # added before the first round
    bases = plan.bases()
    assert bases is not None and set(bases) == {"repo", "notes"}
    first = await plan.inputs(pin=True)
    assert plan.changed(bases, first) == {"repo": frozenset({"keep.txt"})}
    (repo / "a.txt").write_text("two\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "b.py").write_text("x = 1\n")
    os.symlink("a.txt", repo / "link")
    (repo / "keep.txt").unlink()
    second = await plan.inputs(pin=True)
    assert plan.changed(bases, second) == {"repo": frozenset({"a.txt", "sub/b.py", "link"})}
    # Unknown, so each folder is judged whole: no bases, or a manifest the store lost.
    assert plan.changed(None, second) == {}
    assert plan.changed(bases, {**second, "repo": "0" * 64}) == {}


@pytest.mark.anyio
async def test_with_an_in_memory_store_each_sandbox_tells_its_change(tmp_path: Path) -> None:
    """An in-memory store keeps no manifests of folders: the open sandbox's own changeset
    says what changed (deletions left out); a folder given by no sandbox is judged whole."""
    from gategraph.runtime._lifecycle._plan_sandboxes import changed_files

    plan = boxes(tmp_path, memory=False)
    plan.store = ContentStore(None)
    await plan.open(0, replaying=False)
    repo = (await plan.views())["repo"]
    (repo / "new.py").write_text("x = 1\n")
    (repo / "a.txt").unlink()
    inputs = await plan.inputs(pin=True)
    assert plan.changed(None, inputs) == {"repo": frozenset({"new.py"})}
    assert changed_files(plan.store, ["repo"], {"repo": "f" * 64}, inputs) == {}


def test_a_folder_without_both_manifests_and_a_vanishing_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the round's events do not name is judged whole; an entry that goes away
    while its sandbox is listed is skipped, not a failure."""
    import os

    from gategraph.runtime._lifecycle import _plan_sandboxes
    from gategraph.runtime._lifecycle._plan_sandboxes import _listing_digest, changed_files

    store = ContentStore(tmp_path / "store")
    assert changed_files(store, ["repo"], {"other": "x"}, {"repo": "y"}) == {}
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a").write_text("a")
    whole = _listing_digest(str(tmp_path / "f"))
    real = os.lstat

    def vanishing(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        if path.endswith(os.sep + "a"):
            raise FileNotFoundError(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_plan_sandboxes.os, "lstat", vanishing)
    assert _listing_digest(str(tmp_path / "f")) != whole


@pytest.mark.anyio
async def test_copies_the_log_cannot_tell_apart_or_the_store_cannot_make_again(
    tmp_path: Path,
) -> None:
    """Another copy holding what the last round validated is the plan's; a round that
    recorded nothing for the folder, or a log that names no copy, keeps the copy there;
    an older copy the store cannot replace (it keeps no copies) is refused, a fix under
    way or not; the store lacking what a rule set needs refuses."""
    from gategraph.runtime._lifecycle._plan_sandboxes import _older

    plan_id = new_ulid()
    plan = boxes(tmp_path, plan_id, memory=False)
    await plan.open(0, replaying=False)
    found = plan.held["repo"]
    round_one = await _round(plan, 4, 1)
    work = _step(plan_id, 3, WorkFinished, attempt=1, sandboxes={"repo": "another-copy"})
    assert _older("repo", found, "mine", round_one, work) is None  # holds the round
    empty = msgspec.structs.replace(round_one, inputs={})
    assert _older("repo", found, "mine", empty, work) is None
    assert _older("repo", found, "mine", round_one, None) is None  # the log names no copy
    ((await plan.views())["repo"] / "a.txt").write_text("a fix under way\n")
    assert _older("repo", found, "mine", round_one, work) is not None
    fix = _step(plan_id, 5, FixRequested, attempt=2)
    steps = [_step(plan_id, 2, StrategyProduced, revision=0), work, round_one, fix]
    in_memory = boxes(tmp_path, plan_id, memory=False)
    in_memory.store = ContentStore(None)
    with pytest.raises(ResumeError, match="the copy here is older"):
        await in_memory.check_kept(steps)
    # What the store keeps of a gone copy's rules lacks the rules: refused.
    other = boxes(tmp_path, new_ulid(), memory=False)
    wrong = other.store.snapshot_texts({"something-else": "x"})
    lost = msgspec.structs.replace(round_one, plan_id=other.plan_id, exclusions={"repo": wrong})
    with pytest.raises(ResumeError, match="no longer holds its last round's inputs"):
        await other.check_kept([steps[0], work, lost])


@pytest.mark.anyio
async def test_a_resource_of_another_kind_cannot_be_made_again(tmp_path: Path) -> None:
    class Elsewhere:
        kind = "ticket"
        name = "tickets"

        def reopen_sandbox(self, folder: Path) -> None:
            return None

    plan_id = new_ulid()
    plan = PlanSandboxes(
        {"tickets": Elsewhere()},  # type: ignore[dict-item]
        plan_id=plan_id,
        home=lambda: tmp_path / "home",
        store=ContentStore(tmp_path / "store"),
    )
    steps = [
        _step(plan_id, 2, StrategyProduced, revision=0),
        _step(plan_id, 3, WorkFinished, attempt=1),
    ]
    with pytest.raises(ResumeError, match=r"resource 'tickets' \(revision 0\), and it is gone"):
        await plan.check_kept(steps)


@pytest.mark.anyio
async def test_a_revision_asked_for_and_a_store_that_lost_a_file(tmp_path: Path) -> None:
    """A crash after a strategy revision was asked for: its sandboxes are new, nothing of
    the revision before is made again (nor refused). A store that lost a file of the
    round refuses the resume before anything is appended, saying which."""
    import shutil

    from gategraph.runtime._data._events import StrategyRevisionRequested

    plan_id = new_ulid()
    plan = boxes(tmp_path, plan_id, memory=False)
    await plan.open(0, replaying=False)
    ((await plan.views())["repo"] / "only-r0.py").write_text("x = 0\n")
    steps = [
        _step(plan_id, 2, StrategyProduced, revision=0),
        _step(plan_id, 3, WorkFinished, attempt=1),
        await _round(plan, 4, 1),
    ]
    shutil.rmtree(tmp_path / "home")
    revised = [*steps, _step(plan_id, 5, StrategyRevisionRequested, revision=1, reason="x")]
    await boxes(tmp_path, plan_id, memory=False).check_kept(revised)
    assert not (tmp_path / "home").exists()  # nothing made again for revision 1
    lost = plan.store.manifest(steps[2].inputs["repo"])
    digest = next(e.sha256 for e in lost if e.path == "only-r0.py")
    gone = [
        found for found in (tmp_path / "store").rglob(digest[2:]) if found.parent.name == digest[:2]
    ]
    assert gone
    for found in gone:
        found.unlink()
    with pytest.raises(ResumeError, match=f"cannot make it again: object {digest} is missing"):
        await boxes(tmp_path, plan_id, memory=False).check_kept(steps)
