"""Reading a score back (:func:`load_score`): a scored seed folder's manifest, metrics,
receipt and ``per_sample.npz`` arrays, verified against the receipt, checked to be of
the structure ``compare``, ``report`` and ``trust`` read, and the metrics checked against
what the rows and the manifest give (:mod:`~passage_jax.evaluate.score._verify`)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from passage_jax.contract import PRIMARY_METRICS
from passage_jax.evaluate.score._folder import is_scored, load_npz, read_json
from passage_jax.evaluate.score._format import (
    METRIC_CONTRACT,
    OUTPUTS,
    PER_SAMPLE_FIELDS,
    PER_SAMPLE_SCALARS,
    SCORE_FORMAT,
    ScoreError,
    ScoreOutdated,
    is_int,
    is_number_or_none,
    short,
)
from passage_jax.evaluate.score._scenes import check_data_fields
from passage_jax.evaluate.score._verify import check_numbers, verify_metrics
from passage_jax.fileio import sha256_file
from passage_jax.protocol.runfolder import MANIFEST, METRICS, PER_SAMPLE, RECEIPT

__all__ = ["load_score", "Score", "METRICS_FIELDS", "MANIFEST_FIELDS"]


@dataclasses.dataclass(frozen=True)
class Score:
    """A scored seed folder read back (:func:`load_score`): its files, each checked."""

    #: the seed folder
    folder: Path
    #: ``manifest.json``: the run's identities, settings and hashes of the run files
    manifest: dict
    #: ``metrics.json``: the seed's metrics (:data:`METRICS_FIELDS` checked)
    metrics: dict
    #: ``score_receipt.json``: hashes of the inputs and outputs, versions, compilation
    receipt: dict
    #: ``per_sample.npz``: {field: array}, the rows and the 0-d scalars
    #: (:data:`~passage_jax.evaluate.score._format.PER_SAMPLE_FIELDS`)
    per_sample: dict


def _is_counter_summary(v) -> bool:
    return (isinstance(v, dict) and is_number_or_none(v.get("median")) and is_number_or_none(v.get("p90"))
            and is_int(v.get("n_reported", 0)))


def _is_components(c) -> bool:
    """The structure of a ``components`` block that compare, report and the attribution
    table read (:func:`passage_jax.evaluate.components.component_summary`)."""
    if not isinstance(c, dict) or not is_int(c.get("n_rows")):
        return False
    rates = ("direct_success_rate", "repair_rate", "fallback_rate", "no_route_stage_rate",
             "fallback_frequency")
    if not all(is_number_or_none(c.get(k)) for k in rates):
        return False
    work, stage_work = c.get("work", {}), c.get("stage_work", {})
    if not isinstance(work, dict) or not all(_is_counter_summary(v) for v in work.values()):
        return False
    return isinstance(stage_work, dict) and all(
        isinstance(sw, dict) and is_int(sw.get("n_rows_ran", 0))
        and all(_is_counter_summary(v) for k, v in sw.items() if k != "n_rows_ran")
        for sw in stage_work.values())


#: metrics.json fields that compare, report and trust read: (field, check, what); the
#: first seven are required
METRICS_FIELDS = (
    ("format", lambda v: v == SCORE_FORMAT,
     f"{SCORE_FORMAT!r} (a score of another format: score the run again with score --force)"),
    ("primary", lambda v: isinstance(v, dict) and all(
        k in v and is_number_or_none(v[k]) for k in PRIMARY_METRICS),
     f"an object of the six primary metrics {list(PRIMARY_METRICS)} (numbers or null)"),
    ("n_tasks", is_int, "an integer"),
    ("n_path_valid", is_int, "an integer"),
    ("connected_rate", is_number_or_none, "a number or null"),
    ("mean_traversals_given_violation", is_number_or_none, "a number or null"),
    ("regret_summary", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("status_counts", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("latency", lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(x, dict) for x in v.values())), "an object of series objects or null"),
    ("latency_warm_quality_repeat", lambda v: v is None or isinstance(v, dict), "an object or null"),
    ("components", lambda v: v is None or _is_components(v),
     "a passage-components-v1 object (n_rows, rates, work and stage_work counters) or null"),
    ("timing_profile", lambda v: v is None or isinstance(v, dict), "an object or null"),
)
#: manifest.json fields that compare, report and trust read (the first one required)
MANIFEST_FIELDS = (
    ("seed", is_int, "an integer"),
    ("method_name", lambda v: v is None or isinstance(v, str), "a string"),
    ("data", lambda v: isinstance(v, dict), "an object"),
    ("references", lambda v: v is None or isinstance(v, dict), "an object"),
    ("timing", lambda v: v is None or isinstance(v, dict), "an object"),
    ("budget", lambda v: v is None or isinstance(v, dict), "an object"),
    ("provenance", lambda v: v is None or isinstance(v, dict), "an object"),
)


def _check_fields(doc: dict, fields, where, required: bool = True) -> None:
    for k, ok, what in fields:
        if k not in doc:
            if required:
                raise ScoreError(f"{where}: field {k!r} is missing")
            continue
        if not ok(doc[k]):
            raise ScoreError(f"{where}: field {k!r} must be {what}, got {short(doc[k])}")


def _check_per_sample(per: dict, where) -> None:
    """Every per_sample.npz row field and scalar present, the rows one-dimensional and of
    one length, the scalars 0-d."""
    missing = [k for k in (*PER_SAMPLE_FIELDS, *PER_SAMPLE_SCALARS) if k not in per]
    if missing:
        raise ScoreError(f"{where}: missing arrays {missing}")
    if np.ndim(per["sample_id"]) != 1:
        raise ScoreError(f"{where}: member 'sample_id' is not one-dimensional")
    n = len(per["sample_id"])
    bad = [k for k in PER_SAMPLE_FIELDS if np.shape(per[k]) != (n,)]
    if bad:
        raise ScoreError(f"{where}: member {bad[0]!r} has shape {np.shape(per[bad[0]])}, not ({n},) "
                         f"like the other row fields")
    scalars = [k for k in PER_SAMPLE_SCALARS if np.ndim(per[k]) != 0]
    if scalars:
        raise ScoreError(f"{where}: member {scalars[0]!r} is not a 0-d array")


def _check_receipt(folder: Path, verify: bool) -> dict:
    """The receipt of scored ``folder``, its outputs present (and with ``verify``, they and
    the manifest of the hashes it records)."""
    receipt = read_json(folder / RECEIPT)
    outputs, inputs = receipt.get("outputs"), receipt.get("inputs")
    if not isinstance(outputs, dict) or not all(isinstance(v, str) for v in outputs.values()):
        raise ScoreError(f"{folder / RECEIPT}: field 'outputs' must be an object of sha256 hashes")
    if not isinstance(inputs, dict) or not isinstance(inputs.get(MANIFEST), str):
        raise ScoreError(f"{folder / RECEIPT}: field 'inputs' must be an object with the sha256 of "
                         f"{MANIFEST}")
    for n in OUTPUTS:
        if not (folder / n).is_file():
            raise ScoreOutdated(f"{folder} is not scored completely ({n} missing, {RECEIPT} "
                                f"present); the folder needs scoring again")
    if verify:
        for n, h in outputs.items():
            got = sha256_file(folder / n)
            if got != h:
                raise ScoreOutdated(f"{folder / n}: sha256 {got} differs from the score "
                                    f"receipt's {h}; the folder needs scoring again")
        if sha256_file(folder / MANIFEST) != inputs[MANIFEST]:
            raise ScoreOutdated(f"{folder / MANIFEST} changed after scoring; the folder "
                                f"needs scoring again")
    return receipt


def load_score(folder, verify: bool = True) -> Score:
    """Read a scored seed folder: manifest, metrics, receipt and per_sample arrays.

    A folder is scored when its ``score_receipt.json`` exists, as for ``score``
    (:func:`~passage_jax.evaluate.score._folder.is_scored`); without it the folder is not
    scored (whatever other outputs a stopped score left). With ``verify``, the outputs and
    the manifest must match the receipt's hashes (:class:`ScoreOutdated` otherwise). Every
    file must be readable and of the structure compare, report and trust read
    (:class:`ScoreError` naming the file and field otherwise), its numbers finite and in
    their domain, and ``metrics.json`` what ``per_sample.npz`` and the manifest give of it
    (:func:`~passage_jax.evaluate.score._verify.verify_metrics`), whatever the receipt says."""
    folder = Path(folder)
    if not is_scored(folder):
        raise ScoreError(f"{folder} is not scored ({RECEIPT} missing)")
    receipt = _check_receipt(folder, verify)
    per = load_npz(folder / PER_SAMPLE)
    if str(per.get("metric_contract")) != METRIC_CONTRACT:
        raise ScoreError(f"{folder / PER_SAMPLE}: metric_contract "
                         f"{per.get('metric_contract')!r} is not {METRIC_CONTRACT}")
    _check_per_sample(per, folder / PER_SAMPLE)
    manifest = read_json(folder / MANIFEST)
    _check_fields(manifest, MANIFEST_FIELDS[:1], folder / MANIFEST)
    _check_fields(manifest, MANIFEST_FIELDS[1:], folder / MANIFEST, required=False)
    check_data_fields(manifest.get("data") or {}, str(folder / MANIFEST))
    metrics = read_json(folder / METRICS)
    check_numbers(metrics, folder / METRICS)
    _check_fields(metrics, METRICS_FIELDS[:7], folder / METRICS)
    _check_fields(metrics, METRICS_FIELDS[7:], folder / METRICS, required=False)
    verify_metrics(metrics, per, manifest, folder)
    return Score(folder=folder, manifest=manifest, metrics=metrics, receipt=receipt, per_sample=per)
