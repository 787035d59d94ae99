"""passage_jax: a JAX-native evaluator for constrained path planning on real terrain.

One package per stage of the flow (docs/architecture.md), each importing only the
stages above it: ``graph`` (moves, grid operators, cost models; imports no stage),
``stats`` (block bootstrap, Holm, randomization; imports no stage), ``reference``
(exact value iteration, CPU search, qualification; ``graph``), ``metrics`` (jittable
per-route metrics and aggregates; ``graph``), ``protocol`` (planner requests,
results and their persisted records; ``graph``), ``data`` (shards, validation,
audit, shipped terrain, cohort maker; ``graph``, ``reference``, ``stats``),
``planners`` (classical baselines; ``graph``, ``reference``, ``protocol``),
``learned`` (value-field networks, training, decoders, tiling; ``graph``,
``reference``, ``metrics``, ``protocol``, ``data``), ``trust`` (the trust axes;
``metrics``, ``stats``), and two rooms on top that never import each other: ``run``
(live execution) and ``evaluate`` (offline score, compare, report). Leaf modules
any stage may import: ``contract`` (the contract's constants), ``fileio`` (small
file helpers), ``reduce`` (shared reducers), ``checks`` (value checks), ``shapes``
(the size ladder), ``placement`` (device placement), ``compilation`` (the
persistent compilation cache and compile counters), ``precision``, ``memory``,
``cluster`` and ``exports`` (a package's names imported on first use). ``testing``
is material for tests; the library never imports it.
"""
__version__ = "0.1.0"

__all__ = ["__version__"]
