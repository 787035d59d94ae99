"""The requests of one seed in execution order: the timing series as passes over the
tasks (a cold pass, ``latency_warmup`` recorded warm-up passes, ``latency_repeats``
measured warm repeats; under a session timing profile one warm pass, its warm-up being
the session's untimed calls), and the check that a journal entry is the request it
stands for. Passes and requests are computed from the counts when asked for (an index, a
generator), never listed up front, so memory does not grow with ``latency_repeats``."""
from __future__ import annotations

from collections.abc import Iterator

from passage_jax.run.errors import ResumeError
from passage_jax.run.specification.parse import RunSpec

__all__ = ["SERIES", "passes", "n_passes", "pass_at", "RequestPlan", "check_entry"]

SERIES = ("cold", "warmup", "warm")


def n_passes(spec: RunSpec) -> int:
    """How many passes a seed makes: 1 under a one-pass profile (a session, the batched
    procedure), else 1 + warm-up + repeats."""
    if spec.one_pass:
        return 1
    return 1 + spec.latency_warmup + spec.latency_repeats


def pass_at(spec: RunSpec, p: int) -> tuple[str, int]:
    """Pass ``p`` (in execution order) as ``(series, repeat index)``, computed from the
    counts: ``cold#0``, then ``warmup#0..W-1``, then ``warm#0..R-1`` (a session profile:
    ``warm#0`` only; so the batched procedure)."""
    if not 0 <= p < n_passes(spec):
        raise IndexError(f"pass {p} of a seed of {n_passes(spec)} passes")
    if spec.one_pass:
        return ("warm", 0)
    if p == 0:
        return ("cold", 0)
    if p <= spec.latency_warmup:
        return ("warmup", p - 1)
    return ("warm", p - 1 - spec.latency_warmup)


def passes(spec: RunSpec) -> Iterator[tuple[str, int]]:
    """The timing series as (series, repeat index) passes, in execution order (a session
    profile: one warm pass, no cold pass), generated one at a time: nothing is built up
    front, whatever the counts."""
    return (pass_at(spec, p) for p in range(n_passes(spec)))


class RequestPlan:
    """The seed's requests in execution order: request ``i`` is pass ``i // T`` on task
    ``i % T``, as ``(series, repeat, task index, sample id)`` (computed on demand from the
    counts: nothing per pass or per request is held)."""

    def __init__(self, spec: RunSpec, stubs):
        self.spec = spec
        self.n_passes = n_passes(spec)
        self.stubs = stubs

    def __len__(self) -> int:
        return self.n_passes * len(self.stubs)

    def __getitem__(self, i: int) -> tuple:
        if not 0 <= i < len(self):
            raise IndexError(f"request {i} of a seed of {len(self)} requests")
        series, rep = pass_at(self.spec, i // len(self.stubs))
        ti = i % len(self.stubs)
        return series, rep, ti, self.stubs[ti].id

    def check_count(self, i: int, where) -> None:
        """:class:`ResumeError` when a journal holds an entry ``i`` past the last request."""
        if i >= len(self):
            raise ResumeError(f"{where}: more than {len(self)} entries for a seed of {len(self)} "
                              f"requests")


def check_entry(rec: dict, i: int, seed: int, row: tuple, where) -> None:
    """:class:`ResumeError` unless journal entry ``i`` is the record of request ``row``."""
    series, rep, ti, sample_id = row
    want = {"record": i, "seed": int(seed), "series": series, "repeat": rep, "task_index": ti,
            "sample_id": sample_id}
    got = {k: rec.get(k) for k in want}
    if got != want:
        raise ResumeError(f"{where}: entry {i} is {got}, the spec's request {i} is {want}; "
                          f"the journal does not belong to this run")
