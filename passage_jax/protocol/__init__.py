"""Planner protocol (contract §6): requests, results, budgets, statuses, adapters and the
run-folder records a run writes and an evaluation reads."""
from passage_jax.contract import INFERENCE_FORMATS
from passage_jax.graph.spec import GraphSpec  # noqa: F401  (re-export)
from passage_jax.protocol.adapters import (
    FlaxPlanner,
    Planner,
    as_planner,
    import_entry,
    is_factory,
    load_planner,
    planner_factory,
)
from passage_jax.protocol.contracts import (  # noqa: F401
    LIMIT_COUNTER,
    METADATA_ALLOWLIST,
    REQUEST_FIELDS,
    SEARCH_STATUS,
    STAGES,
    STATUSES,
    SUMMED_COUNTERS,
    WORK_KEYS,
    BudgetSpec,
    FrozenMapping,
    HandedOver,
    PlanRequest,
    PlanResult,
    ProtocolError,
    accumulate_stages,
    budget_problem,
    filter_metadata,
    normalise_result,
    work_counters,
)
from passage_jax.protocol.records import (  # noqa: F401
    PATHS_FORMAT,
    RECORD_KEYS,
    REFERENCES_FORMAT,
    REQUESTS_FORMAT,
    ROUTE_FORMAT_CODE,
    ROUTE_FORMATS,
    RUN_FORMAT,
    PathsWriter,
    code_hash,
    input_hash,
    load_paths,
    pack_routes,
    package_versions,
    read_requests,
    references_identity,
    route_of,
    snapshot_route,
    unpack_routes,
)
from passage_jax.protocol.requests import build_request, request_graph  # noqa: F401

# Public names. The shape of this block (an import list, then __all__) recurs in every
# module that re-exports names; only the names differ.
__all__ = [
    # requests, results, budgets (contracts, requests)
    "GraphSpec", "PlanRequest", "PlanResult", "BudgetSpec", "ProtocolError", "HandedOver",
    "FrozenMapping", "STATUSES",
    "WORK_KEYS", "STAGES", "LIMIT_COUNTER", "SUMMED_COUNTERS", "METADATA_ALLOWLIST",
    "REQUEST_FIELDS", "filter_metadata", "accumulate_stages", "normalise_result",
    "budget_problem", "build_request", "request_graph", "SEARCH_STATUS", "work_counters",
    # adapters
    "INFERENCE_FORMATS", "Planner", "FlaxPlanner", "as_planner", "import_entry", "is_factory",
    "load_planner", "planner_factory",
    # run-folder records (records)
    "PATHS_FORMAT", "REFERENCES_FORMAT", "RUN_FORMAT", "REQUESTS_FORMAT", "RECORD_KEYS",
    "ROUTE_FORMATS", "ROUTE_FORMAT_CODE", "snapshot_route", "PathsWriter", "load_paths",
    "route_of", "pack_routes", "unpack_routes", "read_requests", "input_hash",
    "references_identity", "code_hash", "package_versions",
]
