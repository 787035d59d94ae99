"""Runner stage: run specs, admission, timed batch-one execution and the run-folder
files (SPEC §7). Scoring, compare, report and bench build on these files."""
from passage_jax.runner.spec import (  # noqa: F401
    DEFAULT_SEEDS, DEFAULTS, KNOWN, REQUIRED, STARTER_SPEC, RunSpec, SpecError, load_spec,
    parse_spec,
)
from passage_jax.runner.files import (  # noqa: F401
    PATHS_FORMAT, REFERENCES_FORMAT, ROUTE_FORMATS, PathsWriter, atomic_write_json,
    atomic_write_npz, atomic_write_text, code_hash, holds_run, load_paths, pack_routes,
    route_of, sha256_file, snapshot_route, unpack_routes,
)
from passage_jax.runner.timing import block_until_ready, execute  # noqa: F401
from passage_jax.runner.admission import Admitted, AdmissionError, References, admit  # noqa: F401
from passage_jax.runner.run import RunError, passes, read_requests, run_seed, run_spec  # noqa: F401
