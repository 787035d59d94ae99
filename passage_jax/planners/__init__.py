"""Planners: the classical baselines, each importable as
``passage_jax.planners.<name>:make_planner`` (a factory taking ``inference_kwargs``).

``exact``: float64 value iteration per request; ``bounded``: CPU Dijkstra/A* under
an expansion budget; ``bfs``: the fewest-steps route, ignoring the cost model;
``greedy``: a straight-line walker that may fail.
"""
from passage_jax.planners.bfs import BFSPlanner
from passage_jax.planners.bounded import BoundedPlanner
from passage_jax.planners.exact import ExactPlanner
from passage_jax.planners.greedy import GreedyPlanner

#: Names of the baseline modules (``passage_jax.planners.<name>:make_planner``).
BASELINES = ("exact", "bounded", "bfs", "greedy")

__all__ = ["BASELINES", "BFSPlanner", "BoundedPlanner", "ExactPlanner", "GreedyPlanner"]
