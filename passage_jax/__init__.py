"""passage_jax: a JAX-native evaluator for constrained path planning on real terrain.

One package per stage of the flow (DESIGN.md): ``graph`` (moves, grid operators,
cost models), ``data`` (shards, validation, audit, shipped terrain), ``reference``
(exact value iteration, CPU search, qualification), ``metrics`` (jittable per-route
metrics and aggregates), ``stats`` (block bootstrap, Holm, randomization),
``protocol`` (planner requests, results and their persisted records), ``planners``
(classical baselines), and two rooms on top: ``run`` (live execution) and
``evaluate`` (offline score, compare, report). ``contract`` holds the contract's
constants, ``fileio`` the small file helpers, ``reduce`` the shared reducers and
``testing`` material for tests.
"""
__version__ = "0.1.0"

__all__ = ["__version__"]
