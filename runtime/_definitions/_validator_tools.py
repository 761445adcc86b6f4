"""The validator tools of seed 003: how a validator outside a plan reviews it.

``validator.ac-pull`` lists a plan's acceptance criteria with whether each is covered;
``validator.attest`` binds a validator's attestation to the criteria it covers (one
``coverage`` binding each, in one transaction); ``validator.reject`` checks a rejection
and records it as the validator's latest verdict (by default, a plan is not applied while
a rejection stands). A plan plays the seed's *task*: its id is the ``task_id``.

A validator id is only a name: an attestation or a rejection counts only with the
validator's *credential*, a secret issued to it by ``spawn.validator`` or registered for
it by a person (:func:`register_validator`, ``gategraph validator register``). Stores
keep only digests of credentials, so a plan's code that reads the catalog learns none.
A verdict without a valid credential is refused, and the refusal is kept where the plan's
resume reports it.

Each returns the seed's shapes: ``{"ok": True, ...}``, or ``{"ok": False, "code": ...,
"message": ...}`` with the seed's error codes; bad input never raises. They are built-in
tools of the catalog's namespace (a plan's node can call them), Python functions
(:func:`validator_ac_pull`, :func:`validator_attest`, :func:`validator_reject`) and tools
of ``gategraph mcp serve``.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._data._verdicts import (
    AGENT_ROLES,
    VALIDATOR_ID,
    VALIDATOR_ID_PATTERN,
    ValidatorAttestation,
    ValidatorRejection,
    parse_verdict,
)

if TYPE_CHECKING:
    from ._catalog import Catalog
    from ._evidence import EvidenceStore

__all__ = [
    "E_INVALID_INPUT",
    "E_NOT_FOUND",
    "E_VALIDATOR_AC_NOT_FOUND",
    "E_VALIDATOR_ATTESTATION_INVALID",
    "E_VALIDATOR_AUTH_CREDENTIAL",
    "E_VALIDATOR_AUTH_ROLE",
    "E_VALIDATOR_REJECTION_INVALID",
    "current_evidence",
    "register_validator",
    "revoke_validator",
    "validator_ac_pull",
    "validator_attest",
    "validator_reject",
]


E_VALIDATOR_AUTH_ROLE: Final = "E_VALIDATOR_AUTH_ROLE"
"""The caller's role may not do this (only a ``validator`` attests or rejects)."""
E_VALIDATOR_AUTH_CREDENTIAL: Final = "E_VALIDATOR_AUTH_CREDENTIAL"
"""The verdict came without its validator's credential, or with one that is not its."""
E_VALIDATOR_ATTESTATION_INVALID: Final = "E_VALIDATOR_ATTESTATION_INVALID"
E_VALIDATOR_REJECTION_INVALID: Final = "E_VALIDATOR_REJECTION_INVALID"
E_VALIDATOR_AC_NOT_FOUND: Final = "E_VALIDATOR_AC_NOT_FOUND"
"""A finding names a criterion the plan does not have (or the plan is unknown here)."""
E_INVALID_INPUT: Final = "E_INVALID_INPUT"
E_NOT_FOUND: Final = "E_NOT_FOUND"
"""No plan of that id is known to this store."""

_evidence: contextvars.ContextVar[EvidenceStore | None] = contextvars.ContextVar(
    "gategraph_evidence", default=None
)


@contextlib.contextmanager
def current_evidence(store: EvidenceStore) -> Iterator[None]:
    """Make ``store`` the evidence the validator tools use when given neither a store nor
    a project root (a plan's own nodes call them with their plan's store)."""
    token = _evidence.set(store)
    try:
        yield
    finally:
        _evidence.reset(token)


def _fail(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "code": code, "message": message}


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.reply = _fail(code, message)


@contextlib.contextmanager
def _store(
    evidence: EvidenceStore | None, project_root: str | os.PathLike[str] | None
) -> Iterator[EvidenceStore]:
    """The store a call works on: the one given, else the project's catalog, else the one
    of the plan calling, else the default catalog. A catalog file that is not there is
    never made: nothing is known of a plan there."""
    if evidence is not None:
        yield evidence
        return
    if project_root is None and (current := _evidence.get()) is not None:
        yield current
        return
    with project_catalog(project_root) as catalog:
        yield catalog


@contextlib.contextmanager
def project_catalog(project_root: str | os.PathLike[str] | None) -> Iterator[Catalog]:
    """The catalog of ``project_root`` (its ``.gategraph`` folder), else the default one;
    in the database that folder's settings name, when they do (see
    :func:`configured_database`); refused (``_Refused``) when there is none: it is never
    made, nothing is known there."""
    from gategraph.runtime._base._home import CATALOG_FILE, DEFAULT_FOLDER, default_catalog_path
    from gategraph.runtime._storage._database import configured_database

    from ._catalog import Catalog

    if project_root is not None:
        if not isinstance(project_root, str | os.PathLike) or not os.fspath(project_root):
            raise _Refused(E_INVALID_INPUT, "project_root must be a folder's path")
        path = Path(project_root) / DEFAULT_FOLDER / CATALOG_FILE
    else:
        path = default_catalog_path()
    try:
        database = configured_database(folder=path.parent)
        opened = Catalog.open(database) if database is not None else None
    except ConfigError as exc:
        raise _Refused(E_NOT_FOUND, str(exc)) from None
    if opened is not None:
        with opened:
            yield opened
        return
    if not path.is_file():
        raise _Refused(E_NOT_FOUND, f"no gategraph catalog at {path}: no plan is known there")
    try:
        catalog = Catalog.open(path)
    except ConfigError as exc:
        raise _Refused(E_NOT_FOUND, str(exc)) from None
    with catalog:
        yield catalog


@contextlib.contextmanager
def _checked(
    evidence: EvidenceStore | None,
    project_root: str | os.PathLike[str] | None,
    verdict: ValidatorAttestation | ValidatorRejection,
    code: str,
    credential: Any,
) -> Iterator[EvidenceStore]:
    """The store, once the plan the verdict is about is known there, the verdict comes
    with its validator's credential, and every criterion its findings name is the plan's
    (refused with ``code``, or ``E_VALIDATOR_AUTH_CREDENTIAL``, otherwise)."""
    try:
        with _store(evidence, project_root) as store:
            roster = store.roster(verdict.task_id)
            if roster is None:
                raise _Refused(code, f"no plan {verdict.task_id} is known here")
            # Before the criteria: a caller without the credential learns nothing more.
            _check_credential(store, verdict, credential)
            known = {c.id for c in roster}
            unknown = [f.ac_id for f in verdict.findings if f.ac_id not in known]
            if unknown:
                raise _Refused(
                    code,
                    f"plan {verdict.task_id} has no acceptance criterion "
                    f"{', '.join(dict.fromkeys(unknown))} (findings name criteria by the id "
                    "validator.ac-pull gives)",
                )
            yield store
    except _Refused as refused:
        if refused.reply["code"] in (E_NOT_FOUND, E_INVALID_INPUT):
            raise _Refused(code, refused.reply["message"]) from None
        raise


def _check_credential(
    store: EvidenceStore, verdict: ValidatorAttestation | ValidatorRejection, credential: Any
) -> None:
    """Refuse, and keep the refusal, unless ``credential`` is one of the verdict's
    validator's for its plan: the id an envelope is signed with proves nothing alone."""
    from ._evidence import credential_matches

    who, plan_id = verdict.validator_id, verdict.task_id
    kind = "attestation" if isinstance(verdict, ValidatorAttestation) else "rejection"
    if not isinstance(credential, str) or not credential:
        reason = (
            f"{who}'s {kind} came without a credential: an outside validator signs with the "
            "credential spawn.validator issued it or a person registered for it "
            f"(gategraph validator register {who})"
        )
    elif not credential_matches(credential, store.credentials(who, plan_id)):
        reason = (
            f"{who}'s {kind} came with a credential that is not {who}'s for plan "
            f"{plan_id} (wrong, revoked, or issued to another validator or plan)"
        )
    else:
        return
    store.record_refusal(plan_id, who, reason)
    raise _Refused(E_VALIDATOR_AUTH_CREDENTIAL, reason)


def _check_validator_id(validator_id: Any) -> str:
    if not isinstance(validator_id, str) or not re.fullmatch(VALIDATOR_ID_PATTERN, validator_id):
        raise ConfigError.at(
            "validator_id",
            f"{validator_id!r} is not a validator id (like validator-alice: 'validator-', "
            "then lower-case letters, digits and dashes)",
        )
    if validator_id == VALIDATOR_ID or validator_id.startswith(f"{VALIDATOR_ID}-"):
        raise ConfigError.at(
            "validator_id",
            f"{validator_id!r} is gategraph's own: a person's validator needs an id of its own",
        )
    return validator_id


def register_validator(validator_id: str, *, evidence: EvidenceStore) -> str:
    """Register a credential for the outside validator ``validator_id`` and return it:
    the only time it is seen, since ``evidence`` keeps only its digest. It signs every
    attestation and rejection the validator gives, on any plan, until revoked
    (:func:`revoke_validator`). A validator may hold several (one per machine, say).
    :class:`ConfigError` for an id that is not a validator's, or is gategraph's own."""
    from ._evidence import credential_digest, new_credential

    _check_validator_id(validator_id)
    credential = new_credential()
    evidence.add_credential(validator_id, credential_digest(credential))
    return credential


def revoke_validator(validator_id: str, *, evidence: EvidenceStore) -> int:
    """Revoke every credential of ``validator_id``; how many there were. What it signed
    before stays (revoking does not take back a verdict); what it signs now is refused."""
    _check_validator_id(validator_id)
    return evidence.revoke_credentials(validator_id)


def _check_role(caller: Any, what: str) -> None:
    role = caller.get("role") if isinstance(caller, Mapping) else None
    if role not in AGENT_ROLES:
        raise _Refused(
            E_VALIDATOR_AUTH_ROLE,
            f"caller.role must be one of {', '.join(AGENT_ROLES)}, not {role!r}",
        )
    if role != "validator":
        raise _Refused(E_VALIDATOR_AUTH_ROLE, f"only a validator may {what}, not a {role}")


def _parse(envelope: Any, kind: str, code: str) -> ValidatorAttestation | ValidatorRejection:
    if isinstance(envelope, ValidatorAttestation | ValidatorRejection):
        envelope = envelope.to_json_dict()
    if not isinstance(envelope, Mapping | str | bytes):
        raise _Refused(code, f"the {kind} must be a JSON object")
    try:
        parsed = parse_verdict(envelope)
    except ConfigError as exc:
        problems = "; ".join(
            f"{i.field}: {i.message}" if i.field else i.message for i in exc.issues
        )
        raise _Refused(code, f"the {kind} is not valid: {problems}") from None
    return parsed


def validator_ac_pull(
    task_id: str,
    *,
    project_root: str | os.PathLike[str] | None = None,
    evidence: EvidenceStore | None = None,
) -> dict[str, Any]:
    """The acceptance criteria of plan ``task_id``: each one's ``id`` (a UUID), ``alias``
    (``AC<ordinal>``), ``ordinal``, ``text`` and ``bindingStatus`` (``satisfied`` when a
    validator's attestation covers it). Read-only; any caller may pull. An empty list is
    a plan with nothing to check: no validator may attest it."""
    if not isinstance(task_id, str) or not task_id.strip():
        return _fail(E_INVALID_INPUT, "task_id must be a plan's id")
    try:
        with _store(evidence, project_root) as store:
            roster = store.roster(task_id)
            if roster is None:
                return _fail(E_NOT_FOUND, f"no plan {task_id} is known here")
            coverage = store.coverage(task_id)
    except _Refused as refused:
        return refused.reply
    return {
        "ok": True,
        "taskId": task_id,
        "acs": [
            {
                "id": c.id,
                "alias": c.alias,
                "ordinal": c.ordinal,
                "text": c.text,
                "bindingStatus": "satisfied" if coverage.validators_of(c.id) else "unsatisfied",
            }
            for c in roster
        ],
    }


def validator_attest(
    caller: Mapping[str, Any],
    attestation: Mapping[str, Any] | ValidatorAttestation | str,
    *,
    credential: str | None = None,
    project_root: str | os.PathLike[str] | None = None,
    evidence: EvidenceStore | None = None,
) -> dict[str, Any]:
    """Bind ``attestation`` (a seed 003 ``ValidatorAttestation``: every finding passes) to
    the criteria its findings name: one coverage binding each, in one transaction, with the
    atom id ``validator:<validatorId>:<taskId>``. Attesting again changes nothing; several
    validators give several bindings. Only a caller whose ``role`` is ``validator`` may,
    with ``credential``, the credential of the attestation's ``validatorId`` (see
    :func:`register_validator`); without it, the attestation is refused
    (``E_VALIDATOR_AUTH_CREDENTIAL``) and the refusal kept."""
    from ._evidence import atom_id, binding_id

    try:
        _check_role(caller, "attest")
        parsed = _parse(attestation, "attestation", E_VALIDATOR_ATTESTATION_INVALID)
        if not isinstance(parsed, ValidatorAttestation):
            raise _Refused(
                E_VALIDATOR_ATTESTATION_INVALID,
                "the attestation's verdict must be 'attest' (send a rejection with "
                "validator.reject)",
            )
        if parsed.validator_id == VALIDATOR_ID:
            raise _Refused(
                E_VALIDATOR_ATTESTATION_INVALID,
                f"validatorId {VALIDATOR_ID!r} is the plan's own validation round: an outside "
                "validator signs with an id of its own",
            )
        named = list(dict.fromkeys(f.ac_id for f in parsed.findings))
        with _checked(
            evidence, project_root, parsed, E_VALIDATOR_AC_NOT_FOUND, credential
        ) as store:
            store.bind_coverage(parsed.task_id, parsed.validator_id, named)
            store.record_verdict(parsed.task_id, parsed.validator_id, "attest")
    except _Refused as refused:
        return refused.reply
    atom = atom_id(parsed.validator_id, parsed.task_id)
    return {
        "ok": True,
        "bindingsWritten": len(named),
        "bindingIds": [binding_id(atom, ac) for ac in named],
        "processedAt": _now(),
    }


def validator_reject(
    caller: Mapping[str, Any],
    rejection: Mapping[str, Any] | ValidatorRejection | str,
    *,
    credential: str | None = None,
    project_root: str | os.PathLike[str] | None = None,
    evidence: EvidenceStore | None = None,
) -> dict[str, Any]:
    """Check ``rejection`` (a seed 003 ``ValidatorRejection``: at least one finding fails
    or is inconclusive), record it as its validator's latest verdict on the plan, and
    return its failing findings. It binds nothing; under the default
    ``policy.attestation`` (``no-rejection``) the plan is not applied while it stands
    (until the same validator attests). Only a ``validator`` may reject, with its
    ``credential``, as for :func:`validator_attest`."""
    try:
        _check_role(caller, "reject")
        parsed = _parse(rejection, "rejection", E_VALIDATOR_REJECTION_INVALID)
        if not isinstance(parsed, ValidatorRejection):
            raise _Refused(
                E_VALIDATOR_REJECTION_INVALID,
                "the rejection's verdict must be 'reject' (send an attestation with "
                "validator.attest)",
            )
        with _checked(
            evidence, project_root, parsed, E_VALIDATOR_REJECTION_INVALID, credential
        ) as store:
            store.record_verdict(parsed.task_id, parsed.validator_id, "reject")
    except _Refused as refused:
        return refused.reply
    failing = [f.ac_id for f in parsed.findings if f.status != "pass"]
    return {
        "ok": True,
        "rejection": parsed.to_json_dict(),
        "failingFindingCount": len(failing),
        "failingAcIds": failing,
        "processedAt": _now(),
    }


# -- as tools: a plan's nodes, the catalog's namespace, MCP ------------------------------


def ac_pull(
    task_id: str | None = None,
    project_root: str | None = None,
    context: Any = None,
) -> dict[str, Any]:
    """``validator.ac-pull`` as a tool: ``task_id`` defaults to the calling plan's."""
    if task_id is None and context is not None:
        task_id = context.plan_id
    return validator_ac_pull(task_id, project_root=project_root)  # type: ignore[arg-type]


def attest(
    caller: Any = None,
    attestation: Any = None,
    credential: Any = None,
    project_root: str | None = None,
) -> dict[str, Any]:
    """``validator.attest`` as a tool."""
    return validator_attest(caller, attestation, credential=credential, project_root=project_root)


def reject(
    caller: Any = None,
    rejection: Any = None,
    credential: Any = None,
    project_root: str | None = None,
) -> dict[str, Any]:
    """``validator.reject`` as a tool."""
    return validator_reject(caller, rejection, credential=credential, project_root=project_root)
