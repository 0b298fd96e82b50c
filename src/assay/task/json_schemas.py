"""A task's JSON Schemas (the contract `json` predicate's `schema`), with their patterns run by RE2.

Why: `jsonschema` runs `pattern` and `patternProperties` (and the pattern test inside
`additionalProperties`) on Python's backtracking `re`, so a task schema holding
`"pattern": "^(a+)+$"` spends hours on 40 a's and a "!". Here those keywords are replaced by
versions that compile the pattern with `assay.task.patterns.compile_pattern` (RE2, linear in
the text, Python's meaning), and `assay validate` refuses, naming the field, a schema that is
malformed, holds a pattern RE2 cannot run, or combines `unevaluatedProperties` with
`patternProperties` (jsonschema's evaluation of that pair reaches `re` by a path this module
cannot replace). A schema reaches nothing outside itself: a `$ref` (or `$dynamicRef`,
`$recursiveRef`) that is not a fragment of the schema (`#...`) is refused at validation, and
the validator's registry retrieves nothing (no file, no URL is ever opened).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from assay.errors import InputError
from assay.task.patterns import check_pattern, compile_pattern

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

__all__ = ["check_task_schema", "schema_patterns", "validator"]

_ONE = ("not", "additionalProperties", "additionalItems", "contains", "propertyNames", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "items")
"""Keywords whose value is one subschema (`items` may also be a list)."""
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
"""Keywords whose value is a list of subschemas."""
_MAP = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")
"""Keywords whose value maps names to subschemas (`dependencies` values may be name lists)."""


def _subschemas(schema: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for key in _ONE:
        if isinstance(schema.get(key), dict):
            yield f"{where}.{key}", schema[key]
    for key in _LIST:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                if isinstance(sub, dict):
                    yield f"{where}.{key}[{i}]", sub
    for key in _MAP:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                if isinstance(sub, dict):
                    yield f"{where}.{key}.{name}", sub


def schema_patterns(schema: Any, where: str = "schema") -> Iterator[tuple[str, Any]]:
    """(field, pattern) for every regular expression a JSON Schema holds: `pattern` values and
    `patternProperties` names, in the schema and every subschema (walked by keyword, so a
    property that happens to be named "pattern" is not taken for one)."""
    stack = [(where, schema)]
    while stack:
        at, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if "pattern" in node:
            yield f"{at}.pattern", node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            for name in node["patternProperties"]:
                yield f"{at}.patternProperties.{name}", name
        stack.extend(_subschemas(node, at))


def _has(schema: Any, keyword: str) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if keyword in node:
                return True
            stack.extend(sub for _, sub in _subschemas(node, ""))
    return False


_REFS = ("$ref", "$dynamicRef", "$recursiveRef")


def _outside_refs(schema: Any, where: str) -> Iterator[tuple[str, Any]]:
    """(field, value) of every reference in `schema` that is not to a part of the schema itself."""
    stack = [(where, schema)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, dict):
            for key in _REFS:
                if key in node and not (isinstance(node[key], str) and node[key].startswith("#")):
                    yield f"{at}.{key}", node[key]
            stack.extend((f"{at}.{k}", v) for k, v in node.items() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((f"{at}[{i}]", v) for i, v in enumerate(node) if isinstance(v, (dict, list)))


def _retrieve_nothing(uri: str) -> Any:
    raise LookupError(f"a task schema may not reach outside itself ({uri!r})")


def check_task_schema(file: Path | str, field: str, schema: dict[str, Any]) -> None:
    """InputError(file, field, reason) for a schema this harness will not check artifacts with."""
    for at, ref in _outside_refs(schema, field):
        raise InputError(file, at, f"{ref!r} points outside the schema: a task schema may only refer to its own "
                                   "parts ('#/$defs/...'); nothing is fetched or read")
    for at, pattern in schema_patterns(schema, field):
        check_pattern(file, at, pattern)
    if _has(schema, "unevaluatedProperties") and _has(schema, "patternProperties"):
        raise InputError(file, field, "unevaluatedProperties together with patternProperties is not supported "
                                      "(jsonschema would run those patterns on a backtracking engine)")
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for  # imported here: most commands never check a schema

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise InputError(file, f"{field}.{where.replace('/', '.')}" if where else field,
                         f"not a valid JSON Schema: {e.message}") from None


def _pattern(v: Validator, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    from jsonschema import ValidationError

    if v.is_type(instance, "string") and not compile_pattern(pattern, captures=False).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(v: Any, patterns: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not v.is_type(instance, "object"):
        return
    for pattern, sub in patterns.items():
        regex = compile_pattern(pattern, captures=False)
        for key, value in instance.items():
            if regex.search(key):
                yield from v.descend(value, sub, path=key, schema_path=pattern)


def _additional_properties(v: Any, additional: Any, instance: Any,
                           schema: dict[str, Any]) -> Iterator[ValidationError]:
    from jsonschema import ValidationError

    if not v.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    regexes = [compile_pattern(p, captures=False) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in named and not any(r.search(k) for r in regexes)]
    if v.is_type(additional, "object"):
        for key in extras:
            yield from v.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        yield ValidationError(f"additional properties are not allowed ({', '.join(map(repr, sorted(extras)))})")


@functools.lru_cache(maxsize=16)
def _extended(cls: type[Validator]) -> type[Validator]:
    from jsonschema.validators import extend

    # `v: Any` in the keyword functions: jsonschema's concrete validators have `descend`, its protocol does not say so
    return extend(cls, {"pattern": _pattern, "patternProperties": _pattern_properties,
                        "additionalProperties": _additional_properties})


def validator(schema: dict[str, Any]) -> Validator:
    """The validator of a task schema (its `$schema` draft, or the latest), patterns run by RE2."""
    from jsonschema.validators import validator_for
    from referencing import Registry

    registry: Registry[Any] = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]  # attrs alias of _retrieve
    return _extended(validator_for(schema))(schema, registry=registry)
