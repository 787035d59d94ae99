"""One-pass runs across processes: under a session timing profile, each process of a
multi-process launch runs its own persistent session on its share of a seed's roster
(under the batched procedure, its own planner build on its share of the batches), and
process 0 writes the seed.

Under a session timing profile (:mod:`passage_jax.run.execution.sessions`) or the batched
procedure (:mod:`passage_jax.run.execution.batches`) in a multi-process launch
(:mod:`passage_jax.cluster`) :func:`splits_requests` is true, and a seed's missing
records ``[first, T)`` (``first``: the records already durable in process 0's journal, 0
for a new seed) are shared out, contiguous, in process order: in whole chunks of the
admission chunk size under a session profile (:func:`passage_jax.cluster.chunk_share_from`,
the rule ``score`` uses), in whole batches counted from ``first`` under the batched
procedure (the batches a single process would run). Each process builds its planner on
its own local devices, runs the warm-up calls (batches) on the warm-up scene (the same
for every process), then its
share's requests in roster order (:func:`~passage_jax.run.execution.seed_requests.serve_requests`),
keeping the records and route snapshots in memory. The shares are gathered
(:func:`passage_jax.cluster.run_share`); process 0 records one planner build (one
session) per process that served records, appends the records to the seed's journal in
roster order (their indices are the roster's, as in a single process) and writes the
seed files as a single-process run does.

Process 0 leads (:class:`Leader`): before each seed it runs it sends the others its word
(a gather whose payload is process 0's): the seed, its first missing record (so every
process agrees on what is durable), the spec, code and warm-up scene they must share; at
the end its last word (done, or its failure). A seed that process 0 keeps (complete, or
with a complete journal) is never announced. The others follow (:func:`follow`): they
write nothing and need no access to the run folder.

Failures: a share that raises sends its error, and every process fails naming the
process, the seed and its tasks (scenes); a process that dies makes the others' gather
fail naming it (:class:`~passage_jax.cluster.PeerLost`); a failure of process 0 outside
a share (a resume refused, a file it cannot write) is sent to the others, which fail
naming process 0. Nothing of a seed's shares is durable before they are gathered: a
launch that fails mid-seed leaves what was durable before it, and ``run --resume``
shares out the missing records again.
"""
from __future__ import annotations

import contextlib
import contextvars

from passage_jax import cluster
from passage_jax.run.admission import Admitted
from passage_jax.run.context import RunContext
from passage_jax.run.errors import RunError
from passage_jax.run.execution.seed_requests import report, serve_requests
from passage_jax.run.record import Journal, SeedState, save_state
from passage_jax.run.specification import RequestPlan

__all__ = ["splits_requests", "share_of", "Leader", "leading", "execute_shared", "follow"]

#: the Leader of the run this process 0 is leading (while its ``with`` block runs)
_LEADING: contextvars.ContextVar = contextvars.ContextVar("passage_jax_run_leader", default=None)


def leading() -> Leader | None:
    """The :class:`Leader` of the multi-process session run this process leads (process 0,
    inside the leader's ``with`` block), or None."""
    return _LEADING.get()


def splits_requests(spec) -> bool:
    """Whether a run of ``spec`` in this launch shares each seed's requests out across the
    processes (a session timing profile or the batched procedure, in a multi-process
    launch)."""
    return bool(getattr(spec, "one_pass", False)) and cluster.process_count() > 1


def share_of(admitted: Admitted, rows: RequestPlan, first: int, *, process: int | None = None,
             processes: int | None = None) -> range:
    """The records of ``[first, len(rows))`` that process ``process`` (default: this one)
    runs, contiguous: whole chunks of the admission's chunk size under a session profile;
    under the batched procedure whole batches counted from ``first``, so that the batches
    are those a single process would run (each share's last one padded only where the
    seed's last one is)."""
    if admitted.spec.batched:
        mine = cluster.chunk_share_from(0, len(rows) - first, admitted.spec.batch_size,
                                        process=process, processes=processes)
        return range(first + mine.start, first + mine.stop)
    return cluster.chunk_share_from(first, len(rows), admitted.tasks.chunk, process=process,
                                    processes=processes)


def _text(e: BaseException) -> str:
    return str(e) if isinstance(e, RunError) else f"{type(e).__name__}: {e}"


def _where(rows: RequestPlan, mine: range) -> str:
    if not len(mine):
        return "no tasks"
    a, b = rows[mine.start], rows[mine.stop - 1]
    return f"tasks {a[2]}-{b[2]} (scenes {a[3]} to {b[3]})"


def _describer(admitted: Admitted, seed: int, rows: RequestPlan, first: int):
    """How a share's failure is told to the other processes: the seed, the share's tasks
    and scenes, the error."""
    def describe(e: BaseException) -> str:
        text = _text(e).removeprefix(f"seed {seed}: ")
        return f"seed {seed}: {_where(rows, share_of(admitted, rows, first))}: {text}"
    return describe


def _check_word(ctx: RunContext, word: dict) -> None:
    """:class:`RunError` unless this process runs the spec, code and warm-up scene that
    process 0 runs."""
    warmup = None if ctx.admitted.warmup is None else ctx.admitted.warmup.id
    mine = {"spec_sha256": ctx.spec.sha256(), "code_sha256": ctx.code.get("sha256"),
            "warmup_scene": warmup}
    for key, value in mine.items():
        if word.get(key) != value:
            raise RunError(f"{key} {value} is not process 0's ({word.get(key)}); every process "
                           f"must run the same command on the same code and data")


def _run_share(ctx: RunContext, rows: RequestPlan, word: dict) -> dict:
    """This process's share of the seed ``word`` announces: its own session on its records;
    the records (``(line, snapshot)`` in roster order) and the build, to gather."""
    _check_word(ctx, word)
    seed, first = int(word["seed"]), int(word["first"])
    mine = share_of(ctx.admitted, rows, first)
    out = {"start": mine.start, "stop": mine.stop, "records": [], "build": None}
    if not len(mine):
        return out
    records = out["records"]
    try:
        out["build"] = serve_requests(ctx, seed, rows, mine, lambda line, snap: records.append((line, snap)),
                                      resumed_at=first if word["resumed"] else None)
    finally:
        ctx.admitted.tasks.release()
    return out


def _fail(text: str):
    raise RunError(text)


class Leader:
    """Process 0's side of a multi-process session run, held around the whole run (a
    context manager; :func:`leading` returns it meanwhile): :meth:`seed_shares` announces a
    seed and gathers its shares; leaving tells the others that the run is done, or sends
    them process 0's failure."""

    def __init__(self):
        self.owed = True  # the other processes wait for process 0's word
        self._token = None

    def __enter__(self) -> Leader:
        self._token = _LEADING.set(self)
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        _LEADING.reset(self._token)
        if not self.owed:  # the others are gone, or already failed with this process
            return False
        self.owed = False
        if exc is None:
            cluster.gather_shares({"kind": "done"}, what="telling the other processes the run "
                                  "is done", error=RunError)
            return False
        with contextlib.suppress(Exception):  # this process raises its own error, below
            cluster.run_share(_fail, _text(exc), what="telling the other processes of process "
                              "0's failure", error=RunError, describe=str)
        return False

    def seed_shares(self, ctx: RunContext, seed: int, rows: RequestPlan, first: int,
                    resumed: bool) -> list[dict]:
        """Announce seed ``seed`` from record ``first`` on, run this process's share and
        gather every process's, in process order."""
        warmup = None if ctx.admitted.warmup is None else ctx.admitted.warmup.id
        word = {"kind": "seed", "seed": int(seed), "first": int(first), "resumed": bool(resumed),
                "spec_sha256": ctx.spec.sha256(), "code_sha256": ctx.code.get("sha256"),
                "warmup_scene": warmup}
        self.owed = False
        cluster.gather_shares(word, what=f"seed {seed}: announcing its shares", error=RunError)
        shares = cluster.run_share(_run_share, ctx, rows, word, what=f"seed {seed}: gathering "
                                   f"the shares", error=RunError,
                                   describe=_describer(ctx.admitted, seed, rows, first))
        self.owed = True
        return shares


def execute_shared(ctx: RunContext, leader: Leader, seed: int, rows: RequestPlan, journal: Journal,
                   state: SeedState, resumed: bool = False) -> SeedState:
    """Process 0: the records ``journal.n_entries ..`` of ``rows`` shared out across the
    launch's processes by ``leader``, each share's build recorded in the seed state (saved)
    and every record appended to the journal in roster order. Returns the state."""
    first = journal.n_entries
    report(ctx, seed, first, len(rows))
    shares = leader.seed_shares(ctx, seed, rows, first, resumed)
    for share in shares:
        if share["build"] is not None:
            state = state.with_build(share["build"])
    state = save_state(journal.path.parent, state)
    for i, share in enumerate(shares):
        n = share["stop"] - share["start"]
        if n and (share["start"] != journal.n_entries or len(share["records"]) != n):
            raise RunError(f"{journal.path}: process {i}'s share of seed {seed} holds "
                           f"{len(share['records'])} records from record {share['start']}, the "
                           f"journal's next record is {journal.n_entries}")
        for line, snap in share["records"]:
            journal.append(line, snap)
    report(ctx, seed, journal.n_entries, len(rows))
    return state


def follow(admitted: Admitted, log=None) -> dict:
    """A process other than 0: run this process's share of every seed process 0 announces,
    until its last word. Returns ``{"follower": True, "process_index", "shares": [{seed,
    records: [start, stop]}]}``; :class:`RunError` naming the process that failed."""
    ctx = RunContext.of(admitted, log=log)
    rows = RequestPlan(ctx.spec, admitted.tasks.stubs)
    served = []
    while True:
        word = cluster.gather_shares(None, what="waiting for process 0", error=RunError)[0]
        if not isinstance(word, dict) or word.get("kind") not in ("seed", "done"):
            raise RunError(f"process {cluster.process_index()}: process 0 sent {word!r}, not a seed "
                           f"or the end of the run")
        if word["kind"] == "done":
            return {"follower": True, "process_index": cluster.process_index(), "shares": served}
        seed, first = int(word["seed"]), int(word["first"])
        shares = cluster.run_share(_run_share, ctx, rows, word, what=f"seed {seed}: gathering "
                                   f"the shares", error=RunError,
                                   describe=_describer(admitted, seed, rows, first))
        mine = shares[cluster.process_index()]
        served.append({"seed": seed, "records": [mine["start"], mine["stop"]]})
        ctx.say(f"seed {seed}: process {cluster.process_index()} of {cluster.process_count()}: "
                f"{_where(rows, range(mine['start'], mine['stop']))} run and delivered")
