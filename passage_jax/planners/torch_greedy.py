"""Example PyTorch planner: the greedy walker of :mod:`passage_jax.planners.greedy`
written with torch ops and wrapped in :class:`~passage_jax.protocol.torch_adapter.TorchPlanner`.

The "model" is :func:`goal_field`, a per-cell score computed from the input tensors
(here the squared distance to the goal, obstacles set to a sentinel; a trained
network producing an ``(H, W)`` field would take its place), and :func:`descend`
decodes it: from the start, step to the in-grid neighbour of lowest score, ties
broken by the MOVES order, while that score is strictly below the current cell's
squared distance to the goal; stop with ``no_path`` and the partial route
otherwise. On integer squared distances this is exactly the NumPy walker's rule.

A spec names it as::

    inference: passage_jax.planners.torch_greedy:make_planner
    inference_kwargs: {device: cpu, dtype: float32}

It needs the ``torch`` extra; importing this module does not import torch.
"""
from __future__ import annotations

from passage_jax.graph.moves import MOVES
from passage_jax.planners._common import check_kwargs
from passage_jax.protocol.torch_adapter import TorchPlanner, import_torch

__all__ = ["goal_field", "descend", "greedy_walk", "make_planner"]

_KWARGS = ("device", "dtype")


def goal_field(obstacles, goal):
    """``(H, W)`` int64 score: squared distance to ``goal``; obstacles get ``H*H + W*W``,
    above every distance in the grid."""
    torch = import_torch()
    h, w = obstacles.shape
    rows = torch.arange(h, device=obstacles.device).view(h, 1)
    cols = torch.arange(w, device=obstacles.device).view(1, w)
    d2 = (rows - goal[0]) ** 2 + (cols - goal[1]) ** 2
    return torch.where(obstacles, torch.full_like(d2, h * h + w * w), d2)


def descend(field, start, goal):
    """Walk ``field`` from ``start`` while each step strictly lowers the squared distance
    to ``goal``; ``(route (L, 2) int64, "ok" | "no_path")``."""
    torch = import_torch()
    h, w = field.shape
    moves = torch.as_tensor(MOVES, dtype=torch.int64, device=field.device)
    blocked = torch.tensor(h * h + w * w, dtype=torch.int64, device=field.device)
    cur, cells = start.clone(), [start.clone()]
    while not torch.equal(cur, goal):
        nb = cur + moves  # (8, 2) in MOVES order
        inside = (nb[:, 0] >= 0) & (nb[:, 0] < h) & (nb[:, 1] >= 0) & (nb[:, 1] < w)
        score = field[nb[:, 0].clamp(0, h - 1), nb[:, 1].clamp(0, w - 1)]
        score = torch.where(inside, score, blocked)
        k = torch.argmin(score)  # the first minimum: the MOVES tie-break
        if not bool(score[k] < ((cur - goal) ** 2).sum()):
            return torch.stack(cells), "no_path"
        cur = nb[k]
        cells.append(cur)
    return torch.stack(cells), "ok"


def greedy_walk(elevation, obstacles, start, goal):
    """The planner function :class:`TorchPlanner` calls (``elevation`` is not used)."""
    return descend(goal_field(obstacles, goal), start, goal)


def make_planner(**inference_kwargs) -> TorchPlanner:
    """Factory: ``device`` (default ``cpu``) and ``dtype`` (default ``float32``)."""
    check_kwargs("torch_greedy", inference_kwargs, _KWARGS)
    return TorchPlanner(greedy_walk, device=inference_kwargs.get("device", "cpu"),
                        dtype=inference_kwargs.get("dtype", "float32"), name="torch_greedy")
