"""Reading a comparison file for the report and the leaderboard: :func:`read_comparison`
checks the format and the fields the report reads (:data:`COMPARE_FIELDS`, the runs and the
seed pairs), every number (finite and in its domain), then the file against its runs read
again (:mod:`~passage_jax.evaluate.compare._verify`), and returns the document with every
JSON object wrapped so that a missing nested field is named by its dotted path when read
(and the last field read is kept for other errors).
"""
from __future__ import annotations

from pathlib import Path

from passage_jax.checks import is_int
from passage_jax.evaluate.compare import COMPARE_FORMAT, verify_comparison
from passage_jax.evaluate.score import check_numbers, read_json

__all__ = ["ReportError", "ReportExists", "COMPARE_FIELDS", "read_comparison"]


class ReportError(RuntimeError):
    """The report cannot be written (bad comparison file, existing outputs, runs changed)."""


class ReportExists(ReportError, FileExistsError):
    """A report file or figure already exists (replacing it must be asked for)."""


#: top-level fields of a comparison file that the report reads, and their JSON types
COMPARE_FIELDS = {"runs": dict, "identity": dict, "pairs": list, "seed_mean": bool, "blocks": dict,
                  "bootstrap": dict, "methods": dict, "contrasts": dict,
                  "valid_route_denominators": dict, "geometry_both_valid": dict,
                  "latency_contrast": dict, "procedure_limits": dict, "created_utc": str}


_JSON_TYPE = {dict: "an object", list: "a list", bool: "true or false", str: "a string", int: "an integer"}


class _Fields(dict):
    """A JSON object of a comparison file that names its dotted path when a field it is
    asked for is missing; the last field read is kept (``trail``) for other errors."""

    def __init__(self, data: dict, path: str, where: str, trail: list):
        super().__init__({k: _fields(v, _join(path, k), where, trail) for k, v in data.items()})
        self._path, self._where, self._trail = path, where, trail

    def __missing__(self, key):
        raise ReportError(f"{self._where}: field {_join(self._path, key)!r} is missing")

    def __getitem__(self, key):
        self._trail[:] = [_join(self._path, key)]
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._trail[:] = [_join(self._path, key)]
        return super().get(key, default)


def _join(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _fields(v, path: str, where: str, trail: list):
    if isinstance(v, dict):
        return _Fields(v, path, where, trail)
    if isinstance(v, list):
        return [_fields(x, f"{path}[{i}]", where, trail) for i, x in enumerate(v)]
    return v


def _need(doc: dict, key: str, kind, where: str, path: str = ""):
    name = _join(path, key)
    if key not in doc:
        raise ReportError(f"{where}: field {name!r} is missing")
    v = doc[key]
    ok = is_int(v) if kind is int else isinstance(v, kind)
    if not ok:
        raise ReportError(f"{where}: field {name!r} must be {_JSON_TYPE[kind]}, got "
                          f"{type(v).__name__}")
    return v


def read_comparison(path) -> dict:
    """The comparison file written by ``compare``, checked: a JSON object of format
    :data:`~passage_jax.evaluate.compare.COMPARE_FORMAT` with the fields the report reads
    (:data:`COMPARE_FIELDS`, the runs and the seed pairs) of their types, its numbers finite
    and in their domain, and what it states of its runs what the runs give when read again
    (:func:`~passage_jax.evaluate.compare._verify.verify_comparison`); :class:`ReportError`
    naming the file and field otherwise. Missing nested fields are named when read."""
    path = Path(path)
    where = str(path)
    cmp = read_json(path, ReportError)
    if cmp.get("format") != COMPARE_FORMAT:
        raise ReportError(f"{where}: not a {COMPARE_FORMAT} file (format {cmp.get('format')!r})")
    check_numbers(cmp, where, ReportError)
    for k, kind in COMPARE_FIELDS.items():
        _need(cmp, k, kind, where)
    for side in ("A", "B"):
        run = _need(cmp["runs"], side, dict, where, "runs")
        for k, kind in (("path", str), ("method_name", str), ("seeds", list), ("folders", dict)):
            _need(run, k, kind, where, f"runs.{side}")
        _need(_need(cmp["methods"], side, dict, where, "methods"), "per_seed", dict, where,
              f"methods.{side}")
    if not cmp["pairs"]:
        raise ReportError(f"{where}: field 'pairs' is empty")
    for i, pair in enumerate(cmp["pairs"]):
        if not isinstance(pair, dict):
            raise ReportError(f"{where}: field 'pairs[{i}]' must be an object, got {type(pair).__name__}")
        _need(pair, "label", str, where, f"pairs[{i}]")
        for k in ("seed_a", "seed_b"):
            _need(pair, k, int, where, f"pairs[{i}]")
    verify_comparison(cmp, where, ReportError)
    return _fields(cmp, "", where, [])
