"""Device work a planner may leave running when it returns, finished before the timer stops.

JAX arrays in a result are waited for by :func:`passage_jax.run.execution.timing.block_until_ready`.
A planner built on PyTorch may leave CUDA kernels queued; :func:`synchronize_torch`
waits for them, but only where the planner itself already uses PyTorch: the evaluator
never imports torch, and never creates a CUDA context (a planner that has not initialised
one has no device work to wait for).
"""
from __future__ import annotations

import sys

__all__ = ["synchronize_torch"]


def synchronize_torch() -> bool:
    """``torch.cuda.synchronize()`` when torch is already imported and its CUDA context is
    available and initialised; returns whether it ran. Nothing is imported here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available() or not cuda.is_initialized():
        return False
    cuda.synchronize()
    return True
