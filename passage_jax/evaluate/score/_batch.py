"""The batch stage of scoring: which records each chunk of reloaded scenes scores
(:class:`BatchPlan`), and one chunk's kernel inputs (:class:`Batch`).

A chunk of scenes is scored as one batch: every record of its tasks, over every pass
(cold, warm-up and warm alike), with its persisted route read from ``paths.npz`` by
seeking. In a multi-process launch each process scores a contiguous share of whole
chunks (:func:`passage_jax.cluster.chunk_share`), so a batch is the same whatever the
number of processes.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from passage_jax import cluster
from passage_jax.data import chunk_scenes
from passage_jax.evaluate.score._folder import SeedInputs
from passage_jax.metrics.host_batch import kernel_keys
from passage_jax.protocol.records import ROUTE_FORMAT_CODE

__all__ = ["BatchPlan", "Batch", "make_batch", "batch_label", "kernel_keys_of"]


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How a seed folder's records are batched: ``chunk`` scenes at a time, this
    process's ``share`` of the tasks (whole chunks), and the records of each task
    (``by_task[first_record[t]:first_record[t + 1]]``: record indices grouped by task)."""

    n_tasks: int
    chunk: int
    share: range
    by_task: np.ndarray
    first_record: np.ndarray

    @classmethod
    def of(cls, inputs: SeedInputs, chunk: int | None = None) -> BatchPlan:
        """The plan of ``inputs``: ``chunk`` scenes per batch (default: the grid-cell
        budget of :func:`passage_jax.data.chunk_scenes` at the run's resolution)."""
        n_tasks, ti = inputs.n_tasks, inputs.records.task_index
        size = chunk or chunk_scenes(int((inputs.manifest.get("data") or {}).get("resolution") or 1))
        by_task = np.argsort(ti, kind="stable")
        return cls(n_tasks=n_tasks, chunk=size, share=cluster.chunk_share(n_tasks, size),
                   by_task=by_task, first_record=np.searchsorted(ti[by_task], np.arange(n_tasks + 1)))

    def owns(self, first: int) -> bool:
        """Whether the chunk starting at task ``first`` is this process's to score."""
        return first in self.share

    def records_of(self, start: int, stop: int) -> np.ndarray:
        """The records of tasks ``[start, stop)``, ascending."""
        return np.sort(self.by_task[self.first_record[start]:self.first_record[stop]])


@dataclasses.dataclass(frozen=True)
class Batch:
    """One chunk of tasks and every record of theirs, as the kernel takes them: per
    record its persisted route, its task, c*, whether its status is ``ok`` and the
    reference route; per task of the chunk its scene and reference route."""

    tasks: range
    scenes: tuple
    scene_references: list
    records: np.ndarray
    record_tasks: np.ndarray
    candidates: list
    route_format: np.ndarray
    c_star: np.ndarray
    request_ok: np.ndarray
    references: list

    @property
    def record_scenes(self) -> list:
        """The scene of each record."""
        return [self.scenes[j - self.tasks.start] for j in self.record_tasks]

    @property
    def label(self) -> str:
        """What an error in this batch names (:func:`batch_label`)."""
        return batch_label(self.tasks.start, self.scenes)


def kernel_keys_of(plan: BatchPlan, inputs: SeedInputs) -> set:
    """The (rung, pairwise) kernels this process's records will call
    (:func:`passage_jax.metrics.host_batch.kernel_keys`), from the run's files alone: each
    record's integer route length (``paths.npz`` offsets; any other route scores as an
    empty one) and its task's reference length."""
    records = plan.records_of(plan.share.start, plan.share.stop)
    offsets = np.asarray(inputs.paths.index["offsets"], np.int64)
    is_int = inputs.paths.route_format[records] == ROUTE_FORMAT_CODE["int"]
    cand = np.where(is_int, offsets[records + 1] - offsets[records], 0)
    ref_lens = np.fromiter((len(r) for r in inputs.refs.routes), np.int64, len(inputs.refs.routes))
    return kernel_keys(cand, ref_lens[inputs.records.task_index[records]])


def batch_label(first: int, scenes) -> str:
    """``tasks a-b (scenes x to y)``: the chunk of ``scenes`` that starts at task ``first``."""
    return f"tasks {first}-{first + len(scenes) - 1} (scenes {scenes[0].id} to {scenes[-1].id})"


def make_batch(plan: BatchPlan, inputs: SeedInputs, first: int, scenes) -> Batch:
    """The batch of the chunk of ``scenes`` that starts at task ``first``: its records
    (:meth:`BatchPlan.records_of`) and their routes, read from ``paths.npz``."""
    tasks = range(first, first + len(scenes))
    refs, records = inputs.refs, inputs.records
    idx = plan.records_of(tasks.start, tasks.stop)
    ti = records.task_index[idx]
    return Batch(tasks=tasks, scenes=tuple(scenes), scene_references=refs.routes[tasks.start:tasks.stop],
                 records=idx, record_tasks=ti, candidates=inputs.paths.routes_at(idx),
                 route_format=inputs.paths.route_format[idx], c_star=refs.c_star[ti],
                 request_ok=records.status[idx] == "ok", references=[refs.routes[j] for j in ti])
