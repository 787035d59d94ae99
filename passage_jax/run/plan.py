"""The requests of one seed in execution order: the timing series as passes over the
tasks (a cold pass, ``latency_warmup`` recorded warm-up passes, ``latency_repeats``
measured warm repeats; under a session timing profile one warm pass, its warm-up being
the session's untimed calls), and the check that a journal entry is the request it
stands for."""
from __future__ import annotations

from passage_jax.run.errors import ResumeError
from passage_jax.run.spec import RunSpec

__all__ = ["SERIES", "passes", "RequestPlan", "check_entry"]

SERIES = ("cold", "warmup", "warm")


def passes(spec: RunSpec) -> list[tuple[str, int]]:
    """The timing series as (series, repeat index) passes, in execution order (a session
    profile: one warm pass, no cold pass)."""
    if spec.session_profile:
        return [("warm", 0)]
    return ([("cold", 0)] + [("warmup", i) for i in range(spec.latency_warmup)]
            + [("warm", i) for i in range(spec.latency_repeats)])


class RequestPlan:
    """The seed's requests in execution order: request ``i`` is pass ``i // T`` on task
    ``i % T``, as ``(series, repeat, task index, sample id)`` (computed on demand: nothing
    per request is held)."""

    def __init__(self, spec: RunSpec, stubs):
        self.passes = passes(spec)
        self.stubs = stubs

    def __len__(self) -> int:
        return len(self.passes) * len(self.stubs)

    def __getitem__(self, i: int) -> tuple:
        series, rep = self.passes[i // len(self.stubs)]
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
