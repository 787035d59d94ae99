"""The run spec, read and checked before anything loads JAX: its keys and bounds
(:mod:`~passage_jax.run.specification.schema`), the spec itself
(:mod:`~passage_jax.run.specification.parse`) and where its planner module is found
(:mod:`~passage_jax.run.specification.planner_path`). The requests a spec makes, in order,
are :mod:`passage_jax.run.execution.seed`'s. Nothing here imports JAX."""
from passage_jax.run.specification.parse import (
    SPEC_MAX_BYTES,
    STARTER_SPEC,
    RunSpec,
    SpecError,
    check_plain_name,
    load_spec,
    parse_spec,
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

__all__ = ["RunSpec", "SpecError", "parse_spec", "load_spec", "STARTER_SPEC", "SPEC_MAX_BYTES",
           "check_plain_name", "planner_folders", "planner_import_path", "planner_module_problem",
           "planner_path_record", "REQUIRED", "DEFAULTS", "KNOWN", "REFERENCE_POLICIES", "EXECUTIONS",
           "ECHO_LIMIT", "PLAIN_NAME", "MAX_NAME_LENGTH", "shown", "CAPS"]
