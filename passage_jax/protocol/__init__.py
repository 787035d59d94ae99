"""Planner protocol (SPEC §6): requests, results, budgets, statuses and adapters."""
from passage_jax.graph.spec import GraphSpec  # noqa: F401  (re-export)
from passage_jax.protocol.contracts import (  # noqa: F401
    LIMIT_COUNTER, METADATA_ALLOWLIST, REQUEST_FIELDS, STAGES, STATUSES, SUMMED_COUNTERS,
    WORK_KEYS, BudgetSpec, PlanRequest, PlanResult, ProtocolError, accumulate_stages,
    budget_problem, filter_metadata, normalise_result,
)
from passage_jax.protocol.requests import build_request, request_graph  # noqa: F401
from passage_jax.protocol.adapters import (  # noqa: F401
    INFERENCE_FORMATS, FlaxPlanner, Planner, as_planner, import_entry, is_factory, load_planner,
    planner_factory,
)
