"""Golden files for the versioned outputs: a renamed, dropped or added key fails a test.

Covered outputs (from a small scored run pair on the shipped 64x64 test cohort, three
training seeds so that the compare file holds its full ``primary_comparison`` block):

* ``per_sample.npz``: field names, dtypes and ranks -> ``tests/fixtures/golden/per_sample_npz.json``;
* ``metrics.json``: every nested key path and its value type -> ``tests/fixtures/golden/metrics_json.json``;
* the compare JSON (``compare_runs``) -> ``tests/fixtures/golden/compare_json.json``;
* ``score_receipt.json`` -> ``tests/fixtures/golden/score_receipt_json.json``.

A golden file stores a *schema*, never values that vary (timestamps, hashes, paths,
numbers): each value is replaced by its type (``object``, ``array``, ``string``, ``number``,
``boolean``, ``null``). Key paths are JSON pointers (``/primary/regret_median``); ``[]``
stands for the elements of an array (their schemas merged) and ``*`` for the keys of a map
whose keys are data (block labels, shard file names ...; listed in ``DATA_KEYED``). Types
that differ between array elements or map entries are joined with ``|``. ``null`` is
compatible with any type (a metric can be undefined on another run), so only key paths and
non-null type changes fail.

Changing a versioned output on purpose (bump its format string too) and regenerating::

    PASSAGE_UPDATE_GOLDEN=1 python -m pytest -q -n 0 tests/evaluate/test_golden.py

then review ``git diff tests/fixtures/golden/``. Without the variable the tests compare and never
write. The ``test_*_detects_*`` tests rename, drop or retype a key in a copy of a real output
and check that the comparison reports it, so the ability of each golden test to fail is
itself tested.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from score_support import copy_cohort, spec_dict

from passage_jax.contract import DEFAULT_SEEDS
from passage_jax.evaluate.compare import compare_runs
from passage_jax.evaluate.score import score_run
from passage_jax.run import parse_spec, run_spec

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
UPDATE = os.environ.get("PASSAGE_UPDATE_GOLDEN", "") not in ("", "0")
GOLDEN_FORMAT = "passage-golden-schema-v1"
N_TASKS = 6
N_RESAMPLES = 40

#: JSON pointers (``*`` matches any one key) of maps whose keys are data, per output: block
#: labels, statuses observed, seed / pair labels, shard file names, package names
DATA_KEYED = {
    "metrics.json": ("/block_census/block_sizes", "/status_counts/*"),
    "compare.json": (
        "/blocks/census/block_sizes", "/runs/*/folders", "/valid_route_denominators",
        "/contrasts/*/per_seed", "/geometry_both_valid/*/per_seed", "/latency_contrast/per_seed",
        "/methods/*/per_seed", "/methods/*/per_seed/*/status_counts/*",
        "/primary_comparison/deltas/*/per_seed",
    ),
    "score_receipt.json": ("/inputs/shards", "/versions"),
}


# ----------------------------------------------------------------------------- schemas

def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _type(value) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _add(schema: dict, path: str, kind: str) -> None:
    kinds = set(schema.get(path, "").split("|")) - {""}
    schema[path] = "|".join(sorted(kinds | {kind}))


def _matches(pattern: str, path: str) -> bool:
    """A pointer pattern whose ``*`` segments match any one key."""
    ps, xs = pattern.split("/"), path.split("/")
    return len(ps) == len(xs) and all(p in ("*", x) for p, x in zip(ps, xs))


def json_schema(doc, data_keyed=()) -> dict:
    """Flat ``{pointer: type}`` of a JSON document (root pointer ``""``); the keys of a map at a
    pointer matching a ``data_keyed`` pattern are written ``*``."""
    schema: dict = {}

    def walk(value, path):
        _add(schema, path, _type(value))
        if isinstance(value, dict):
            wild = path + "/*" if any(_matches(p, path) for p in data_keyed) else None
            for k, v in value.items():
                walk(v, wild or f"{path}/{_escape(k)}")
        elif isinstance(value, list):
            for v in value:
                walk(v, path + "/[]")

    walk(doc, "")
    return dict(sorted(schema.items()))


def npz_schema(arrays: dict) -> dict:
    """Flat ``{field: "<dtype>, <ndim>-d"}``; strings are ``str`` whatever their length."""
    out = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        kind = {"U": "str", "S": "bytes", "O": "object"}.get(a.dtype.kind, a.dtype.name)
        out[name] = f"{kind}, {a.ndim}-d"
    return dict(sorted(out.items()))


def _compatible(expected: str, actual: str) -> bool:
    e = set(expected.split("|")) - {"null"}
    a = set(actual.split("|")) - {"null"}
    return e == a or not e or not a


def schema_diff(expected: dict, actual: dict) -> list[str]:
    """Human-readable differences between two flat schemas (empty: they agree)."""
    out = []
    for p in sorted(set(expected) - set(actual)):
        out.append(f"missing key {p or '/'} ({expected[p]})")
    for p in sorted(set(actual) - set(expected)):
        out.append(f"unexpected key {p or '/'} ({actual[p]})")
    for p in sorted(set(expected) & set(actual)):
        if not _compatible(expected[p], actual[p]):
            out.append(f"type of {p or '/'} changed: {expected[p]} -> {actual[p]}")
    return out


def _golden_path(output: str) -> Path:
    return GOLDEN / (output.replace(".", "_") + ".json")


def check_golden(output: str, schema: dict) -> None:
    """Compare ``schema`` with the golden file of ``output`` (or write it when updating)."""
    path = _golden_path(output)
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        doc = {"format": GOLDEN_FORMAT, "output": output,
               "data_keyed": list(DATA_KEYED.get(output, ())), "schema": schema}
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    assert path.is_file(), f"no golden file {path}; create it with PASSAGE_UPDATE_GOLDEN=1"
    golden = json.loads(path.read_text())
    assert golden["format"] == GOLDEN_FORMAT and golden["output"] == output
    diff = schema_diff(golden["schema"], schema)
    assert not diff, (f"{output} no longer matches {path.name} (a versioned output changed; if "
                      "on purpose, bump its format and rerun with PASSAGE_UPDATE_GOLDEN=1):\n  "
                      + "\n  ".join(diff))


def _golden_schema(output: str) -> dict:
    return json.loads(_golden_path(output).read_text())["schema"]


# ----------------------------------------------------------------------------- outputs

@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Two scored three-seed runs (bfs, greedy) and their compare file, loaded."""
    tmp = tmp_path_factory.mktemp("golden")
    cohort = copy_cohort(tmp / "cohort")
    for method in ("bfs", "greedy"):
        spec = spec_dict(method, cohort, seeds=DEFAULT_SEEDS, n_samples=N_TASKS)
        run_spec(parse_spec(spec), tmp / method, progress=False)
        score_run(tmp / method)
    compare_runs(tmp / "bfs", tmp / "greedy", tmp / "compare.json", n_bootstrap=N_RESAMPLES,
                 bootstrap_seed=3)
    seed = tmp / "bfs" / f"seed-{DEFAULT_SEEDS[0]}"
    with np.load(seed / "per_sample.npz", allow_pickle=False) as z:
        per_sample = {k: z[k] for k in z.files}
    out = {
        "per_sample.npz": per_sample,
        "metrics.json": json.loads((seed / "metrics.json").read_text()),
        "score_receipt.json": json.loads((seed / "score_receipt.json").read_text()),
        "compare.json": json.loads((tmp / "compare.json").read_text()),
    }
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


def schema_of(output: str, doc) -> dict:
    if output.endswith(".npz"):
        return npz_schema(doc)
    return json_schema(doc, DATA_KEYED.get(output, ()))


# ----------------------------------------------------------------------------- golden tests

@pytest.mark.parametrize("output", ["per_sample.npz", "metrics.json", "compare.json",
                                    "score_receipt.json"])
def test_output_matches_golden(outputs, output):
    check_golden(output, schema_of(output, outputs[output]))


def test_golden_json_covers_the_full_comparison(outputs):
    """The fixture reaches every block of the compare file (none left null)."""
    doc = outputs["compare.json"]
    assert doc["seed_mean"] is True
    assert isinstance(doc["primary_comparison"], dict) and "deltas" in doc["primary_comparison"]
    assert doc["blocks"]["uncertainty_status"] == "available"


# ----------------------------------------------------------------------------- the tests can fail

def _rename(doc: dict, path: tuple, new: str) -> None:
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[new] = parent.pop(path[-1])


def _drop(doc: dict, path: tuple) -> None:
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    del parent[path[-1]]


def test_per_sample_golden_detects_renamed_dropped_and_retyped_fields(outputs):
    arrays = dict(outputs["per_sample.npz"])
    arrays["regret_renamed"] = arrays.pop("regret")
    del arrays["h95"]
    arrays["success"] = arrays["success"].astype(np.int8)
    diff = schema_diff(_golden_schema("per_sample.npz"), npz_schema(arrays))
    assert "missing key regret (float64, 1-d)" in diff
    assert "unexpected key regret_renamed (float64, 1-d)" in diff
    assert "missing key h95 (float64, 1-d)" in diff
    assert any(d.startswith("type of success changed: bool, 1-d -> int8") for d in diff)
    assert len(diff) == 4, diff


@pytest.mark.parametrize("output,rename,drop", [
    ("metrics.json", ("primary", "regret_median"), ("block_census", "n_blocks")),
    ("compare.json", ("primary_comparison", "deltas", "h95_mean", "ci_low"), ("bootstrap", "alpha")),
    ("score_receipt.json", ("outputs", "metrics.json"), ("scored_utc",)),
])
def test_json_golden_detects_renamed_and_dropped_keys(outputs, output, rename, drop):
    golden = _golden_schema(output)
    doc = copy.deepcopy(outputs[output])
    assert not schema_diff(golden, schema_of(output, doc))
    _rename(doc, rename, rename[-1] + "_renamed")
    _drop(doc, drop)
    diff = schema_diff(golden, schema_of(output, doc))
    old = "/" + "/".join(_escape(k) for k in rename)
    gone = "/" + "/".join(_escape(k) for k in drop)
    assert any(d.startswith(f"missing key {old} ") for d in diff), diff
    assert any(d.startswith(f"unexpected key {old}_renamed ") for d in diff), diff
    assert any(d.startswith(f"missing key {gone} ") for d in diff), diff


def test_json_golden_detects_a_retyped_value(outputs):
    doc = copy.deepcopy(outputs["metrics.json"])
    doc["n_tasks"] = str(doc["n_tasks"])
    diff = schema_diff(_golden_schema("metrics.json"), schema_of("metrics.json", doc))
    assert diff == ["type of /n_tasks changed: number -> string"]


def test_schema_rules():
    doc = {"a": {"b/c": [1, None, 2.5]}, "m": {"x": {"k": 1}, "y": {"k": "s"}}, "e": []}
    s = json_schema(doc, ("/*",))
    assert s["/m/*/k"] == "number|string" and "/a/*" in s
    s = json_schema(doc, ("/m",))
    assert s == {"": "object", "/a": "object", "/a/b~1c": "array", "/a/b~1c/[]": "null|number",
                 "/e": "array", "/m": "object", "/m/*": "object", "/m/*/k": "number|string"}
    assert schema_diff({"/x": "number"}, {"/x": "null"}) == []
    assert schema_diff({"/x": "number"}, {"/x": "string"}) == ["type of /x changed: number -> string"]
    assert npz_schema({"id": np.array(["a", "bcd"]), "v": np.zeros((2, 3), np.float32)}) == {
        "id": "str, 1-d", "v": "float32, 2-d"}
