"""Multi-process launch flags shared by ``audit``, ``run`` and ``score``
(``docs/distributed.md``): ``--coordinator HOST:PORT --num-processes N --process-id I``,
or the same from ``PASSAGE_JAX_COORDINATOR`` / ``PASSAGE_JAX_NUM_PROCESSES`` /
``PASSAGE_JAX_PROCESS_ID``, or from a launcher JAX detects (SLURM, Open MPI)."""
from __future__ import annotations

import argparse
import sys

from cli.console import say

__all__ = ["add_flags", "join", "fail", "positive_int"]


def add_flags(p) -> None:
    g = p.add_argument_group("multi-process launch (docs/distributed.md)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="address of process 0's coordinator (every process names the same); "
                        "default: $PASSAGE_JAX_COORDINATOR or the launcher's")
    g.add_argument("--num-processes", type=positive_int, default=None, metavar="N",
                   help="processes in the launch (default: $PASSAGE_JAX_NUM_PROCESSES or the launcher's)")
    g.add_argument("--process-id", type=_index, default=None, metavar="I",
                   help="this process's index in [0, N); process 0 writes the outputs "
                        "(default: $PASSAGE_JAX_PROCESS_ID or the launcher's)")


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _index(text: str) -> int:
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {v}")
    return v


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def join(args, prog: str) -> int | None:
    """Join the launch the flags or the environment describe (nothing for a single
    process); an exit status when that fails, else None."""
    from passage_jax.cluster import ClusterError, init_from_args  # noqa: PLC0415 (CLI start-up)

    try:
        init_from_args(args)
    except ClusterError as e:
        say(f"{prog}: {e}", sys.stderr)
        return 2
    return None


def fail(prog: str, e: Exception, code: int = 2) -> int:
    """Report a launch failure. A process that died (not a share that failed and told
    the others) leaves the runtime unable to shut down in order: end this process now."""
    from passage_jax.cluster import PeerLost, abandon  # noqa: PLC0415 (CLI start-up)

    say(f"{prog}: {e}", sys.stderr)
    if isinstance(e, PeerLost):
        abandon(code)
    return code
