"""The sandboxes of one plan: a private copy of each resource per strategy revision.

Opened for a (revised) strategy, reopened when a resumed plan goes live, snapshotted into
the content store for each validation round, and discarded when the plan ends (a paused,
crashed or cancelled plan keeps them: it continues on them). Folders are
``HOME/sandboxes/PLAN/rN/NAME``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import uuid
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import ResumeError
from gategraph.runtime._data._events import (
    ApplyCompleted,
    ArtifactValidationStarted,
    StrategyProduced,
    StrategyRevisionRequested,
    WorkFinished,
)
from gategraph.runtime._storage._resources import (
    DirectoryResource,
    DirectorySandbox,
    Exclusion,
    MemorySandbox,
)
from gategraph.runtime._storage._store import StoreError, folder_digest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from pathlib import Path

    from gategraph.runtime._data._events import Event
    from gategraph.runtime._storage._resources import Resource, Sandbox
    from gategraph.runtime._storage._store import ContentStore

__all__ = ["PlanSandboxes", "changed_files"]

_EXCLUSION_FILE = "exclusion.json"
"""The one text of the manifest that keeps a folder sandbox's exclusion in the store."""


class _Kept(msgspec.Struct, frozen=True):
    """What the content store keeps of a folder sandbox that is gone: a round's inputs,
    what it started from and what it left out (manifest digests, from the round's event),
    enough to make it again."""

    inputs: str
    base: str
    exclusion: str


def changed_files(
    store: ContentStore,
    folders: Iterable[str],
    bases: Mapping[str, str] | None,
    inputs: Mapping[str, str] | None,
) -> dict[str, frozenset[str]]:
    """The files a round's change added or modified in each of the folder resources
    ``folders``: the difference between the manifest its sandbox started from (``bases``)
    and the one the round validated (``inputs``), both in the round's event, so a replay
    that runs the round again gets the same answer. A folder whose manifests ``store``
    does not hold (an in-memory store keeps none, a swept one lost them) is left out: its
    validations judge it whole."""
    found: dict[str, frozenset[str]] = {}
    if not store.keeps_copies or not bases or not inputs:
        return found
    for name in folders:
        if name not in bases or name not in inputs:
            continue
        try:
            before = {e.path: (e.kind, e.sha256) for e in store.manifest(bases[name])}
            now = store.manifest(inputs[name])
        except StoreError:
            continue
        found[name] = frozenset(e.path for e in now if before.get(e.path) != (e.kind, e.sha256))
    return found


class PlanSandboxes:
    """The sandboxes of plan ``plan_id`` on ``resources``, below the folder ``home()``
    (a callable: the folder is made only when a sandbox needs it); each round's inputs
    go to ``store``."""

    def __init__(
        self,
        resources: Mapping[str, Resource],
        *,
        plan_id: str,
        home: Callable[[], Path],
        store: ContentStore,
    ) -> None:
        self.resources = resources
        self.plan_id = plan_id
        self._home = home
        self.store = store
        self.held: dict[str, Sandbox] = {}
        """The open sandboxes, by resource."""
        self.revision = 0
        """The strategy revision they are for."""
        self.ready = False
        """Whether every resource's sandbox is open."""
        self.resumed = False
        """Whether the plan resumes: its sandboxes are reopened, not made afresh."""
        self.work_from_log = False
        """Whether the log shows work done in them (resuming): gone, they cannot be made
        again."""
        self.started: dict[str, str | None] = {}
        """What each sandbox started from, by resource: its base's digest in the store."""
        self.copies: dict[str, str | None] = {}
        """Each open folder sandbox's own id (kept beside it; a new one for each copy made,
        None for one made before they were kept): which copy a step was done in."""
        self.exclusions: dict[str, str] = {}
        """What each folder sandbox leaves out, by resource: the digest of the manifest
        that keeps its rules in the store."""

    def folder(self, name: str, revision: int | None = None) -> Path:
        number = self.revision if revision is None else revision
        return self._home() / "sandboxes" / self.plan_id / f"r{number}" / name

    async def open(self, revision: int, *, replaying: bool) -> None:
        """Fresh sandboxes for strategy revision ``revision``; while ``replaying`` a log,
        none (reopened when the plan goes live, if it needs them)."""
        self.revision = revision
        self.work_from_log = False
        self.ready = False
        if replaying:
            self.held = {}  # reopened when the plan goes live, if it needs them
            return
        await anyio.to_thread.run_sync(self.discard, False)
        await self.ensure()

    async def ensure(self, *, fresh: bool = False) -> None:
        """Open (or, resuming, reopen) the current revision's sandboxes. ``fresh`` throws
        away what a crashed first Execute left in them: Execute starts on a clean copy."""
        if self.ready:
            return
        self.exclusions.clear()
        self.copies.clear()
        for name, resource in self.resources.items():
            folder = self.folder(name)
            sandbox: Sandbox | None = None
            if self.resumed and not fresh:
                reopen = getattr(resource, "reopen_sandbox", None)
                if reopen is not None:
                    sandbox = await anyio.to_thread.run_sync(reopen, folder)
                if sandbox is None and self.work_from_log:
                    raise ResumeError(
                        f"cannot resume plan {self.plan_id}: the sandbox of resource {name!r} "
                        f"(revision {self.revision}) is gone, and the log shows work done in it"
                        + (
                            "; a memory resource's sandbox lives only as long as its process"
                            if resource.kind == "memory"
                            else ""
                        )
                    )
            if sandbox is None:
                # Nothing worked in it yet, or only a crashed first Execute: start clean.
                stale = getattr(resource, "reopen_sandbox", None)
                old = await anyio.to_thread.run_sync(stale, folder) if stale else None
                if old is not None:
                    await anyio.to_thread.run_sync(old.discard)
                await anyio.to_thread.run_sync(
                    functools.partial(shutil.rmtree, folder, ignore_errors=True)
                )
                sandbox = await anyio.to_thread.run_sync(resource.open_sandbox, folder)
                reopened = False
            else:
                reopened = True
            if isinstance(sandbox, DirectorySandbox):
                marker = folder.with_name(f"{name}.copy")
                self.copies[name] = await anyio.to_thread.run_sync(_copy_id, marker, not reopened)
            self.held[name] = sandbox
            self.started[name] = await anyio.to_thread.run_sync(self._base, name, sandbox, reopened)
        self.ready = True
        await anyio.to_thread.run_sync(self._drop_other_revisions)

    def _made_again(
        self, resource: DirectoryResource, kept: _Kept, revision: int
    ) -> DirectorySandbox:
        """The sandbox of ``resource`` (strategy revision ``revision``) made again from what
        the store keeps of it, in its folder (where an earlier attempt may have left part
        of it)."""
        folder = self.folder(resource.name, revision)
        shutil.rmtree(folder, ignore_errors=True)
        folder.with_name(f"{resource.name}.base").unlink(missing_ok=True)
        base = {e.path: (e.sha256, e.size) for e in self.store.manifest(kept.base)}
        rules = self.store.texts(kept.exclusion)[_EXCLUSION_FILE]
        exclusion = Exclusion.decode(rules.encode("utf-8", "surrogatepass"))
        sandbox = resource.remake_sandbox(
            folder, functools.partial(self.store.restore, kept.inputs), base, exclusion
        )
        _copy_id(folder.with_name(f"{resource.name}.copy"), True)  # another copy than before
        folder.with_name(f"{resource.name}.manifest").write_text(kept.base + "\n", encoding="ascii")
        return sandbox

    def _drop_other_revisions(self) -> None:
        plan_dir = self._home() / "sandboxes" / self.plan_id
        keep = f"r{self.revision}"
        if plan_dir.is_dir():
            for entry in plan_dir.iterdir():
                if entry.name != keep:
                    shutil.rmtree(entry, ignore_errors=True)

    def discard(self, everything: bool) -> None:
        for sandbox in self.held.values():
            sandbox.discard()
        self.held.clear()
        self.ready = False
        if everything:
            plan_dir = self._home() / "sandboxes" / self.plan_id
            shutil.rmtree(plan_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                plan_dir.parent.rmdir()  # only when no other plan's sandboxes are there

    async def views(self) -> dict[str, Any]:
        await self.ensure()
        return {name: sandbox.view for name, sandbox in self.held.items()}

    async def check_kept(self, steps: Sequence[Event]) -> None:
        """Refuse, before anything is appended, a resume whose work the log records in
        sandboxes that are gone: going on would validate or apply something else."""
        revision = sum(isinstance(e, StrategyRevisionRequested) for e in steps)
        start = max((i for i, e in enumerate(steps) if isinstance(e, StrategyProduced)), default=0)
        since = steps[start:]
        if any(isinstance(e, ApplyCompleted | StrategyRevisionRequested) for e in since) or not any(
            isinstance(e, WorkFinished) for e in since
        ):
            # Nothing worked in them yet (a revision asked for after the last strategy gets
            # fresh ones), or nothing is left to do with them.
            return
        # The last round since the work, if no work followed it: what the store keeps of
        # the sandboxes then is what they hold now.
        last: ArtifactValidationStarted | None = None
        work: WorkFinished | None = None
        for event in since:
            if isinstance(event, ArtifactValidationStarted):
                last = event if event.revision == revision else None
            elif isinstance(event, WorkFinished):
                last, work = None, event
        for name, resource in self.resources.items():
            folder = self.folder(name, revision)
            reopen = getattr(resource, "reopen_sandbox", None)
            found = await anyio.to_thread.run_sync(reopen, folder) if reopen is not None else None
            # A copy here may be older than the plan (another host went on with it since).
            mine = await anyio.to_thread.run_sync(_copy_id, folder.with_name(f"{name}.copy"), False)
            old = await anyio.to_thread.run_sync(_older, name, found, mine, last, work)
            if found is not None and old is None:
                continue
            kept, lost = await anyio.to_thread.run_sync(self._kept, name, resource, last, revision)
            if kept is not None and isinstance(resource, DirectoryResource):
                # Made again here and now, before anything is appended: a store that lost
                # part of it refuses the resume, and the plan reopens it as any other.
                try:
                    await anyio.to_thread.run_sync(self._made_again, resource, kept, revision)
                    continue
                except StoreError as exc:
                    lost = f"no sandbox at {folder}, and the content store cannot make it again: {exc.reason}"
            raise ResumeError(
                f"cannot resume plan {self.plan_id}: the log shows work done in the "
                f"sandbox of resource {name!r} (revision {revision}), and "
                + (f"the copy here is older ({old}; {lost})" if old else f"it is gone ({lost})")
                + "; nothing was changed"
            )

    def _kept(
        self, name: str, resource: Resource, last: ArtifactValidationStarted | None, revision: int
    ) -> tuple[_Kept | None, str]:
        """What the store keeps of the gone sandbox of ``name`` (strategy revision
        ``revision``) to make it again from the round ``last``, or None and why it cannot
        be made again."""
        if resource.kind == "memory":
            return None, "a memory resource's sandbox lives only as long as its process"
        lost = f"no sandbox at {self.folder(name, revision)}"
        if not isinstance(resource, DirectoryResource):
            return None, lost
        if not self.store.keeps_copies:
            return None, f"{lost}, and the content store keeps no copies to make it again"
        if last is None:
            return None, f"{lost}, and the work done since its last validation round was only there"
        digests = [
            (last.inputs or {}).get(name),
            (last.bases or {}).get(name),
            (last.exclusions or {}).get(name),
        ]
        inputs, base, exclusion = digests
        if inputs is None or base is None or exclusion is None:
            return None, f"{lost}, and its last round did not record how to make it again"
        try:
            for digest in (inputs, base):
                self.store.manifest(digest)
            if _EXCLUSION_FILE not in self.store.texts(exclusion):
                raise KeyError(_EXCLUSION_FILE)
        except (StoreError, KeyError):
            return None, f"{lost}, and the content store no longer holds its last round's inputs"
        return _Kept(inputs, base, exclusion), ""

    async def inputs(self, *, pin: bool) -> dict[str, str] | None:
        """What each sandbox holds now, by resource: the digest of its manifest in the
        store (``pin``: kept for this plan), or None before any sandbox is open."""
        if not self.ready:
            return None
        return await anyio.to_thread.run_sync(self._snapshot, pin)

    def _snapshot(self, pin: bool) -> dict[str, str]:
        try:
            return self._snapshots(self.plan_id if pin else None)
        except OSError as exc:
            raise StoreError(
                self.store.where,
                f"cannot keep the round's inputs: {exc.strerror or exc}"
                + (f": {exc.filename}" if exc.filename else ""),
            ) from None

    def _snapshots(self, plan: str | None) -> dict[str, str]:
        return {name: self._snapshot_of(self.held[name], plan) for name in sorted(self.held)}

    def _snapshot_of(self, sandbox: Sandbox, plan: str | None) -> str:
        if isinstance(sandbox, DirectorySandbox):
            # An in-memory store keeps no copy of a folder (it could be any size): the
            # digest alone, which is all Apply's check needs.
            return (
                self.store.snapshot_folder(sandbox.root, plan_id=plan, exclusion=sandbox.exclusion)
                if self.store.keeps_copies
                else folder_digest(sandbox.root, sandbox.exclusion)
            )
        if isinstance(sandbox, MemorySandbox):
            # A copy first: a program may change its sandbox while the round runs.
            files = dict(list(sandbox.view.items()))
            return self.store.snapshot_texts(files, plan_id=plan)
        # A resource of its own kind: its changes stand for it (not rebuildable).
        changes = [[c.path, c.sha256] for c in sandbox.changeset().changes]
        return f"changes:{hashlib.sha256(msgspec.json.encode(changes)).hexdigest()}"

    def _base(self, name: str, sandbox: Sandbox, reopened: bool) -> str | None:
        """What ``sandbox`` started from, kept in the store (the real resource as the
        sandbox copied it, before any work): with a round's inputs, the change that round
        validated, which Apply commits. Written beside the sandbox too, so a reopened one
        (a resumed plan) knows it. None where the store keeps no copies (in memory)."""
        if not self.store.keeps_copies or not isinstance(sandbox, DirectorySandbox | MemorySandbox):
            return None
        if isinstance(sandbox, DirectorySandbox) and sandbox.exclusion is not None:
            rules = sandbox.exclusion.encode().decode("utf-8", "surrogatepass")
            with contextlib.suppress(StoreError, OSError):
                self.exclusions[name] = self.store.snapshot_texts(
                    {_EXCLUSION_FILE: rules}, plan_id=self.plan_id
                )
        marker = self.folder(name).with_name(f"{name}.manifest")
        if reopened:
            try:
                return marker.read_text(encoding="ascii").strip() or None
            except OSError:
                return None  # opened before bases were kept
        try:
            digest = self._snapshot_of(sandbox, self.plan_id)
            if isinstance(sandbox, DirectorySandbox):
                marker.write_text(digest + "\n", encoding="ascii")
        except (OSError, StoreError):
            return None  # a base is for looking at a plan: never a reason to stop one
        return digest

    def changed(
        self, bases: Mapping[str, str] | None, inputs: Mapping[str, str] | None
    ) -> dict[str, frozenset[str]]:
        """The files a round's change added or modified in each folder resource, from its
        manifests in the store: what the sandbox started from (``bases``) and what the
        round validates (``inputs``), both in its events, so the answer is the same
        whenever it is asked. With an in-memory store, which keeps no manifests, each open
        sandbox's changeset against what it started from. A folder neither tells is left
        out: its validations judge it whole."""
        folders = [n for n, r in self.resources.items() if r.kind == "directory"]
        if self.store.keeps_copies:
            return changed_files(self.store, folders, bases, inputs)
        # An in-memory store keeps no manifests: each open sandbox's own diff against what
        # it started from (what Apply would write), read now.
        return {
            name: frozenset(c.path for c in sandbox.changeset().changes if c.sha256 is not None)
            for name, sandbox in self.held.items()
            if name in folders and isinstance(sandbox, DirectorySandbox)
        }

    def stands_for(self) -> dict[str, str]:
        """The real folder each open folder sandbox is a copy of, by the sandbox's path."""
        return {
            os.path.abspath(sandbox.root): os.fspath(resource.root)
            for name, sandbox in self.held.items()
            if isinstance(sandbox, DirectorySandbox)
            and isinstance(resource := self.resources.get(name), DirectoryResource)
        }

    def unseen(self) -> dict[str, str]:
        """For each open folder sandbox, a digest of everything in it by path, kind, size
        and time of change, what the snapshots leave out included: unchanged, nothing in
        the folder was written (a stat of each entry, no file read)."""
        found: dict[str, str] = {}
        for name, sandbox in self.held.items():
            if isinstance(sandbox, DirectorySandbox):
                found[name] = _listing_digest(os.fspath(sandbox.root))
        return found

    def bases(self) -> dict[str, str] | None:
        """What each open sandbox started from, by resource (see :meth:`_base`), or None
        when none is known."""
        found = {name: digest for name, digest in sorted(self.started.items()) if digest}
        return found or None

    def left_out(self) -> dict[str, str] | None:
        """What each open folder sandbox leaves out, by resource (see :meth:`_base`), or
        None when none is known."""
        return dict(sorted(self.exclusions.items())) or None


def _copy_id(marker: Path, fresh: bool) -> str | None:
    """The id of the copy beside ``marker``: a new one (``fresh``: a copy just made), or
    the one kept there (None for a copy made before ids were kept)."""
    if fresh:
        made = uuid.uuid4().hex
        marker.write_text(made + "\n", encoding="ascii")
        return made
    try:
        return marker.read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def _older(
    name: str,
    found: Sandbox | None,
    mine: str | None,
    last: ArtifactValidationStarted | None,
    work: WorkFinished | None,
) -> str | None:
    """Why the folder sandbox ``found`` (its copy's id: ``mine``) is older than the plan's
    log says, or None. The last work (``work``) names the copy it was done in: that copy
    is the plan's (written after its round, it is refused at Apply, as any sandbox changed
    while validated). Another copy (made again here from the store, once) must hold what
    the last round validated (``last``, when no work followed it; its content is
    compared); with work after the last round, only the copy that did it will do. A log
    that names no copy (older ones) keeps the copy here."""
    if not isinstance(found, DirectorySandbox):
        return None
    worked_in = (work.sandboxes or {}).get(name) if work is not None else None
    if worked_in is None or worked_in == mine:
        return None
    if last is None:
        return "it is not the copy the last work was done in"
    validated = (last.inputs or {}).get(name)
    if validated is None or validated.startswith("changes:"):
        return None
    if folder_digest(found.root, found.exclusion) != validated:
        return "it does not hold what the last round validated"
    return None


def _listing_digest(root: str) -> str:
    digest = hashlib.sha256()
    for folder, names, files in os.walk(root):
        names.sort()
        for name in sorted(files) + names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            relative = os.path.relpath(path, root)
            digest.update(
                f"{relative}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(
                    "utf-8", "surrogateescape"
                )
            )
    return digest.hexdigest()
