"""report.json as a contract: its JSON Schema, and reading a report.json someone else may have made.

The format is published as ``tracer/schemas/report.schema.json`` (docs/contracts.md: fields
may be added, never renamed) and checked with ``jsonschema``, a maintained validator. Every
report tftrace writes satisfies the whole schema (the tests check each one). A report read back
(``tftrace report``, ``tftrace isolate --from``) is refused, naming the field, when its top-level
fields break it; damage deeper down (a node that is not an object, a metric that is a list) is
left to the renderers, which show what they cannot read as "—" and escape every string.

Imports neither TensorFlow nor numba: re-rendering a report needs neither.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from ..errors import TftraceError

__all__ = ["load_report", "report_schema", "report_errors", "check_report"]

REWRITE = "re-run tftrace compare to rewrite it"
_KINDS = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "true or false", "null": "null"}


@lru_cache(maxsize=1)
def report_schema() -> dict[str, Any]:
    """The JSON Schema of report.json, as shipped in the package."""
    text = importlib.resources.files("tracer").joinpath("schemas", "report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.protocols.Validator:
    schema = report_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def report_errors(report: Any) -> list[jsonschema.ValidationError]:
    """Every way ``report`` breaks the schema (none for a report tftrace wrote), in schema order."""
    return list(_validator().iter_errors(report))


def check_report(report: Any, where: str) -> None:
    """Refuse ``report`` (read from ``where``) when its top level breaks the schema, naming the field."""
    for error in report_errors(report):
        path = list(error.absolute_path)
        if len(path) > 1:
            continue  # inside a node, an output...: the renderers cope with anything there
        if not isinstance(report, dict) or (not path and _missing(error) == "schema_version"):
            raise TftraceError(f"{where} is not a tftrace report", REWRITE)
        raise TftraceError(f"{where} is not a valid tftrace report: {_describe(error, path)}", REWRITE)


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a report.json someone else may have made: strict JSON, checked against the schema."""
    report_path = Path(path) / "report.json" if Path(path).is_dir() else Path(path)
    if not report_path.exists():
        raise TftraceError(f"{report_path} does not exist", "point at a directory written by tftrace compare --out")

    def refuse_constant(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    try:
        report = json.loads(report_path.read_text(encoding="utf-8"), parse_constant=refuse_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise TftraceError(f"{report_path} is not valid JSON ({str(exc)[:200]})", REWRITE) from exc
    check_report(report, str(report_path))
    return report


def _missing(error: jsonschema.ValidationError) -> str | None:
    """The property a ``required`` error is about."""
    if error.validator != "required" or not isinstance(error.instance, dict):
        return None
    return next((name for name in error.validator_value if name not in error.instance), None)


def _describe(error: jsonschema.ValidationError, path: list[Any]) -> str:
    field = str(path[0]) if path else ""
    if error.validator == "required":
        missing = _missing(error)
        return f'"{missing}" is missing' if not path else f'"{field}" has no "{missing}"'
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f'"{field}" must be ' + " or ".join(_KINDS.get(k, k) for k in kinds)
    if error.validator == "enum" or "enum" in (error.schema if isinstance(error.schema, dict) else {}):
        return f'unknown "{field}" ({str(error.instance)[:60]!r})'
    return f'"{field}": {error.message[:200]}'
