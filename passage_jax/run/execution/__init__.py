"""Execution: one seed's requests, timed, through an executor. One seed from its folder in
progress to its files (:mod:`~passage_jax.run.execution.seed`: the requests in order, the
journal, the seed's state, the requests executed here or shared out across a
multi-process launch, the seed's files); the executors and where they run
(:mod:`~passage_jax.run.execution.sessions`: in process, a supervised worker, a session, a
batch at a time; the devices; the planner's construction); the worker process
(:mod:`~passage_jax.run.execution.worker`, :mod:`~passage_jax.run.execution.worker_processes`),
the timed call (:mod:`~passage_jax.run.execution.timing`,
:mod:`~passage_jax.run.execution.device_sync`) and the evaluator's signals
(:mod:`~passage_jax.run.execution.interrupts`)."""
from passage_jax.run.execution.interrupts import (
    RunInterrupted,
    stop_on_signals,
)
from passage_jax.run.execution.seed import (
    JOURNAL_HEADER,
    Journal,
    Leader,
    RequestPlan,
    encode_entry,
    execute_requests,
    execute_shared,
    finish_seed,
    follow,
    leading,
    load_state,
    n_passes,
    pass_at,
    passes,
    run_seed_folder,
    save_state,
    scan_journal,
    share_of,
)
from passage_jax.run.execution.sessions import (
    InProcessExecutor,
    PlannerBuildError,
    SupervisedExecutor,
    open_executor,
    synthetic_warmup_task,
)
from passage_jax.run.execution.timing import (
    block_until_ready,
    execute,
)
from passage_jax.run.execution.worker import (
    task_payload,
)

__all__ = ["RunInterrupted", "stop_on_signals", "passes", "n_passes", "pass_at", "RequestPlan",
           "JOURNAL_HEADER", "Journal", "encode_entry", "scan_journal", "load_state", "save_state",
           "execute_requests", "share_of", "Leader", "leading", "execute_shared", "follow", "finish_seed",
           "run_seed_folder", "PlannerBuildError", "SupervisedExecutor", "synthetic_warmup_task",
           "InProcessExecutor", "open_executor", "execute", "block_until_ready", "task_payload"]
