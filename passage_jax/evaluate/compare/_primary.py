"""The six-metric comparison of the canonical pairing (the seed-mean contrast over the
default seeds with known blocks) and its confirmatory test.

The p-values come from the block randomization test run here (``paired_test=
"randomization"``) or from a paired-test evidence file (:func:`read_test_evidence`);
either feeds Holm in :func:`~passage_jax.stats.compare_primary_metrics`, whose decision
and votes land in ``primary_comparison``; ``confirmatory`` records where the p-values
came from (``null`` without a test).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from passage_jax.checks import is_number
from passage_jax.contract import DEFAULT_SEEDS, PRIMARY_METRICS
from passage_jax.evaluate.compare._errors import TestEvidenceError
from passage_jax.evaluate.compare._pairing import Pairing
from passage_jax.evaluate.score import read_doc
from passage_jax.fileio import jsonable, sha256_file
from passage_jax.stats import block_randomization_test, compare_primary_metrics
from passage_jax.stats.compare import FAMILY_ALPHA

__all__ = ["EVIDENCE_KEYS", "read_test_evidence", "confirmatory_inputs", "PrimaryOutcome",
           "primary_outcome"]

#: the keys of a paired-test evidence file (docs/contract.md, "Confirmatory test evidence"): all
#: required, no others
EVIDENCE_KEYS = ("p_values", "paired_test", "test_assumptions")
#: the confirmatory fields copied from the six-metric comparison
_DECISION_KEYS = ("inference_status", "decision", "winner", "votes", "holm")


def _evidence_fields(doc, where: str) -> None:
    if not isinstance(doc, dict):
        raise TestEvidenceError(f"{where}: expected a JSON object with {list(EVIDENCE_KEYS)}, "
                                f"got {type(doc).__name__}")
    missing = [k for k in EVIDENCE_KEYS if k not in doc]
    if missing:
        raise TestEvidenceError(f"{where}: missing field(s) {missing}")
    extra = sorted(set(doc) - set(EVIDENCE_KEYS), key=str)
    if extra:
        raise TestEvidenceError(f"{where}: unknown field(s) {extra}; expected exactly "
                                f"{list(EVIDENCE_KEYS)}")


def _p_value(m: str, v, where: str) -> float:
    if v is None:
        return float("nan")
    if not is_number(v):
        raise TestEvidenceError(f"{where}: p_values.{m} must be a number in [0, 1] or null, "
                                f"got {v!r}")
    v = float(v)
    if not math.isnan(v) and not 0.0 <= v <= 1.0:
        raise TestEvidenceError(f"{where}: p_values.{m} is {v}, outside [0, 1]")
    return v


def _p_values(pv, where: str) -> dict:
    if not isinstance(pv, dict):
        raise TestEvidenceError(f"{where}: p_values must map each primary metric to a p-value, "
                                f"got {type(pv).__name__}")
    miss = [m for m in PRIMARY_METRICS if m not in pv]
    unknown = sorted(set(pv) - set(PRIMARY_METRICS), key=str)
    if miss or unknown:
        raise TestEvidenceError(f"{where}: p_values must name exactly the six primary metrics "
                                f"{list(PRIMARY_METRICS)}; missing {miss}, unknown {unknown}")
    return {m: _p_value(m, pv[m], where) for m in PRIMARY_METRICS}


def _check_declaration(name, ta, where: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise TestEvidenceError(f"{where}: paired_test must be the declared test's name (a "
                                f"non-empty string), got {name!r}")
    ok = ((isinstance(ta, str) and ta.strip())
          or (isinstance(ta, list) and ta and all(isinstance(x, str) and x.strip() for x in ta))
          or (isinstance(ta, dict) and ta))
    if not ok:
        raise TestEvidenceError(f"{where}: test_assumptions must state the test's assumptions (a "
                                f"non-empty string, list of strings or object), got {ta!r}")


def read_test_evidence(path) -> dict:
    """Read and validate a paired-test evidence file (JSON object with exactly
    ``p_values``, ``paired_test`` and ``test_assumptions``).

    ``p_values`` maps each of the six primary metrics to a number in [0, 1], or ``null`` /
    ``NaN`` for an unavailable test (it keeps its place in the Holm family);
    ``paired_test`` is a non-empty string; ``test_assumptions`` a non-empty string, a
    non-empty list of non-empty strings or a non-empty object. Any other shape raises
    :class:`TestEvidenceError` naming the file and the field. Returns ``{"p_values",
    "paired_test", "test_assumptions", "path", "sha256"}`` (p-values as floats, NaN for
    unavailable).
    """
    p = Path(path)
    doc = read_doc(p, TestEvidenceError, "test evidence")
    where = f"test evidence {p}"
    _evidence_fields(doc, where)
    p_values = _p_values(doc["p_values"], where)
    _check_declaration(doc["paired_test"], doc["test_assumptions"], where)
    return {"p_values": p_values, "paired_test": doc["paired_test"],
            "test_assumptions": doc["test_assumptions"], "path": str(p.resolve()),
            "sha256": sha256_file(p)}


def confirmatory_inputs(recs: list, blocks, ids: list, *, paired_test=None, evidence=None,
                        randomization_draws: int = 9999, seed: int = 0, sharding=None) -> dict | None:
    """The p-values, test name and assumptions for ``compare_primary_metrics`` and their
    record: from the block randomization test run here (``paired_test="randomization"``,
    swap patterns drawn from ``seed`` when the blocks are too many to enumerate) or from a
    validated evidence file (:func:`read_test_evidence`); None when neither is asked for."""
    if paired_test is None and evidence is None:
        return None
    if paired_test is not None:
        try:
            rt = block_randomization_test(recs[0], recs[1], blocks, task_ids=ids,
                                          n_random=randomization_draws, seed=seed,
                                          sharding=sharding)
        except ValueError as e:
            raise TestEvidenceError(f"block randomization test: {e}") from None
        return {"source": "randomization", "p_values": rt.p_values, "paired_test": rt.paired_test,
                "test_assumptions": rt.test_assumptions, "randomization": rt.to_dict(),
                "evidence_file": None}
    return {"source": "evidence_file", "p_values": evidence["p_values"],
            "paired_test": evidence["paired_test"], "test_assumptions": evidence["test_assumptions"],
            "randomization": None,
            "evidence_file": {"path": evidence["path"], "sha256": evidence["sha256"]}}


@dataclass(frozen=True)
class PrimaryOutcome:
    """The six-metric comparison: ``official`` (the comparison file's ``primary_comparison``:
    the result's ``to_dict()``, or why it is unavailable), ``computed`` (its per-metric
    seed-mean results, reused as the primary contrasts) and ``confirmatory`` (the record of
    the test; None without one). All None when the pairing is not canonical."""
    official: dict | None = None
    computed: dict | None = None
    confirmatory: dict | None = None


def _not_canonical(pairing: Pairing, seeds: dict, blocks: dict) -> str:
    if not pairing.available:
        return f"known blocks ({blocks['reason']})"
    return (f"the seeds {list(DEFAULT_SEEDS)} on both runs (A {seeds['A']}, "
            f"B {seeds['B']})")


def _compared(recs: list, pairing: Pairing, options, confirm: dict | None) -> PrimaryOutcome:
    test = ({} if confirm is None else
            {k: confirm[k] for k in ("p_values", "paired_test", "test_assumptions")})
    try:
        cmp = compare_primary_metrics(recs[0], recs[1], list(pairing.blocks),
                                      n_bootstrap=options.n_bootstrap, alpha=options.alpha,
                                      seed=options.bootstrap_seed, task_ids=list(pairing.task_ids),
                                      sharding=options.sharding, **test)
    except ValueError as e:
        if confirm is not None:
            raise TestEvidenceError(f"confirmatory comparison: {e}") from None
        return PrimaryOutcome({"unavailable": str(e)})
    official = jsonable(cmp.to_dict())
    if confirm is not None:
        confirm.update({k: official[k] for k in _DECISION_KEYS})
        confirm["family_alpha"] = FAMILY_ALPHA
    return PrimaryOutcome(official, cmp.deltas, confirm)


def primary_outcome(pairing: Pairing, seeds: dict, seed_mean: bool, blocks: dict, options,
                    evidence: dict | None) -> PrimaryOutcome:
    """The six-metric comparison when the pairing is canonical (the seed-mean contrast over
    the default seeds with known blocks); a confirmatory test asked for in ``options`` (or
    an ``evidence`` file, read) on another pairing is refused (:class:`TestEvidenceError`)."""
    canonical = seed_mean and tuple(seeds["A"]) == tuple(DEFAULT_SEEDS) and pairing.available
    if not canonical:
        if options.wants_test:
            raise TestEvidenceError(f"the confirmatory test compares the seed-mean contrast of the "
                                    f"six primary metrics and needs "
                                    f"{_not_canonical(pairing, seeds, blocks)}")
        return PrimaryOutcome()
    recs = [pairing.seed_records("A"), pairing.seed_records("B")]
    confirm = confirmatory_inputs(recs, list(pairing.blocks), list(pairing.task_ids),
                                  paired_test=options.paired_test, evidence=evidence,
                                  randomization_draws=options.randomization_draws,
                                  seed=options.bootstrap_seed, sharding=options.sharding)
    return _compared(recs, pairing, options, confirm)
