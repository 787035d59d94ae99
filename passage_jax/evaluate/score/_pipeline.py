"""Offline scoring of a run folder (docs/scoring.md; docs/contract.md §4, §7).

``score_run(path)`` scores every ``seed-<seed>/`` folder of a run (or one seed
folder) from what the run persisted: the routes in ``paths.npz``, the terminal
records in ``requests.jsonl`` and the qualified references in
``references.npz``. The planner is never called again. Scenes are reloaded
from the dataset recorded in ``manifest.json`` only for their elevation and
obstacles, after checking the shard hashes and every task's input hash
against what the run recorded; any mismatch is an error.

Per seed folder it writes, each atomically:

* ``per_sample.npz``: one row per task x warm repeat (plain arrays, loads
  with ``allow_pickle=False``), see :data:`PER_SAMPLE_FIELDS`;
* ``metrics.json``: the six primary metrics of the quality repeat and their
  companions, the quality of every other pass, latency per series (legacy
  interpolated percentiles and the ``passage-censored-latency/v1`` block),
  precision, the status/route divergence counts and the ``components`` block
  (:mod:`passage_jax.evaluate.components`: which stage produced each route, per-stage work);
* ``score_receipt.json`` (written last): hashes of every input and output,
  versions, evaluator source hash, time, and what scoring the folder compiled
  (``compilation``: :class:`passage_jax.compilation.CompileCounter` around the score).

A seed folder is scored when its ``score_receipt.json`` exists: that is the last file a
score writes (an earlier score's receipt is removed before the new outputs are written), so
outputs left without a receipt by a score that was killed or failed are stale and are
scored again. An existing score (its receipt) is never overwritten unless ``force=True``
(:class:`AlreadyScored` otherwise).

A run folder is scored only when it is finished: ``run.json`` (written last by ``run``)
declares its seeds, and exactly those ``seed-<seed>/`` folders are scored; each one's
manifest must belong to the run (method name, seed, spec hash, code and the run identity
of ``run_started.json``), its run files must have the manifest's hashes, and the folders
must hold nothing but what a finished run holds, inside them
(:mod:`passage_jax.protocol.runfolder`). Anything else is refused by name
(:class:`RunIncomplete`, :class:`ForeignSeed`, :class:`ScoreError`).

This module orchestrates; each stage is its own module, with frozen dataclasses between
them: read (:mod:`~passage_jax.evaluate.score._folder`: ``SeedFolder.read_inputs`` ->
``SeedInputs``; scenes reloaded by :mod:`~passage_jax.evaluate.score._scenes`), batch
(:mod:`~passage_jax.evaluate.score._batch`: ``Batch``), kernel
(:mod:`~passage_jax.evaluate.score._kernel`: ``BatchScores``), collect
(:mod:`~passage_jax.evaluate.score._collect`: ``Collected`` -> ``ScoreOutputs``) and write
(:mod:`~passage_jax.evaluate.score._write`). The kernel (:func:`score_routes`) and the file
writers are bound here, when a folder is scored.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from passage_jax import cluster
from passage_jax.compilation import CompileCounter
from passage_jax.evaluate.score._batch import BatchPlan, batch_label, kernel_keys_of, make_batch
from passage_jax.evaluate.score._collect import Collected, Collector, collect_outputs
from passage_jax.evaluate.score._folder import (
    SeedFolder,
    SeedInputs,
    is_scored,
    verified_seed_folders,
)
from passage_jax.evaluate.score._format import SCORE_SHARDING, AlreadyScored, ScoreError
from passage_jax.evaluate.score._kernel import SceneStrata, finish_batches, submit_batch
from passage_jax.evaluate.score._load import load_score
from passage_jax.evaluate.score._scenes import (
    ChunkCheck,
    input_check,
    open_run_tasks,
)
from passage_jax.evaluate.score._write import Receipt, Writers, write_score
from passage_jax.fileio import atomic_write_json, atomic_write_npz
from passage_jax.metrics import RouteStream
from passage_jax.protocol.runfolder import RECEIPT

__all__ = ["score_run", "score_folder"]


def _stream(seeds: list) -> RouteStream:
    """The kernel stream of a score (the scoring sharding, the default pixel size) of
    ``seeds`` ((inputs, plan) pairs), its kernels compiled on a background thread while
    the first scenes are read (:meth:`RouteStream.prepare`)."""
    stream = RouteStream(sharding=SCORE_SHARDING)
    stream.prepare(set().union(*(kernel_keys_of(p, i) for i, p in seeds)))
    return stream


@dataclasses.dataclass(frozen=True)
class _Scored:
    """Every record of a seed folder scored, and the dataset its scenes came from."""

    collected: Collected
    dataset_root: Path
    shard_hashes: dict
    input_check: str  #: how the reloaded tasks were vouched for (:func:`input_check`)


class _ShareScorer:
    """Scores this process's chunks while the scenes are read (batch -> kernel ->
    collect), each chunk as one batch of one kernel stream (``stream``, a
    :class:`~passage_jax.metrics.RouteStream`: the rows of every chunk share full kernel
    calls), collected once the read ends (:meth:`finish`); remembers the chunk being
    scored, which a failure in a multi-process launch names (:meth:`describe`)."""

    def __init__(self, inputs: SeedInputs, plan: BatchPlan, stream, check: str = "hash"):
        self.inputs, self.plan, self.stream, self.check = inputs, plan, stream, check
        self.pending: list = []
        self.collector = Collector(len(inputs.records), inputs.n_tasks)
        # recorded at admission, or measured on the reading thread (a run from before)
        self.strata = SceneStrata(plan.share, inputs.refs.scene_strata)
        self.at: str | None = None

    def __call__(self, first: int, scenes) -> None:
        if not self.plan.owns(first):
            return  # another process's chunk
        self.at = batch_label(first, scenes)
        batch = make_batch(self.plan, self.inputs, first, scenes)
        self.pending.append(submit_batch(batch, self.stream, measured=self.strata.of(batch.tasks)))

    def finish(self) -> None:
        """The last kernel calls scored, every batch's results collected."""
        self.at = "the last kernel calls"
        for scores in finish_batches(self.pending, self.stream):
            self.collector.add(scores)
        self.pending = []

    def read_and_score(self, dataset_path, chunk) -> tuple:
        """Read the run's scenes once, scoring this process's chunks as they come; returns
        (dataset root, shard hashes)."""
        inputs = self.inputs
        _tasks, root, shard_hashes = open_run_tasks(inputs.manifest, inputs.refs, inputs.where,
                                                    dataset_path, self, chunk=chunk,
                                                    on_read=self.strata.hook, check=self.check)
        self.finish()
        return root, shard_hashes

    def share(self, dataset_path, chunk) -> dict:
        """:meth:`read_and_score`, then this process's share of the columns."""
        root, shard_hashes = self.read_and_score(dataset_path, chunk)
        tasks = self.plan.share
        records = self.plan.records_of(tasks.start, tasks.stop)
        return {"root": root, "shard_hashes": shard_hashes,
                "share": self.collector.share(records, tasks)}

    def describe(self, e: BaseException) -> str:
        if isinstance(e, ScoreError):
            return str(e)
        text = f"{type(e).__name__}: {e}"
        return f"{self.inputs.where}: {self.at}: {text}" if self.at else text


def _score_records(inputs: SeedInputs, plan: BatchPlan, dataset_path, chunk, check: str) -> _Scored:
    """Every record of ``inputs`` scored: in one process, as the scenes are read; in a
    multi-process launch, each process its share of the chunks, then every share gathered
    on every process. ``check``: :func:`input_check` of the seed."""
    scorer = _ShareScorer(inputs, plan, _stream([(inputs, plan)]), check)
    if cluster.process_count() == 1:
        root, shard_hashes = scorer.read_and_score(dataset_path, chunk)
        return _Scored(scorer.collector.collected(inputs.where), root, shard_hashes, check)
    shares = cluster.run_share(scorer.share, dataset_path, chunk, what=f"scoring {inputs.where}",
                               error=ScoreError, describe=scorer.describe)
    scorer.collector.merge([sh["share"] for sh in shares])
    return _Scored(scorer.collector.collected(inputs.where), shares[cluster.process_index()]["root"],
                   shares[0]["shard_hashes"], check)


def score_folder(folder, force: bool = False, dataset_path=None, *, chunk: int | None = None,
                 check: str | None = None) -> dict:
    """Score one seed folder; returns the metrics dict (also written).

    The scenes are read ``chunk`` at a time; each chunk's records over every pass are
    scored while it is held, and the routes are read from ``paths.npz`` by seeking: peak
    memory is one chunk of grids and its routes plus the per-record columns, whatever
    the number of scenes. The results do not depend on ``chunk``.

    In a multi-process launch (:mod:`passage_jax.cluster`) each process scores its
    contiguous share of the chunks (the others' chunks are read, not scored), the
    per-record results are gathered in task order, and process 0 alone writes the
    files, after every share arrived: they equal a single-process score's. What this
    process compiled while scoring the folder goes into the receipt.

    ``check``: how the reloaded tasks are vouched for (:func:`input_check`; None: by
    provenance where the run was admitted by this evaluator, else by hash; ``"hash"``
    always hashes), recorded in the receipt (``input_check``)."""
    return _score_seeds([Path(folder)], force, dataset_path, chunk, check)[Path(folder).name]


def _refuse_scored(folder: Path, force: bool) -> bool:
    """Whether ``folder`` holds a score (which ``force`` replaces); :class:`AlreadyScored`
    without ``force``."""
    existed = SeedFolder(folder).is_scored()
    if existed and not force:
        raise AlreadyScored(f"{folder} is already scored ({RECEIPT} exists)")
    return existed


def _score_seeds(folders: list, force: bool, dataset_path, chunk, check: str | None = None,
                 verified: dict | None = None) -> dict:
    """Score seed folders that hold the same tasks (:func:`_same_tasks`) from one read of
    their scenes: each chunk, read, validated and hashed once, is checked against every
    seed's records and scored for each; then each folder's files are written as
    :func:`score_folder` writes them (the outputs do not depend on the grouping). The
    receipt of each records what scoring the group compiled. ``verified``: {folder:
    :class:`SeedFolder`} already verified (by :func:`score_run`); any other folder is
    verified as its inputs are read. Returns {folder name: metrics}."""
    existed = [_refuse_scored(f, force) for f in folders]
    verified = verified or {}
    with CompileCounter() as compiling:
        inputs = [verified.get(f, SeedFolder(f)).read_inputs() for f in folders]
        checks = [input_check(i.manifest, check) for i in inputs]
        if len(inputs) == 1 or cluster.process_count() > 1:
            scored = [_score_records(i, BatchPlan.of(i, chunk), dataset_path, chunk, c)
                      for i, c in zip(inputs, checks)]
        else:
            scored = _score_records_together(inputs, dataset_path, chunk, checks)
        outputs = [collect_outputs(i, sc.collected) for i, sc in zip(inputs, scored)]
    if not cluster.is_writer():
        return {f.name: o.metrics for f, o in zip(folders, outputs)}  # process 0 writes the files
    for f, i, sc, o, ex in zip(folders, inputs, scored, outputs, existed):
        receipt = Receipt(inputs={**i.input_hashes, "shards": sc.shard_hashes},
                          dataset_root=sc.dataset_root, forced=ex,
                          compilation=compiling.stats.to_dict(), input_check=sc.input_check)
        # the writers are looked up here, when the folder is scored
        write_score(f, o, receipt, Writers(npz=atomic_write_npz, json=atomic_write_json))
    return {f.name: o.metrics for f, o in zip(folders, outputs)}


class _Together:
    """One read of the scenes for several seed folders: each chunk checked against every
    further seed's records (the first seed's check is :func:`open_run_tasks`' own) and
    scored for every seed."""

    def __init__(self, inputs: list, chunk, checks: list):
        plans = [BatchPlan.of(i, chunk) for i in inputs]
        stream = _stream(list(zip(inputs, plans)))  # one stream: the seeds' rows share calls
        self.scorers = [_ShareScorer(i, p, stream, c) for i, p, c in zip(inputs, plans, checks)]
        for sc in self.scorers[1:]:
            sc.strata = self.scorers[0].strata  # the same tasks: measured once
        # a further seed whose check is by hash hashes each task (the first time: the hash
        # is kept on the task) though the first seed's check did not
        self.checks = [ChunkCheck(i.refs, list(i.manifest["data"]["sample_ids"]), None, i.where, None,
                                  hashes=c == "hash")
                       for i, c in zip(inputs[1:], checks[1:])]

    def __call__(self, first: int, scenes) -> None:
        for check in self.checks:
            check.check(first, scenes)
        for scorer in self.scorers:
            scorer(first, scenes)


def _score_records_together(inputs: list, dataset_path, chunk, checks: list) -> list:
    """:func:`_score_records` of seed folders over the same tasks, in one process, from
    one read of the scenes (``checks``: each seed's :func:`input_check`)."""
    together = _Together(inputs, chunk, checks)
    first = together.scorers[0]
    _tasks, root, shard_hashes = open_run_tasks(inputs[0].manifest, inputs[0].refs, inputs[0].where,
                                                dataset_path, together, chunk=chunk,
                                                on_read=first.strata.hook, check=checks[0])
    for sc in together.scorers:
        sc.finish()
    return [_Scored(sc.collector.collected(i.where), root, shard_hashes, c)
            for sc, i, c in zip(together.scorers, inputs, checks)]


def _same_tasks(folders: list) -> list[list]:
    """``folders`` grouped (in order) by the tasks their manifests record (``data``): the
    seeds of one run share them, and one read of the scenes serves the group."""
    groups: dict[str, list] = {}
    for f in folders:
        try:
            data = SeedFolder(f).manifest().get("data")
            key = json.dumps(data, sort_keys=True, default=str)
        except (ScoreError, TypeError, ValueError):
            key = f"unreadable:{f}"  # scored alone: its own read reports the problem
        groups.setdefault(key, []).append(f)
    return list(groups.values())


def score_run(path, force: bool = False, dataset_path=None, log=None, *,
              chunk: int | None = None, check: str | None = None) -> dict:
    """Score every seed folder of ``path`` (:func:`seed_folders`: exactly the seeds its
    ``run.json`` declares, each verified before anything is read from it: the folder's
    listed contents and nothing else, no link out of it, the identity chain back to
    ``run_started.json``, the manifest's hashes); returns {seed folder name: metrics}.

    A seed folder is scored when its ``score_receipt.json`` exists (:func:`is_scored`).
    Without ``force``: when every seed is scored, :class:`AlreadyScored`; otherwise the
    seeds without a receipt are scored (outputs a stopped score left behind are replaced)
    and the scored ones are kept, their outputs verified against their receipts
    (:func:`load_score`, :class:`ScoreOutdated` when they no longer match). The seeds to
    score that share their tasks (a run's seeds do) are scored from one read of the
    scenes (:func:`_score_seeds`). ``check``: as :func:`score_folder`'s."""
    out = {}
    verified = {s.path: s for s in verified_seed_folders(path)}
    folders = list(verified)
    done = [] if force else [f for f in folders if is_scored(f)]
    if done and len(done) == len(folders):
        raise AlreadyScored(f"{done[0]} is already scored ({RECEIPT} exists)")
    for f in done:
        out[f.name] = load_score(f).metrics
        if log:
            log(f"kept {f} (already scored)")
    for group in _same_tasks([f for f in folders if f not in done]):
        out.update(_score_seeds(group, force, dataset_path, chunk, check, verified))
        if log:
            for f in group:
                log(f"scored {f}")
    return {f.name: out[f.name] for f in folders}
