"""Acceptance criteria with identity, and the evidence bound to them (seed 003).

A plan plays the seed's *task*. Each of its acceptance criteria has a stable UUID, an
alias ``AC<ordinal>``, a 1-based ordinal and its text: the criteria the graph declares,
in order, or — when it declares none — one per required validation that applies. The
roster of a plan is registered when the plan starts, so that a validator outside the
plan can pull it by the plan's id alone.

Evidence is bound to a criterion by a *binding*: ``(evidence atom id, criterion id,
binding type)``, unique, so binding the same evidence again changes nothing. A validator's
attestation writes one ``coverage`` binding per criterion with the atom id
``validator:<validatorId>:<planId>``; a rejection writes nothing (rejection is the
absence of a binding). A plan is applied only when every one of its criteria is covered.

An outside validator proves who it is with a *credential*: a secret issued to it by
``spawn.validator`` (bound to the one plan it reviews) or registered for it by a person
(``gategraph validator register``). A store keeps only each credential's digest
(:func:`credential_digest`), so reading it never gives a credential that can be used.
It also keeps each validator's latest verdict on a plan (an attestation or a rejection:
a rejection stands until that validator attests) and the verdicts it refused.

Two stores keep them: a :class:`~gategraph.runtime.Catalog` (in its SQLite file, shared
by every process that opens it) and :class:`MemoryEvidence` (a plan run without one).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from typing import TYPE_CHECKING, Final, Literal, Protocol

import msgspec
from gategraph.runtime._data._models import ValidationMode

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from gategraph.runtime._base._protocols import Applicable

__all__ = [
    "COVERAGE",
    "BindingStatus",
    "Coverage",
    "EvidenceStore",
    "MemoryEvidence",
    "PlanCriterion",
    "PlanRoster",
    "Refusal",
    "Verdicts",
    "atom_id",
    "binding_id",
    "credential_digest",
    "credential_matches",
    "new_credential",
]

_REQUIRED: Final = ValidationMode.REQUIRED.value

COVERAGE: Final = "coverage"
"""The binding type a validator's attestation writes, one per criterion."""

BindingStatus = Literal["satisfied", "unsatisfied"]
"""Whether a criterion has a coverage binding."""

# Ids are name-based: the same plan always has the same ids, in every process, without
# a lookup. The plan's part is hashed once; the ordinal fills the last 48 bits. The
# version nibble says 8 (RFC 9562's custom layout), the variant bits are RFC 4122's.
_ID_SALT: Final = b"gategraph acceptance criterion\x00"


_CREDENTIAL_SALT: Final = b"gategraph validator credential\x00"
_CREDENTIAL_PREFIX: Final = "ggv1_"


def new_credential() -> str:
    """A new validator credential: 256 random bits, printable."""
    return _CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def credential_digest(credential: str) -> str:
    """What a store keeps of ``credential``: its salted SHA-256. A credential is 256
    random bits, so a fast hash is enough: nothing can be guessed from the digest."""
    return hashlib.sha256(_CREDENTIAL_SALT + credential.encode()).hexdigest()


def credential_matches(credential: str, digests: Sequence[str]) -> bool:
    """Whether ``credential`` is one of those ``digests`` name, compared in constant time
    (every digest is compared, found or not)."""
    given = credential_digest(credential).encode()
    found = False
    for digest in digests:
        found |= hmac.compare_digest(given, digest.encode())
    return found


class Refusal(msgspec.Struct, frozen=True, kw_only=True):
    """A verdict a validator tool refused for want of a valid credential."""

    validator_id: str
    """The id the refused envelope was signed with."""
    reason: str
    """Why it was refused, in one line."""
    at: float
    """When (seconds since the epoch)."""


class Verdicts(msgspec.Struct, frozen=True, kw_only=True):
    """Each outside validator's latest verdict on a plan."""

    latest: dict[str, Literal["attest", "reject"]]
    """Validator id → its latest verdict (since the moment asked about)."""

    @property
    def rejecting(self) -> list[str]:
        """The validators whose latest verdict is a rejection, sorted: their rejections
        stand."""
        return sorted(v for v, kind in self.latest.items() if kind == "reject")


def atom_id(validator_id: str, plan_id: str) -> str:
    """The evidence atom of ``validator_id``'s attestation of plan ``plan_id``."""
    return f"validator:{validator_id}:{plan_id}"


class PlanCriterion(msgspec.Struct, frozen=True, kw_only=True):
    """One acceptance criterion of a plan, as a validator sees it."""

    id: str
    """Its UUID: stable for the plan, the same in every process."""
    alias: str
    """``AC<ordinal>``."""
    ordinal: int
    """Its place in the plan's roster, from 1."""
    text: str
    """What must hold."""
    key: str
    """The graph's own name for it: a declared criterion's id, or the node (or
    attachment) id of the required validation it stands for."""
    validations: tuple[str, ...] = ()
    """The applicable validations (node and attachment ids) bound to it."""


class DeclaredCriterion(Protocol):
    """An acceptance criterion as a plan graph declares it (``_graph.AcceptanceCriterion``)."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...


class DeclaresCriteria(Protocol):
    """What a roster reads of a plan graph: its declared criteria. A protocol here, so that
    evidence, below the graph, does not import it."""

    @property
    def acceptance(self) -> Sequence[DeclaredCriterion]: ...


class PlanRoster:
    """The acceptance criteria of plan ``plan_id`` on ``graph`` with the validations
    ``applicable`` to it, worked out on first use (a plan of 100,000 validations that
    declares no criterion has 100,000, and most plans never list them)."""

    def __init__(
        self, plan_id: str, graph: DeclaresCriteria, applicable: Sequence[Applicable]
    ) -> None:
        self.plan_id = plan_id
        self._graph = graph
        self._applicable = applicable
        digest = hashlib.sha1(_ID_SALT + plan_id.encode(), usedforsecurity=False).hexdigest()
        variant = "89ab"[int(digest[16], 16) & 3]
        self._prefix = f"{digest[:8]}-{digest[8:12]}-8{digest[13:16]}-{variant}{digest[17:20]}-"
        self._criteria: list[PlanCriterion] | None = None

    @property
    def id_prefix(self) -> str:
        """What every criterion's UUID of this plan starts with (then 12 hex digits)."""
        return self._prefix

    def id_of(self, ordinal: int) -> str:
        """The UUID of the criterion at ``ordinal`` (from 1)."""
        return f"{self._prefix}{ordinal:012x}"

    def keys(self) -> Iterator[tuple[str, Sequence[Applicable]]]:
        """Each criterion's key with the required validations bound to it, in order."""
        required = [a for a in self._applicable if a.mode == _REQUIRED]
        if self._graph.acceptance:
            for criterion in self._graph.acceptance:
                yield criterion.id, [a for a in required if criterion.id in a.criteria]
        else:
            for a in required:
                yield a.id, (a,)

    @property
    def criteria(self) -> list[PlanCriterion]:
        """Every criterion, in order (empty when nothing gates the plan)."""
        if self._criteria is None:
            texts = {c.id: c.text for c in self._graph.acceptance}
            self._criteria = [
                PlanCriterion(
                    id=self.id_of(ordinal),
                    alias=f"AC{ordinal}",
                    ordinal=ordinal,
                    text=texts.get(key) or _implicit_text(bound),
                    key=key,
                    validations=tuple(a.id for a in bound),
                )
                for ordinal, (key, bound) in enumerate(self.keys(), start=1)
            ]
        return self._criteria

    def __len__(self) -> int:
        if self._criteria is not None:
            return len(self._criteria)
        if self._graph.acceptance:
            return len(self._graph.acceptance)
        return sum(a.mode == _REQUIRED for a in self._applicable)


def _implicit_text(bound: Sequence[Applicable]) -> str:
    one = bound[0]
    where = f"attachment {one.attachment_id}" if one.attachment_id else f"node {one.id}"
    return f"The required validation {one.validation!r} passes ({where})."


class Coverage(msgspec.Struct, frozen=True, kw_only=True):
    """Who covers which criteria of a plan."""

    by: dict[str, frozenset[str]]
    """Criterion id → the validators (``validator-...``) with a coverage binding for it."""
    complete: frozenset[str]
    """Validators that covered every criterion of the plan in one attestation."""

    def validators_of(self, criterion_id: str) -> frozenset[str]:
        """The validators covering ``criterion_id``."""
        return self.complete | self.by.get(criterion_id, frozenset())


class EvidenceStore(Protocol):
    """Where rosters and bindings are kept: a catalog's, or one in memory."""

    def register_roster(self, roster: PlanRoster) -> None:
        """Keep ``roster`` (its plan's criteria) for validators that pull it by plan id.
        Registering the same roster again changes nothing; another roster under the same
        plan id (a new plan reusing an id) replaces it, and its bindings go."""

    def roster(self, plan_id: str) -> list[PlanCriterion] | None:
        """The criteria of plan ``plan_id`` in order, or None for a plan never registered."""

    def bind_coverage(
        self, plan_id: str, validator_id: str, criteria: Sequence[str] | None = None
    ) -> None:
        """Write one coverage binding per criterion id for ``validator_id``'s attestation
        (None: every criterion of the plan's roster), in one transaction; binding again
        changes nothing but when it happened (see :func:`binding_id`)."""

    def coverage(self, plan_id: str, *, since: float = 0.0) -> Coverage:
        """The coverage bindings of plan ``plan_id`` written at ``since`` (seconds since
        the epoch) or after."""

    def add_credential(self, validator_id: str, digest: str, plan_id: str | None = None) -> None:
        """Keep the digest of a credential of ``validator_id``: good for plan ``plan_id``
        only (a spawned validator's), or for every plan (None: a person registered it)."""

    def credentials(self, validator_id: str, plan_id: str) -> list[str]:
        """The digests of the credentials ``validator_id`` may sign plan ``plan_id`` with."""

    def revoke_credentials(self, validator_id: str, digest: str | None = None) -> int:
        """Forget ``validator_id``'s credential of ``digest`` (None: all of them); how
        many were forgotten."""

    def record_verdict(
        self, plan_id: str, validator_id: str, verdict: Literal["attest", "reject"]
    ) -> None:
        """``validator_id``'s verdict on plan ``plan_id``, now: it replaces the one before."""

    def verdicts(self, plan_id: str, *, since: float = 0.0) -> Verdicts:
        """Each validator's latest verdict on plan ``plan_id``, given at ``since`` or after."""

    def record_refusal(self, plan_id: str, validator_id: str, reason: str) -> None:
        """Keep that a verdict of ``validator_id`` on plan ``plan_id`` was refused."""

    def refusals(self, plan_id: str, *, since: float = 0.0) -> list[Refusal]:
        """The verdicts on plan ``plan_id`` refused at ``since`` or after, oldest first."""


def binding_id(atom: str, criterion_id: str) -> str:
    """A binding's id: named by what it binds, so binding again gives the same id."""
    return hashlib.sha1(
        f"{atom}\x00{criterion_id}\x00{COVERAGE}".encode(), usedforsecurity=False
    ).hexdigest()[:32]


class MemoryEvidence:
    """An evidence store in memory, for plans run without a catalog. A complete attestation
    is kept as one entry, not one per criterion: the same coverage, at any size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rosters: dict[str, PlanRoster] = {}
        self._bindings: dict[str, dict[tuple[str, str], float]] = {}
        self._complete: dict[str, dict[str, float]] = {}
        self._credentials: list[tuple[str, str, str | None]] = []
        self._verdicts: dict[str, dict[str, tuple[Literal["attest", "reject"], float]]] = {}
        self._refusals: dict[str, list[Refusal]] = {}

    def register_roster(self, roster: PlanRoster) -> None:
        plan_id = roster.plan_id
        with self._lock:
            kept = self._rosters.get(plan_id)
            if kept is not None and [k for k, _ in kept.keys()] == [k for k, _ in roster.keys()]:
                return  # the same plan again (resumed)
            # A new plan under an id used before: what was bound to the old one is not its.
            self._rosters[plan_id] = roster
            self._bindings.pop(plan_id, None)
            self._complete.pop(plan_id, None)
            self._verdicts.pop(plan_id, None)
            self._refusals.pop(plan_id, None)

    def roster(self, plan_id: str) -> list[PlanCriterion] | None:
        with self._lock:
            roster = self._rosters.get(plan_id)
        return None if roster is None else roster.criteria

    def bind_coverage(
        self, plan_id: str, validator_id: str, criteria: Sequence[str] | None = None
    ) -> None:
        now = time.time()
        with self._lock:
            if criteria is None:
                self._complete.setdefault(plan_id, {})[validator_id] = now
            else:
                kept = self._bindings.setdefault(plan_id, {})
                for criterion in criteria:
                    kept[criterion, validator_id] = now

    def coverage(self, plan_id: str, *, since: float = 0.0) -> Coverage:
        with self._lock:
            complete = frozenset(
                v for v, at in self._complete.get(plan_id, {}).items() if at >= since
            )
            by: dict[str, set[str]] = {}
            for (criterion, validator), at in self._bindings.get(plan_id, {}).items():
                if at >= since:
                    by.setdefault(criterion, set()).add(validator)
        return Coverage(by={c: frozenset(v) for c, v in by.items()}, complete=complete)

    def add_credential(self, validator_id: str, digest: str, plan_id: str | None = None) -> None:
        with self._lock:
            self._credentials.append((validator_id, digest, plan_id))

    def credentials(self, validator_id: str, plan_id: str) -> list[str]:
        with self._lock:
            return [
                digest
                for who, digest, plan in self._credentials
                if who == validator_id and plan in (None, plan_id)
            ]

    def revoke_credentials(self, validator_id: str, digest: str | None = None) -> int:
        with self._lock:
            kept = [
                c
                for c in self._credentials
                if c[0] != validator_id or (digest is not None and c[1] != digest)
            ]
            gone = len(self._credentials) - len(kept)
            self._credentials = kept
        return gone

    def record_verdict(
        self, plan_id: str, validator_id: str, verdict: Literal["attest", "reject"]
    ) -> None:
        with self._lock:
            self._verdicts.setdefault(plan_id, {})[validator_id] = (verdict, time.time())

    def verdicts(self, plan_id: str, *, since: float = 0.0) -> Verdicts:
        with self._lock:
            given = self._verdicts.get(plan_id, {})
            return Verdicts(latest={v: kind for v, (kind, at) in given.items() if at >= since})

    def record_refusal(self, plan_id: str, validator_id: str, reason: str) -> None:
        refusal = Refusal(validator_id=validator_id, reason=reason, at=time.time())
        with self._lock:
            self._refusals.setdefault(plan_id, []).append(refusal)

    def refusals(self, plan_id: str, *, since: float = 0.0) -> list[Refusal]:
        with self._lock:
            return [r for r in self._refusals.get(plan_id, []) if r.at >= since]
