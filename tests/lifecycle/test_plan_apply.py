"""Apply on its own: the changesets of a round that passed, committed once; refused, with
nothing changed, when the plan was withdrawn, the sandboxes changed after they were
validated, or the real folder changed under the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _plan_parts import context_for, folder, parts_graph, tags
from gategraph.runtime import ApplyConflictError, DirectoryResource
from gategraph.runtime._lifecycle._plan_apply import PlanApply

CHECK = [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}]


async def worked(tmp_path: Path) -> tuple[Any, Path, dict[str, str] | None]:
    """A plan whose work wrote b.txt in its sandbox, and what its round validated."""
    root = folder(tmp_path)
    context = await context_for(parts_graph(root, CHECK), tmp_path)
    (await context.boxes.views())["repo"].joinpath("b.txt").write_text("new\n")
    return context, root, await context.boxes.inputs(pin=True)


@pytest.mark.anyio
async def test_apply_commits_what_was_validated(tmp_path: Path) -> None:
    context, root, validated = await worked(tmp_path)
    applier = PlanApply(context, context.boxes.resources)
    applied, message, changes = await applier.apply(validated)
    assert (applied, message) == (True, "applied") and set(changes) == {"repo"}
    assert (root / "b.txt").read_text() == "new\n"
    assert await tags(context) == ["apply_started", "apply_completed"]
    # The log holds the apply now: the folder's own markers of it are released.
    assert not context.boxes.resources["repo"].applied(context.plan_id)


@pytest.mark.anyio
async def test_a_withdrawn_plan_is_not_applied(tmp_path: Path) -> None:
    context, root, validated = await worked(tmp_path)
    context.withdrawal = "the program left"
    applied, message, _ = await PlanApply(context, context.boxes.resources).apply(validated)
    assert not applied and message == "withdrawn before Apply: the program left"
    assert not (root / "b.txt").exists() and await tags(context) == []


@pytest.mark.anyio
async def test_a_sandbox_written_after_it_was_validated_is_not_applied(tmp_path: Path) -> None:
    context, root, validated = await worked(tmp_path)
    (await context.boxes.views())["repo"].joinpath("c.txt").write_text("sneaked in\n")
    applied, message, _ = await PlanApply(context, context.boxes.resources).apply(validated)
    assert not applied and "changed while they were being validated" in message
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"] and await tags(context) == []


@pytest.mark.anyio
async def test_a_folder_changed_under_the_plan_refuses_and_changes_nothing(
    tmp_path: Path,
) -> None:
    context, root, validated = await worked(tmp_path)
    (await context.boxes.views())["repo"].joinpath("a.txt").write_text("the plan's\n")
    validated = await context.boxes.inputs(pin=True)
    (root / "a.txt").write_text("someone else's\n")
    applied, message, _ = await PlanApply(context, context.boxes.resources).apply(validated)
    assert not applied and message.startswith("not applied: ")
    assert (root / "a.txt").read_text() == "someone else's\n" and not (root / "b.txt").exists()
    assert await tags(context) == ["apply_started"]  # the plan fails next, saying why


class Kept(DirectoryResource):
    def release(self, *, plan_id: str) -> None:
        raise ApplyConflictError("its markers could not be removed", resource=self.name)


@pytest.mark.anyio
async def test_markers_that_cannot_go_warn_and_the_plan_stays_applied(tmp_path: Path) -> None:
    context, root, validated = await worked(tmp_path)
    resources = {"repo": Kept("repo", root)}
    with pytest.warns(RuntimeWarning, match="applied, but its markers could not be removed"):
        applied, _, _ = await PlanApply(context, resources).apply(validated)
    assert applied and (root / "b.txt").exists()
