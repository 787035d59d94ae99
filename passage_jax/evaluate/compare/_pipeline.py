"""Paired comparison of two scored runs (docs/scoring.md; docs/contract.md §5, §7).

``compare_runs(a, b, output)`` reads two scored runs (run folders or seed
folders), refuses them when their tasks (ordered sample ids and input hashes),
data (shards), references or timing profiles differ (and, with
``require_identical_limits``, when their budgets, timing series or deadlines
differ), and writes one JSON file with:

* each method's six primary metrics and counts per seed;
* paired contrasts ``T(A) - T(B)`` of the six metrics, per seed and as the
  seed mean when both runs hold the same seeds, with geographic-block
  percentile intervals from :mod:`passage_jax.stats` (blocks from
  ``metadata.tile`` under ``main_tile_5deg``, or from a sealed roster);
* valid-route denominators and the geometry contrast on the tasks valid for
  both methods, beside the contrast of each method's own valid subset;
* a secondary latency contrast (median of the quality repeat), with both runs' timing
  boundaries and whether they are the same (a contrast across boundaries is not a
  like-for-like measurement);
* each run's ``validation_recost_ms`` block per seed (from its ``metrics.json``; ``null``
  for a seed scored before the block existed);
* optional ODD bins (``odd_spec``): the same contrasts per joint bin of
  per-task stratifiers, empty bins included;
* the confirmatory test when asked for (``paired_test="randomization"`` or a
  ``test_evidence`` file): six p-values into Holm at family-wise 0.05, the decision
  and votes in ``primary_comparison``, the source of the p-values in
  ``confirmatory`` (``null`` without a test);
* each method's ``components`` block per seed (direct/repair/fallback rates,
  per-stage work) and, when either run declares ``component_control``, the
  ``attribution`` table of the two runs (:mod:`passage_jax.evaluate.attribution`;
  ``null`` otherwise).

Every contrast is computed by :mod:`passage_jax.stats` and written as its result's
``to_dict()``: the six primary contrasts of a seed-mean comparison over the default
seeds come from one :func:`~passage_jax.stats.compare_primary_metrics` call (also
written as ``primary_comparison``); any other contrast from
:func:`~passage_jax.stats.seed_mean_bootstrap` over the compared pairs, or, when the
blocks do not support an interval, from the same seed-mean result without draws
(estimates only, keys :data:`ESTIMATE_KEYS`).

The steps, one module each: the options (:mod:`~passage_jax.evaluate.compare._options`),
the checks of the two runs (:mod:`~passage_jax.evaluate.compare._checks`), their seed pairs
and rows (:mod:`~passage_jax.evaluate.compare._pairing`), the blocks
(:mod:`~passage_jax.evaluate.compare._blocks`), the six-metric comparison and its
confirmatory test (:mod:`~passage_jax.evaluate.compare._primary`), the contrasts
(:mod:`~passage_jax.evaluate.compare._contrasts`) and the ODD bins
(:mod:`~passage_jax.evaluate.compare._odd`); errors in
:mod:`~passage_jax.evaluate.compare._errors`. Their public names are importable from
:mod:`passage_jax.evaluate.compare`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from passage_jax.evaluate.attribution import AttributionError, attribution_rows, run_entry
from passage_jax.evaluate.compare._blocks import run_blocks
from passage_jax.evaluate.compare._checks import (
    Checks,
    Side,
    check_runs,
    load_side,
    split_role_of,
)
from passage_jax.evaluate.compare._contrasts import (
    BothValid,
    geometry_intersection,
    latency_contrast,
    method_summary,
    primary_contrasts,
)
from passage_jax.evaluate.compare._errors import (
    CompareError,
    OutputExists,
    OutputIsFolder,
)
from passage_jax.evaluate.compare._odd import odd_bins, read_odd_spec
from passage_jax.evaluate.compare._options import (
    CompareOptions,
)
from passage_jax.evaluate.compare._pairing import (
    Draws,
    PairedRows,
    paired_rows,
)
from passage_jax.evaluate.compare._primary import (
    PrimaryOutcome,
    primary_outcome,
    read_test_evidence,
)
from passage_jax.fileio import atomic_write_json, jsonable, utc_now
from passage_jax.options import merge_options

__all__ = [
    "compare_runs", "COMPARE_FORMAT", "attribution_of", "Comparison", "RESTATED", "restated",
]

COMPARE_FORMAT = "passage-jax-compare-v1"


def attribution_of(A: Side, B: Side) -> dict | None:
    """The component-attribution table of the two runs when either declares a
    ``component_control`` (:mod:`passage_jax.evaluate.attribution`); None otherwise."""
    if not any(s.manifest.get("component_control") for side in (A, B)
               for s in side.seeds.values()):
        return None
    try:
        entries = [run_entry(side.path, f"{n}: {side.method_name}")
                   for n, side in (("A", A), ("B", B))]
    except AttributionError as e:
        raise CompareError(str(e)) from None
    return attribution_rows(entries)


@dataclass(frozen=True)
class Comparison:
    """Everything a comparison file states, step by step: the loaded runs (``sides``, "A"
    and "B"), what their checks established, their seed pairs and rows, the blocks record,
    the six-metric comparison, the contrasts (``contrasts``, ``geometry``, ``latency``), the
    ODD bins and the attribution table."""
    sides: dict
    checks: Checks
    roles: dict
    rows: PairedRows
    blocks: dict
    draws: Draws
    primary: PrimaryOutcome
    contrasts: dict
    geometry: BothValid
    latency: dict
    odd: dict | None = None
    attribution: dict | None = None

    def to_dict(self, created_utc: str) -> dict:
        """The comparison file (JSON types)."""
        restate = restated(self.sides, self.checks, self.roles, self.rows)
        return jsonable({
            "format": COMPARE_FORMAT,
            "created_utc": created_utc,
            **{k: restate[k] for k in RESTATED[:9]},
            "blocks": {k: v for k, v in self.blocks.items() if k != "labels"},
            "bootstrap": self.draws.to_dict(),
            "methods": restate["methods"],
            "contrasts": self.contrasts,
            "valid_route_denominators": self.geometry.counts,
            "geometry_both_valid": self.geometry.to_dict(),
            "latency_contrast": self.latency,
            "validation_recost_ms": restate["validation_recost_ms"],
            "primary_comparison": self.primary.official,
            "confirmatory": self.primary.confirmatory,
            "odd": self.odd,
            "attribution": self.attribution,
        })


#: the blocks of a comparison file that restate its two runs: what their manifests and
#: scores give, before any draw (:func:`restated`); a comparison file read back must hold
#: them as its runs give them (:mod:`~passage_jax.evaluate.compare._verify`)
RESTATED = ("runs", "identity", "procedure_limits", "reference_precision", "split_roles",
            "test_set_result", "inference_protocols", "pairs", "seed_mean", "methods",
            "validation_recost_ms")


def restated(sides: dict, checks: Checks, roles: dict, rows: PairedRows) -> dict:
    """The :data:`RESTATED` blocks of the comparison of the loaded runs ``sides`` ("A",
    "B") from their checks, split roles and paired rows (JSON types)."""
    protocols, shared = checks.protocols, checks.shared
    runs = {n: {"path": s.path, "method_name": s.method_name, "seeds": sorted(s.seeds),
                "canonical": bool(protocols[n].get("canonical", True)),
                "inference_protocol": protocols[n],
                "folders": {str(k): str(v.folder.resolve()) for k, v in s.seeds.items()}}
            for n, s in sides.items()}
    ident = {"n_tasks": len(rows.task_ids), "sample_ids": list(rows.task_ids),
             "tasks_sha256": shared["tasks"]["tasks_sha256"], "data": shared["data"],
             "references": shared["references"],
             "timing_profile": {"profile": shared["timing_profile"],
                                **({} if shared["batch_size"] is None
                                   else {"batch_size": shared["batch_size"]})}}
    methods = {n: {"method_name": s.method_name,
                   "per_seed": {p[0]: method_summary(s.seeds[p[1 if n == "A" else 2]])
                                for p in rows.pairs}}
               for n, s in sides.items()}
    recost = {n: {str(seed): sc.metrics.get("validation_recost_ms")
                  for seed, sc in sorted(s.seeds.items())}
              for n, s in sides.items()}
    return jsonable({
        "runs": runs,
        "identity": ident,
        "procedure_limits": checks.limits,
        "reference_precision": checks.precision,
        "split_roles": roles,
        "test_set_result": all(r["split_role"] == "test" and r["calibration_decisions_sha256"]
                               for r in roles.values()),
        "inference_protocols": protocols,
        "pairs": rows.pairs_dict(),
        "seed_mean": rows.seed_mean,
        "methods": methods,
        "validation_recost_ms": recost,
    })


def _output_file(output, force: bool) -> Path | None:
    if output is None:
        return None
    output = Path(output)
    if output.is_dir():
        raise OutputIsFolder(f"{output} is a folder; --output names the comparison file to write "
                             f"(a folder is never replaced, with or without --force)")
    if output.exists() and not force:
        raise OutputExists(f"{output} exists; choose a new file")
    return output


def _with_boundaries(latency: dict, lim: dict) -> dict:
    """The latency contrast with both runs' timing boundaries and whether they agree."""
    bounds = {n: lim[n]["timing_boundary"] for n in ("A", "B")}
    return {**latency, "timing_boundary": bounds, "same_boundary": bounds["A"] == bounds["B"]}


def _compare(A: Side, B: Side, options: CompareOptions, evidence, odd) -> Comparison:
    """The comparison of two loaded runs, step by step."""
    checks = check_runs(A, B, options)
    rows = paired_rows(A, B)
    roles = {n: split_role_of(S) for n, S in (("A", A), ("B", B))}
    blk = run_blocks(A, B, list(rows.task_ids), rows.a[0]["cluster_id"], options)
    pairing = rows.pairing(blk["labels"], options.draws, blk["uncertainty_status"] == "available")
    primary = primary_outcome(pairing, rows.seeds, rows.seed_mean, blk, options, evidence)
    contrasts = primary_contrasts(pairing, primary.computed)
    geometry = geometry_intersection(pairing)
    latency = _with_boundaries(latency_contrast(pairing), checks.limits)
    return Comparison({"A": A, "B": B}, checks, roles, rows, blk, options.draws, primary,
                      contrasts, geometry, latency,
                      odd=None if odd is None else odd_bins(odd, pairing),
                      attribution=attribution_of(A, B))


def compare_runs(a, b, output=None, options: CompareOptions | None = None, **overrides) -> dict:
    """Paired comparison of two scored runs, written to ``output`` (a new file; None: not
    written) and returned. ``options``: a :class:`CompareOptions`; keyword ``overrides`` set
    its fields (``n_bootstrap=``, ``bootstrap_seed=``, ``roster=`` ...), an unknown name is a
    ``TypeError``. ``shard_draws`` splits the bootstrap draws over all local devices
    (``sharding="auto"``); results do not depend on it. A run under the canonical inference
    protocol is paired with a noncanonical one only with ``allow_noncanonical``
    (:class:`NoncanonicalPairing` otherwise).

    The confirmatory test: ``paired_test="randomization"`` runs the block randomization test
    on the six primary metrics (``randomization_draws`` random swap patterns from
    ``bootstrap_seed`` when the blocks are more than 12; all patterns otherwise);
    ``test_evidence`` reads the six p-values, the test's name and assumptions from a file
    (:func:`read_test_evidence`). Either feeds Holm in ``compare_primary_metrics``, and the
    decision and votes land in ``primary_comparison``; ``confirmatory`` records where the
    p-values came from. Both need the three default seeds on both runs and known blocks
    (:class:`TestEvidenceError` otherwise)."""
    options = merge_options(CompareOptions, options, overrides, "compare_runs")
    output = _output_file(output, options.force)
    evidence = read_test_evidence(options.test_evidence) if options.test_evidence is not None else None
    odd = read_odd_spec(options.odd_spec) if options.odd_spec is not None else None
    comparison = _compare(load_side(a), load_side(b), options, evidence, odd)
    result = comparison.to_dict(utc_now())
    if output is not None:
        atomic_write_json(output, result)
    return result
