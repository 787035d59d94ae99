"""ODD bins of a comparison: the six primary contrasts per joint bin of per-task
stratifiers (``odd_spec``: ``{stratifiers: {name: [edges...]}}``), empty bins included.

Occupied bins describe support only; they do not establish independence,
representativeness or a causal geographic effect.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np

from passage_jax.checks import is_number
from passage_jax.contract import PRIMARY_METRICS
from passage_jax.evaluate.compare._contrasts import Measure, contrast
from passage_jax.evaluate.compare._errors import CompareError
from passage_jax.evaluate.compare._pairing import Pairing
from passage_jax.evaluate.score import STRATIFIERS, read_doc
from passage_jax.fileio import sha256_file

__all__ = ["ODD_FORMAT", "read_odd_spec", "bin_index", "odd_bins"]

ODD_FORMAT = "passage-odd-spec-v1"
NOTE = ("occupied bins describe support only; they do not establish independence, "
        "representativeness or a causal geographic effect")


def _edges(name, edges, where: str) -> list:
    if name not in STRATIFIERS:
        raise CompareError(f"{where}: stratifier {name!r} is not one of {list(STRATIFIERS)}")
    if not isinstance(edges, list) or len(edges) < 2 or not all(
            is_number(e) and math.isfinite(e) for e in edges):
        raise CompareError(f"{where}: stratifiers.{name}: need a list of at least two "
                           f"finite numbers (bin edges)")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise CompareError(f"{where}: stratifiers.{name}: edges must increase strictly")
    return [float(e) for e in edges]


def read_odd_spec(path) -> dict:
    """The ODD spec file (YAML or JSON, format :data:`ODD_FORMAT`), checked; returns
    ``{"path", "sha256", "stratifiers": {name: edges}}``."""
    p = Path(path)
    data = read_doc(p, CompareError, "odd spec", yaml_allowed=True)
    where = f"odd spec {p}"
    if not isinstance(data, dict) or "stratifiers" not in data:
        raise CompareError(f"{where}: expected a mapping with 'stratifiers'")
    extra = set(data) - {"format", "stratifiers"}
    if extra:
        raise CompareError(f"{where}: unknown key(s) {sorted(extra)}")
    if data.get("format", ODD_FORMAT) != ODD_FORMAT:
        raise CompareError(f"{where}: format must be {ODD_FORMAT!r}")
    strat = data["stratifiers"]
    if not isinstance(strat, dict) or not strat:
        raise CompareError(f"{where}: 'stratifiers' must map stratifier names to bin edges")
    out = {name: _edges(name, edges, where) for name, edges in strat.items()}
    return {"path": str(p.resolve()), "sha256": sha256_file(p),
            "stratifiers": out}


def bin_index(values: np.ndarray, edges: list) -> np.ndarray:
    """Bin of each value: i for edges[i] <= v < edges[i+1] (the last bin is
    closed), -1 outside the edges or NaN."""
    e = np.asarray(edges)
    v = np.asarray(values, np.float64)
    i = np.searchsorted(e, v, side="right") - 1
    i = np.where(v == e[-1], len(e) - 2, i)
    bad = ~np.isfinite(v) | (v < e[0]) | (v > e[-1])
    return np.where(bad, -1, i)


def _bin_label(edges: list, j: int) -> str:
    last = j == len(edges) - 2
    return f"[{edges[j]:g}, {edges[j + 1]:g}{']' if last else ')'}"


def _odd_contrasts(pairing: Pairing) -> dict:
    out = {}
    for metric in PRIMARY_METRICS:
        measure = Measure.primary(metric)
        xa, xb = pairing.values(measure.field)
        if measure.nan_policy == "omit" and any(not np.isfinite(x).any() for x in xa + xb):
            out[metric] = {"delta": None, "ci_available": False,
                           "reason": "a method has no valid route in this bin"}
            continue
        out[metric] = contrast(pairing, measure)
    return out


def _bin_entry(pairing: Pairing, sel: np.ndarray, desc: dict) -> dict:
    entry = {"bin": desc, "n_tasks": int(sel.size)}
    if sel.size == 0:
        entry["support"] = "empty"
        return entry
    sub = pairing.subset(sel)
    entry["n_blocks"] = len(set(sub.blocks))
    entry["uncertainty_status"] = "available" if sub.available else "unknown"
    entry["valid"] = {lab: {"n_valid_a": int(a["valid_path"].sum()),
                            "n_valid_b": int(b["valid_path"].sum())}
                      for lab, a, b in zip(sub.labels, sub.a, sub.b)}
    entry["contrasts"] = _odd_contrasts(sub)
    return entry


def odd_bins(spec: dict, pairing: Pairing) -> dict:
    """The comparison file's ``odd`` block: the contrasts per joint bin of ``spec``'s
    stratifiers (read from the first pair's rows of A)."""
    strat = spec["stratifiers"]
    names = list(strat)
    idx = {n: bin_index(pairing.a[0][f"stratum_{n}"], strat[n]) for n in names}
    outside = np.zeros(len(pairing.blocks), bool)
    for n in names:
        outside |= idx[n] < 0
    bins = []
    for combo in itertools.product(*[range(len(strat[n]) - 1) for n in names]):
        mask = ~outside
        for n, j in zip(names, combo):
            mask &= idx[n] == j
        desc = {n: _bin_label(strat[n], j) for n, j in zip(names, combo)}
        bins.append(_bin_entry(pairing, np.flatnonzero(mask), desc))
    return {"spec": spec, "n_outside_support": int(outside.sum()), "bins": bins, "note": NOTE}
