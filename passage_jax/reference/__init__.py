"""Exact references (contract §3).

* :mod:`~passage_jax.reference.vi_kernel` — value iteration written per scene as
  init / step / terminate and vmapped once (``vi_kernel``), with the arithmetic of its
  two paths in :mod:`~passage_jax.reference.vi_ops`;
* :mod:`~passage_jax.reference.vi` — its host driver: ``solve_batch`` (settings: one
  :class:`SolveOptions`, or its fields as keywords) returns one :class:`VIResult`;
  float64, or double-float where float64 is missing (``precision``,
  ``PASSAGE_JAX_REFERENCE_PRECISION``); every name of the kernel is importable from it;
* :mod:`~passage_jax.reference.dfloat` — double-float (float32 pair) arithmetic;
* :mod:`~passage_jax.reference.search` — CPU Dijkstra/A* (:class:`SearchOptions`);
* :mod:`~passage_jax.reference.csgraph` — the scene graph for ``scipy.sparse.csgraph``;
* :mod:`~passage_jax.reference.qualify` — exact references of tasks and qualification
  (:class:`QualifyOptions`).
"""
from passage_jax.precision import REFERENCE_PRECISIONS as PRECISIONS
from passage_jax.precision import resolve_reference_precision as resolve_precision
from passage_jax.reference.csgraph import scipy_graph, scipy_task_graph
from passage_jax.reference.dfloat import DFloat
from passage_jax.reference.qualify import (
    CROSS_CHECK_RTOL,
    POLICIES,
    TASK_KEYS,
    Qualification,
    QualifyOptions,
    ReferenceSolution,
    qualification_failures,
    qualify_scene,
    qualify_scenes,
    solve_tasks,
)
from passage_jax.reference.search import SearchOptions, SearchResult, astar, dijkstra, search
from passage_jax.reference.vi import (
    PRECISION_RTOL,
    SolveOptions,
    VIResult,
    descend_route,
    double_float_inputs,
    solve_batch,
)
from passage_jax.reference.vi_kernel import (
    STATUS_NAMES,
    STRATEGIES,
    SceneInputs,
    SolverConfig,
    SolverState,
    VIOutput,
    solve_scene,
    vi_kernel,
)

# The curated public API. Its shape (a list of imported names) recurs in other
# packages' __init__ modules; only the names differ.
__all__ = [
    # value iteration
    "solve_batch", "SolveOptions", "VIResult", "STATUS_NAMES", "STRATEGIES", "SceneInputs", "SolverConfig",
    "SolverState", "VIOutput", "solve_scene", "vi_kernel", "descend_route",
    # arithmetic of c*
    "PRECISIONS", "PRECISION_RTOL", "resolve_precision", "double_float_inputs", "DFloat",
    # CPU exact search
    "search", "astar", "dijkstra", "SearchResult", "SearchOptions",
    # SciPy graph
    "scipy_graph", "scipy_task_graph",
    # task references and qualification
    "solve_tasks", "ReferenceSolution", "qualify_scene", "qualify_scenes", "QualifyOptions",
    "Qualification",
    "qualification_failures", "POLICIES", "TASK_KEYS", "CROSS_CHECK_RTOL",
]
