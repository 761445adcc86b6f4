"""``json_schema``: the artifact matches a JSON Schema (seed 002, "payload validation")."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ._common import BAD_ARGUMENTS, Result, describe, failed, listing, plural, result, shorten

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["MAX_ERRORS", "format_path", "json_schema"]

MAX_ERRORS: Final = 50
"""At most this many errors are listed in ``data["errors"]``."""

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(path: Iterable[object]) -> str:
    """Write a JSON location as ``a.b[0]``; ``""`` is the document itself.

    Keys that are not identifier-like are quoted: ``a["two words"]``.
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENTIFIER.fullmatch(part):
            out += f".{part}" if out else part
        else:
            text = str(part).replace("\\", "\\\\").replace('"', '\\"')
            out += f'["{text}"]'
    return out


def _validator_class(schema: object) -> type[Validator]:
    from jsonschema import validators

    drafts: list[type[Validator]] = [
        validators.Draft3Validator,
        validators.Draft4Validator,
        validators.Draft6Validator,
        validators.Draft7Validator,
        validators.Draft201909Validator,
        validators.Draft202012Validator,
    ]
    if not isinstance(schema, Mapping) or "$schema" not in schema:
        return validators.Draft202012Validator
    uri = schema["$schema"]
    if not isinstance(uri, str):
        raise ValueError(f"$schema must be a string, got {describe(uri)}")
    known = {str(cls.META_SCHEMA["$schema"]).rstrip("#"): cls for cls in drafts}
    try:
        return known[uri.rstrip("#")]
    except KeyError:
        raise ValueError(
            f"unknown $schema {uri!r}: use a JSON Schema draft URI such as "
            "'https://json-schema.org/draft/2020-12/schema'"
        ) from None


def json_schema(*, artifact: object, schema: object, check_formats: object = False) -> Result:
    """Check the artifact against a JSON Schema.

    Arguments:
        artifact: the artifact (any JSON value).
        schema: the JSON Schema (an object, or ``true``/``false``). Its ``$schema`` picks
            the draft (3, 4, 6, 7, 2019-09, 2020-12); without one, Draft 2020-12. The
            schema is checked first. ``$ref`` resolves inside the schema and to the
            published meta-schemas; nothing is fetched over the network.
        check_formats: also assert ``format`` (``email``, ``date-time``, ...); by the
            specification ``format`` is only an annotation, so this is off by default.

    Data:
        errors: up to 50 ``{"path": "a.b[0]", "message": ...}``, in the order found
            (``path`` is ``""`` for the artifact itself).
        error_count: how many errors there are in all.

    A schema that is not a valid JSON Schema, an unknown ``$schema``, or a ``$ref`` that
    cannot be resolved fails with ``data["error"] == "bad_arguments"``.
    """
    if not isinstance(schema, Mapping | bool):
        return failed(BAD_ARGUMENTS, f"schema must be an object, got {describe(schema)}")
    if not isinstance(check_formats, bool):
        return failed(
            BAD_ARGUMENTS, f"check_formats must be true or false, got {describe(check_formats)}"
        )
    from jsonschema import exceptions
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    try:
        cls = _validator_class(schema)
    except ValueError as exc:
        return failed(BAD_ARGUMENTS, f"schema: {exc}")
    document: Any = schema  # checked just above: an object or a boolean
    instance: Any = artifact
    try:
        cls.check_schema(document)
    except exceptions.SchemaError as exc:
        where = format_path(exc.absolute_path)
        return failed(
            BAD_ARGUMENTS,
            f"schema is not a valid JSON Schema: {shorten(exc.message)}"
            + (f" (at {where})" if where else ""),
        )
    # The published meta-schemas, and no network: the default registry would fetch a
    # remote $ref, which a validation has no business doing.
    specifications = importlib.import_module("jsonschema_specifications")
    registry: Registry[Any] = specifications.REGISTRY.combine(Registry())
    checker = cls.FORMAT_CHECKER if check_formats else None
    validator = cls(document, registry=registry, format_checker=checker)
    errors: list[dict[str, str]] = []
    count = 0
    try:
        for error in validator.iter_errors(instance):
            count += 1
            if len(errors) < MAX_ERRORS:
                errors.append(
                    {"path": format_path(error.absolute_path), "message": shorten(error.message)}
                )
    except Unresolvable as exc:
        return failed(BAD_ARGUMENTS, f"schema: cannot resolve $ref: {shorten(str(exc))}")
    except RecursionError:
        return failed(BAD_ARGUMENTS, "schema: $ref recursion never ends")
    if not count:
        return result(True, "The artifact matches the schema", errors=[], error_count=0)
    shown = [f"{e['path'] or '(root)'}: {shorten(e['message'], 100)}" for e in errors]
    return result(
        False,
        f"{plural(count, 'schema error')}: {listing(shown, 3, '; ')}",
        errors=errors,
        error_count=count,
    )
