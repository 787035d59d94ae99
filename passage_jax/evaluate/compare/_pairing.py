"""What a paired comparison pairs: seed pairs of the two runs, their quality rows in task
order, and the :class:`Pairing` every contrast takes (rows, blocks, bootstrap draws).

A seed pair is ``(label, seed of A, seed of B)``: every seed when both runs hold the same
seeds (then the contrasts are seed means), the common seeds otherwise, or the one seed of
each run when they share none.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from passage_jax.contract import UNPLACED
from passage_jax.evaluate.compare._checks import Side
from passage_jax.evaluate.compare._errors import CompareError
from passage_jax.evaluate.score import STRATIFIERS, Score
from passage_jax.protocol.runfolder import PER_SAMPLE

__all__ = ["QUALITY_FIELDS", "RECORD_FIELDS", "Draws", "Pairing", "PairedRows", "quality_rows",
           "pairs_of", "paired_rows"]

QUALITY_FIELDS = ("regret", "assd", "h95", "success", "obstacle_violation", "valid_path",
                  "connected_path", "latency_ms", "cluster_id", "sample_id", "oracle_cost")
#: the per-task fields of a seed's record for :func:`~passage_jax.stats.compare_primary_metrics`
RECORD_FIELDS = ("regret", "assd", "h95", "success", "obstacle_violation", "valid_path")


@dataclass(frozen=True)
class Draws:
    """The bootstrap every contrast of a comparison shares: ``n`` draws from ``seed``, a
    percentile interval at ``alpha``, the draws axis placed by ``sharding``."""
    n: int
    alpha: float = 0.05
    seed: int = 0
    sharding: str | None = None

    @classmethod
    def of(cls, boot: dict) -> Draws:
        """From the mapping form ``{"n", "alpha", "seed"[, "sharding"]}``."""
        return cls(n=int(boot["n"]), alpha=float(boot["alpha"]), seed=int(boot["seed"]),
                   sharding=boot.get("sharding"))

    def to_dict(self) -> dict:
        """The comparison file's ``bootstrap`` block."""
        return {"n_resamples": self.n, "alpha": self.alpha, "seed": self.seed,
                "interval": "percentile over paired whole-block draws"}


def _available(blocks) -> bool:
    """Whether an interval is supported: every task has a block and two are known."""
    known = {b for b in blocks if b is not None and b != UNPLACED}
    return len(known) >= 2 and all(b is not None for b in blocks)


@dataclass(frozen=True)
class Pairing:
    """The compared rows, pair by pair: ``a[i]`` and ``b[i]`` are the quality rows (field ->
    per-task array, task order) of the two runs' seeds of pair ``labels[i]``; ``blocks`` the
    resampling block of each task; ``draws`` the bootstrap; ``available``: whether the blocks
    support an interval (otherwise contrasts are estimates only)."""
    labels: tuple
    a: tuple
    b: tuple
    blocks: tuple
    draws: Draws
    available: bool
    task_ids: tuple = ()

    @classmethod
    def of(cls, a, b, labels, blocks, boot, available: bool) -> Pairing:
        """From the separate pieces (``boot``: a :class:`Draws` or its mapping form)."""
        draws = boot if isinstance(boot, Draws) else Draws.of(boot)
        return cls(tuple(labels), tuple(a), tuple(b), tuple(blocks), draws, bool(available))

    def values(self, field: str) -> tuple[list, list]:
        """The per-pair float64 arrays of ``field`` of A and of B."""
        return ([np.asarray(r[field], np.float64) for r in self.a],
                [np.asarray(r[field], np.float64) for r in self.b])

    def with_rows(self, a, b) -> Pairing:
        """The same pairs, blocks and draws over other rows (e.g. masked fields)."""
        return dataclasses.replace(self, a=tuple(a), b=tuple(b))

    def subset(self, sel: np.ndarray) -> Pairing:
        """The tasks ``sel`` (indices) only; the interval's support is judged on their blocks."""
        blocks = tuple(self.blocks[i] for i in sel)
        return dataclasses.replace(
            self, a=tuple({k: v[sel] for k, v in r.items()} for r in self.a),
            b=tuple({k: v[sel] for k, v in r.items()} for r in self.b), blocks=blocks,
            available=_available(blocks), task_ids=tuple(self.task_ids[i] for i in sel)
            if self.task_ids else ())

    def seed_records(self, side: str) -> dict:
        """One side's per-seed task records (seed -> task ids and :data:`RECORD_FIELDS`)."""
        rows = self.a if side == "A" else self.b
        ids = list(self.task_ids)
        return {int(lab): {"task_id": ids, **{f: r[f] for f in RECORD_FIELDS}}
                for lab, r in zip(self.labels, rows)}


def quality_rows(score: Score) -> dict:
    """The quality repeat's rows in task order."""
    p = score.per_sample
    sel = np.flatnonzero(p["primary_quality"])
    sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
    out = {k: p[k][sel] for k in QUALITY_FIELDS}
    for k in STRATIFIERS:
        out[f"stratum_{k}"] = p[f"stratum_{k}"][sel]
    return out


def pairs_of(A: Side, B: Side) -> tuple[list, bool]:
    sa, sb = sorted(A.seeds), sorted(B.seeds)
    if sa == sb:
        return [(f"{s}", s, s) for s in sa], True
    common = sorted(set(sa) & set(sb))
    if common:
        return [(f"{s}", s, s) for s in common], False
    if len(sa) == 1 and len(sb) == 1:
        return [(f"A:{sa[0]}/B:{sb[0]}", sa[0], sb[0])], False
    raise CompareError(f"the runs share no seed (A {sa}, B {sb}); compare seed folders one "
                       f"pair at a time")


@dataclass(frozen=True)
class PairedRows:
    """The seed pairs of two loaded runs and their quality rows: ``pairs`` as
    ``(label, seed A, seed B)``, ``seed_mean`` whether both runs hold the same seeds,
    ``a``/``b`` the rows per pair, ``task_ids`` the shared task order, ``seeds`` each run's
    sorted seeds."""
    pairs: tuple
    seed_mean: bool
    a: tuple
    b: tuple
    task_ids: tuple
    seeds: dict

    @property
    def labels(self) -> tuple:
        return tuple(p[0] for p in self.pairs)

    def pairing(self, blocks, draws: Draws, available: bool) -> Pairing:
        return Pairing(self.labels, self.a, self.b, tuple(blocks), draws, bool(available),
                       self.task_ids)

    def pairs_dict(self) -> list:
        """The comparison file's ``pairs``."""
        return [{"label": p[0], "seed_a": p[1], "seed_b": p[2]} for p in self.pairs]


def paired_rows(A: Side, B: Side) -> PairedRows:
    """The seed pairs of runs ``A`` and ``B`` (loaded sides) and their quality rows; refused
    when the rows are not in the runs' task order or the runs block the tasks differently."""
    pairs, seed_mean = pairs_of(A, B)
    ra = tuple(quality_rows(A.seeds[p[1]]) for p in pairs)
    rb = tuple(quality_rows(B.seeds[p[2]]) for p in pairs)
    ids = [str(s) for s in ra[0]["sample_id"]]
    for r in ra + rb:
        if [str(s) for s in r["sample_id"]] != ids:
            raise CompareError(f"{PER_SAMPLE} rows are not in the runs' task order")
    if any((r["cluster_id"] != ra[0]["cluster_id"]).any() for r in rb):
        raise CompareError("the two runs assign different geographic blocks to the same tasks")
    return PairedRows(tuple(pairs), bool(seed_mean), ra, rb, tuple(ids),
                      {"A": sorted(A.seeds), "B": sorted(B.seeds)})
