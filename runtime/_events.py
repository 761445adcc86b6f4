"""Events: every decision of a plan, appended before the transition it causes.

Events are msgspec Structs in one tagged union (the ``type`` field), so a log encodes and
decodes them without a schema lookup. Each carries a ULID ``id``, the ``plan_id``, a
per-plan sequence number ``seq`` (assigned by the log on append), a timestamp ``at``
(seconds since the epoch) and the ``causation_id`` of the event that caused it.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._results import ValidationResult

__all__ = [
    "ArtifactProduced",
    "Event",
    "EventBase",
    "NodeCompleted",
    "NodeSkipped",
    "NodeStarted",
    "RunFinished",
    "RunStarted",
    "ValidationCompleted",
    "ValidationStarted",
    "decode_event",
    "encode_event",
]


class EventBase(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, gc=False):
    """Fields every event has.

    ``gc=False``: an event refers to no other event, and a plan keeps hundreds of
    thousands of them; untracked structs are smaller and cheaper to make.
    """

    id: str
    """A ULID."""
    plan_id: str
    """The plan this event belongs to."""
    seq: int = 0
    """Position in the plan's log, from 1; assigned when the event is appended."""
    at: float
    """When it happened, in seconds since the epoch."""
    causation_id: str | None = None
    """The id of the event that caused this one."""


class RunStarted(EventBase, tag="run_started", kw_only=True, frozen=True, gc=False):
    """A run of a plan graph's nodes began."""

    graph: str
    """The plan graph's name."""
    project: str | None = None
    """The project the plan runs under."""
    attempt: int = 1
    """Which run of the graph this is within the plan (revalidations count up)."""


class RunFinished(EventBase, tag="run_finished", kw_only=True, frozen=True, gc=False):
    """A run of a plan graph's nodes ended."""

    status: str
    """``completed`` (every node ran) or ``failed`` (a node failed or was skipped)."""
    duration: float
    """Seconds the run took."""


class NodeStarted(EventBase, tag="node_started", kw_only=True, frozen=True, gc=False):
    """A node of the graph started."""

    node: str
    """The node id."""
    attempt: int = 1
    """1 for the first run of this node in the plan, then 2, 3, ..."""


class NodeCompleted(EventBase, tag="node_completed", kw_only=True, frozen=True, gc=False):
    """A node finished, with its output or its error."""

    node: str
    attempt: int = 1
    ok: bool
    """Whether the node succeeded."""
    duration: float
    """Seconds the node took."""
    output: Any = None
    """The node's output (JSON-compatible), if it succeeded."""
    error: str | None = None
    """What went wrong, if it did not."""


class NodeSkipped(EventBase, tag="node_skipped", kw_only=True, frozen=True, gc=False):
    """A node did not run because a node it needs failed or was skipped."""

    node: str
    reason: str


class ValidationStarted(EventBase, tag="validation_started", kw_only=True, frozen=True, gc=False):
    """A validation call started."""

    node: str
    """The validation node (or the attachment's pseudo-node)."""
    validation: str
    """The validation's name."""
    attachment_id: str | None = None
    """The attachment that made it apply, if any."""
    attempt: int = 1


class ValidationCompleted(
    EventBase, tag="validation_completed", kw_only=True, frozen=True, gc=False
):
    """A validation call finished, with the full result."""

    node: str
    validation: str
    attachment_id: str | None = None
    attempt: int = 1
    result: ValidationResult
    """The structured result, exactly as recorded for replay."""
    duration: float
    """Seconds the call took."""


class ArtifactProduced(EventBase, tag="artifact_produced", kw_only=True, frozen=True, gc=False):
    """A node produced an artifact to be validated (seed 002 §11)."""

    node: str
    artifact: Any
    """The artifact (JSON-compatible)."""


Event = (
    RunStarted
    | RunFinished
    | NodeStarted
    | NodeCompleted
    | NodeSkipped
    | ValidationStarted
    | ValidationCompleted
    | ArtifactProduced
)
"""Any event."""

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(Event)


def encode_event(event: EventBase) -> bytes:
    """Encode an event as JSON bytes."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode JSON produced by :func:`encode_event`."""
    return _decoder.decode(data)
