"""The write stage of scoring: a seed folder's :class:`~passage_jax.evaluate.score._collect.
ScoreOutputs` written, each file atomically, and the receipt last.

An earlier receipt is removed first and the new one written after ``per_sample.npz`` and
``metrics.json`` (with the directory made durable in between): a score stopped anywhere
leaves the folder not scored, and it is scored again without ``--force``. Only process 0
of a multi-process launch writes (:func:`passage_jax.cluster.is_writer`, checked by the
caller)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from passage_jax.evaluate.score._collect import ScoreOutputs
from passage_jax.evaluate.score._format import METRIC_CONTRACT, RECEIPT_FORMAT, SCORE_SHARDING
from passage_jax.fileio import fsync_dir, sha256_file, utc_now
from passage_jax.metrics import sharding_devices
from passage_jax.protocol.records import code_hash, package_versions
from passage_jax.protocol.runfolder import METRICS, PER_SAMPLE, RECEIPT

__all__ = ["Writers", "Receipt", "write_score", "COMPILATION_FIELDS"]

#: the :class:`passage_jax.compilation.CompileStats` fields a receipt's ``compilation`` holds
COMPILATION_FIELDS = ("compilations", "cache_hits", "compiled", "compile_s", "trace_s", "lower_s")


@dataclasses.dataclass(frozen=True)
class Writers:
    """How the outputs reach the disk: ``npz(path, arrays)`` and ``json(path, doc)``
    (:func:`passage_jax.fileio.atomic_write_npz` and ``atomic_write_json``)."""

    npz: Callable
    json: Callable


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What ``score_receipt.json`` records besides the hashes of the outputs: the hashes of
    every input (manifest, run files, shards), the dataset root, whether the score was
    forced, what scoring the folder compiled
    (:meth:`passage_jax.compilation.CompileStats.to_dict`), and how the reloaded tasks were
    vouched for (:func:`passage_jax.evaluate.score._scenes.input_check`)."""

    inputs: dict
    dataset_root: Path
    forced: bool
    compilation: dict
    input_check: str = "hash"

    def document(self, folder: Path) -> dict:
        """The receipt of ``folder`` whose outputs were just written."""
        return {
            "format": RECEIPT_FORMAT,
            "metric_contract": METRIC_CONTRACT,
            "run_folder": str(folder.resolve()),
            "dataset_root": str(Path(self.dataset_root).resolve()),
            "inputs": self.inputs,
            "outputs": {n: sha256_file(folder / n) for n in (PER_SAMPLE, METRICS)},
            "evaluator": code_hash(),
            "versions": package_versions(),
            "devices": sharding_devices(SCORE_SHARDING),
            "scored_utc": utc_now(),
            "forced": bool(self.forced),
            "input_check": self.input_check,
            "compilation": {k: self.compilation[k] for k in COMPILATION_FIELDS},
        }


def write_score(folder: Path, outputs: ScoreOutputs, receipt: Receipt, writers: Writers) -> None:
    """Write ``outputs`` into ``folder`` and then its receipt (an earlier receipt removed
    first)."""
    (folder / RECEIPT).unlink(missing_ok=True)
    fsync_dir(folder)
    writers.npz(folder / PER_SAMPLE, outputs.rows)
    writers.json(folder / METRICS, outputs.metrics)
    fsync_dir(folder)
    writers.json(folder / RECEIPT, receipt.document(folder))

