"""Exact references (SPEC §3): batched float64 value iteration (JAX), CPU exact
search (Dijkstra/A*) and reference qualification."""
from passage_jax.reference.vi import (  # noqa: F401
    STATUS_NAMES, STRATEGIES, VIResult, descend_route, solve_batch, vi_kernel,
)
from passage_jax.reference.search import SearchResult, astar, dijkstra, search  # noqa: F401
from passage_jax.reference.qualify import (  # noqa: F401
    CROSS_CHECK_RTOL, POLICIES, TASK_KEYS, Qualification, ReferenceSolution,
    qualification_failures, qualify_scene, qualify_scenes, solve_tasks,
)
