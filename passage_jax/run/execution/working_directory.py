"""The run's working directory, kept for the planner's calls in the run's process."""
from __future__ import annotations

import os

from passage_jax.run.errors import RunError

__all__ = ["WorkingDirectory"]


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


class WorkingDirectory:
    """The run's working directory, restored when a planner (in this process) changed it
    during its construction or a request: the run's own paths are absolute, and the
    planner's next call starts from the directory it was built in. Each change is logged
    once per build and counted in the seed's build record."""

    def __init__(self, seed, log):
        self.path, self.seed, self.log = _cwd(), seed, log
        self.changes, self.first = 0, None

    def restore(self, when: str) -> None:
        now = _cwd()  # None: the planner removed the directory it moved into
        if self.path is None or now == self.path:
            return
        try:
            os.chdir(self.path)
        except OSError as e:
            raise RunError(f"seed {self.seed}: the planner changed the working directory during "
                           f"{when} and {self.path} cannot be restored: {e.strerror or e}") from None
        self.changes += 1
        if self.first is None:
            self.first = {"during": when, "changed_to": now}
            if self.log:
                self.log(f"seed {self.seed}: the planner changed the working directory to {now} "
                         f"during {when}; restored {self.path} (a planner must not change it)")

    def record(self) -> dict | None:
        """What the build record says about it (None: the planner never changed it)."""
        if not self.changes:
            return None
        return {"restored_to": self.path, "times": self.changes, **(self.first or {})}
