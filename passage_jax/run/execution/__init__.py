"""Execution: one seed's requests, timed, through an executor. A seed's requests
(:mod:`~passage_jax.run.execution.seed_requests`), shared out across a multi-process
session launch (:mod:`~passage_jax.run.execution.session_shares`); the executors
(:mod:`~passage_jax.run.execution.executors`: in process, a supervised worker
:mod:`~passage_jax.run.execution.supervised`, a session :mod:`~passage_jax.run.execution.sessions`),
the worker process (:mod:`~passage_jax.run.execution.worker`,
:mod:`~passage_jax.run.execution.worker_processes`), the timed call
(:mod:`~passage_jax.run.execution.timing`, :mod:`~passage_jax.run.execution.device_sync`),
the devices (:mod:`~passage_jax.run.execution.devices`), the planner's construction
(:mod:`~passage_jax.run.execution.planner_build`), its working directory
(:mod:`~passage_jax.run.execution.working_directory`) and the evaluator's signals
(:mod:`~passage_jax.run.execution.interrupts`)."""
from passage_jax.run.execution.executors import (
    InProcessExecutor,
    open_executor,
)
from passage_jax.run.execution.interrupts import RunInterrupted, stop_on_signals
from passage_jax.run.execution.planner_build import PlannerBuildError
from passage_jax.run.execution.seed_requests import execute_requests
from passage_jax.run.execution.session_shares import (
    Leader,
    execute_shared,
    follow,
    leading,
    splits_requests,
)
from passage_jax.run.execution.supervised import SupervisedExecutor
from passage_jax.run.execution.timing import block_until_ready, execute
from passage_jax.run.execution.worker import task_payload

__all__ = ["InProcessExecutor", "open_executor", "RunInterrupted", "stop_on_signals",
           "PlannerBuildError", "execute_requests", "Leader", "execute_shared", "follow", "leading",
           "splits_requests", "SupervisedExecutor", "block_until_ready", "execute", "task_payload"]
