"""The run spec, read and checked before anything loads JAX: its keys and bounds
(:mod:`~passage_jax.run.specification.schema`), the spec itself (:mod:`~passage_jax.run.specification.parse`),
the requests it makes, in order (:mod:`~passage_jax.run.specification.plan`), and where its planner
module is found (:mod:`~passage_jax.run.specification.planner_path`). Nothing here imports JAX."""
from passage_jax.run.specification.parse import (
    SPEC_MAX_BYTES,
    STARTER_SPEC,
    RunSpec,
    SpecError,
    check_plain_name,
    load_spec,
    parse_spec,
)
from passage_jax.run.specification.plan import (
    SERIES,
    RequestPlan,
    check_entry,
    n_passes,
    pass_at,
    passes,
)
from passage_jax.run.specification.planner_path import (
    planner_folders,
    planner_import_path,
    planner_module_problem,
    planner_path_record,
)
from passage_jax.run.specification.schema import (
    CAPS,
    DEFAULTS,
    ECHO_LIMIT,
    EXECUTIONS,
    KNOWN,
    MAX_NAME_LENGTH,
    PLAIN_NAME,
    REFERENCE_POLICIES,
    REQUIRED,
    shown,
)

__all__ = ["DEFAULTS", "ECHO_LIMIT", "EXECUTIONS", "KNOWN", "MAX_NAME_LENGTH", "PLAIN_NAME",
           "REFERENCE_POLICIES", "REQUIRED", "SPEC_MAX_BYTES", "STARTER_SPEC", "RunSpec",
           "SpecError", "check_plain_name", "load_spec", "parse_spec", "shown", "SERIES",
           "RequestPlan", "check_entry", "n_passes", "pass_at", "passes", "planner_folders",
           "planner_import_path", "planner_module_problem", "planner_path_record", "CAPS"]
