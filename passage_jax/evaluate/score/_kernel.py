"""The kernel stage of scoring: each :class:`~passage_jax.evaluate.score._batch.Batch` in
(:func:`submit_batch`), their :class:`BatchScores` out once the last is in
(:func:`finish_batches`). The records' routes go through the scoring kernel as one stream
(:class:`passage_jax.metrics.RouteStream`, given by the caller: every batch's rows share
full kernel calls), the tasks' stratifiers
(:data:`~passage_jax.evaluate.score._format.STRATIFIERS`) are taken from the run or
measured on the host, and each integer route's length in cells is taken."""
from __future__ import annotations

import dataclasses

import numpy as np

from passage_jax.data.strata import SCENE_STRATIFIERS, scene_strata, strata_rows
from passage_jax.evaluate.score._batch import Batch
from passage_jax.evaluate.score._format import STRATIFIERS
from passage_jax.graph.routes import route_length_pixels
from passage_jax.protocol.records import ROUTE_FORMAT_CODE

__all__ = [
    "BatchScores", "PendingScores", "submit_batch", "finish_batches", "score_batch", "task_strata",
    "SceneStrata"
]



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


@dataclasses.dataclass(frozen=True)
class PendingScores:
    """A batch handed to the kernel stream (:func:`submit_batch`): its tasks and records,
    its ticket in the stream, and what the host took of it already (route lengths, the
    tasks' stratifiers)."""

    tasks: range
    records: np.ndarray
    ticket: int
    route_length: np.ndarray
    strata: dict


def submit_batch(batch: Batch, stream, *, measured: np.ndarray | None = None) -> PendingScores:
    """Hand ``batch`` to ``stream`` (a :class:`passage_jax.metrics.RouteStream`: its rows
    join the kernel calls of the batches before and after it; the grids are read now and
    not kept). ``measured``: the batch's tasks' :func:`scene_strata` rows when they were
    measured already (as the scenes were read: :class:`SceneStrata`); measured here
    otherwise."""
    strata = task_strata(batch.scenes, batch.scene_references, measured)
    ticket = stream.add(batch.candidates, batch.record_scenes, batch.c_star, batch.request_ok,
                        references=batch.references)
    # only an exact integer route has a length in cells; a malformed route that still
    # has an (L, 2) shape (float coordinates) is -1 like any other malformed one
    is_int = batch.route_format == ROUTE_FORMAT_CODE["int"]
    lengths = np.where(is_int, [0 if c is None else len(c) for c in batch.candidates], -1)
    return PendingScores(tasks=batch.tasks, records=batch.records, ticket=ticket,
                         route_length=lengths, strata=strata)


def finish_batches(pending: list, stream) -> list[BatchScores]:
    """The :class:`BatchScores` of every batch submitted to ``stream``
    (:func:`submit_batch`, in order), once the stream's last calls are scored."""
    results = stream.results()
    out = []
    for p in pending:
        # why a candidate was malformed (an object array) is in the run's records already
        fields = {k: np.asarray(v) for k, v in results[p.ticket].items()}
        fields = {k: v for k, v in fields.items() if v.dtype.kind != "O"}
        out.append(BatchScores(tasks=p.tasks, records=p.records, fields=fields,
                               route_length=p.route_length, strata=p.strata))
    return out


def score_batch(batch: Batch, stream, *, measured: np.ndarray | None = None) -> BatchScores:
    """One batch scored on its own: :func:`submit_batch` to ``stream`` (which holds no
    other batch) and :func:`finish_batches`."""
    return finish_batches([submit_batch(batch, stream, measured=measured)], stream)[0]


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
    """The :data:`~passage_jax.evaluate.score._format.STRATIFIERS` of each task; the
    :data:`SCENE_STRATIFIERS` from ``measured`` (rows of :func:`scene_strata`) when given."""
    rows = strata_rows(scenes) if measured is None else measured
    out = {k: np.empty(len(scenes), np.float64) for k in STRATIFIERS}
    for j, k in enumerate(SCENE_STRATIFIERS):
        out[k][:] = rows[:, j]
    out["reference_length_px"][:] = [route_length_pixels(r) for r in ref_routes]
    return out
