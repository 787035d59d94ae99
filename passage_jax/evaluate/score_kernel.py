"""The kernel stage of scoring: one :class:`~passage_jax.evaluate.score_batch.Batch` in,
its :class:`BatchScores` out. The records' routes go through the scoring kernel
(:func:`passage_jax.metrics.score_routes`, given by the caller), the tasks' stratifiers
(:data:`~passage_jax.evaluate.score_format.STRATIFIERS`) are taken from the run or
measured on the host, and each integer route's length in cells is taken."""
from __future__ import annotations

import dataclasses

import numpy as np

from passage_jax.data.strata import SCENE_STRATIFIERS, scene_strata, strata_rows
from passage_jax.evaluate.score_batch import Batch
from passage_jax.evaluate.score_format import STRATIFIERS
from passage_jax.graph.routes import route_length_pixels
from passage_jax.protocol.records import ROUTE_FORMAT_CODE

__all__ = ["BatchScores", "score_batch", "task_strata", "scene_strata", "SceneStrata",
           "SCENE_STRATIFIERS"]



@dataclasses.dataclass(frozen=True)
class BatchScores:
    """What a batch scored to: per record (``records``) the kernel's numeric fields and
    the route length (-1 for anything but an integer route); per task (``tasks``) the
    stratifiers."""

    tasks: range
    records: np.ndarray
    fields: dict
    route_length: np.ndarray
    strata: dict


def score_batch(batch: Batch, kernel, *, sharding, measured: np.ndarray | None = None) -> BatchScores:
    """Score ``batch`` with ``kernel`` (the signature of
    :func:`passage_jax.metrics.score_routes`), spread over the devices of ``sharding``.
    ``measured``: the batch's tasks' :func:`scene_strata` rows when they were measured
    already (as the scenes were read: :class:`SceneStrata`); measured here otherwise."""
    strata = task_strata(batch.scenes, batch.scene_references, measured)
    res = kernel(batch.candidates, batch.record_scenes, batch.c_star, batch.request_ok,
                 references=batch.references, sharding=sharding)
    fields = {}
    for k, v in res.items():
        v = np.asarray(v)
        if v.dtype.kind == "O":
            continue  # why a candidate was malformed: in the run's records already
        fields[k] = v
    # only an exact integer route has a length in cells; a malformed route that still
    # has an (L, 2) shape (float coordinates) is -1 like any other malformed one
    is_int = batch.route_format == ROUTE_FORMAT_CODE["int"]
    lengths = np.where(is_int, [0 if c is None else len(c) for c in batch.candidates], -1)
    return BatchScores(tasks=batch.tasks, records=batch.records, fields=fields,
                       route_length=lengths, strata=strata)


class SceneStrata:
    """The :func:`scene_strata` rows of a seed's tasks ``owned`` (a range): the ones the run
    recorded at admission (``recorded``, the run's ``references.npz`` ``scene_strata``, all
    tasks), else measured as the scenes are read (:attr:`hook`, an ``on_read`` hook of
    :func:`passage_jax.data.open_tasks`: it runs on the reading thread, each row written
    once, before the chunk holding it is handed on)."""

    def __init__(self, owned: range, recorded: np.ndarray | None = None):
        self.owned = owned
        if recorded is not None:
            self.rows = np.asarray(recorded, np.float64)[owned.start:owned.stop]
            self.hook = None  # nothing to measure
        else:
            self.rows = np.full((len(owned), len(SCENE_STRATIFIERS)), np.nan)
            self.hook = self.measure

    def measure(self, index: int, task) -> None:
        if index in self.owned:
            self.rows[index - self.owned.start] = scene_strata(task)

    def of(self, tasks: range) -> np.ndarray:
        """The rows of ``tasks`` (within ``owned``)."""
        return self.rows[tasks.start - self.owned.start:tasks.stop - self.owned.start]


def task_strata(scenes, ref_routes, measured: np.ndarray | None = None) -> dict:
    """The :data:`~passage_jax.evaluate.score_format.STRATIFIERS` of each task; the
    :data:`SCENE_STRATIFIERS` from ``measured`` (rows of :func:`scene_strata`) when given."""
    rows = strata_rows(scenes) if measured is None else measured
    out = {k: np.empty(len(scenes), np.float64) for k in STRATIFIERS}
    for j, k in enumerate(SCENE_STRATIFIERS):
        out[k][:] = rows[:, j]
    out["reference_length_px"][:] = [route_length_pixels(r) for r in ref_routes]
    return out
