"""The errors of a run and of a run folder."""
from __future__ import annotations

__all__ = ["RunError", "OutputFolderTaken", "ResumeError"]


class RunError(RuntimeError):
    """The run cannot proceed (output folder taken, planner construction failed ...)."""


class OutputFolderTaken(RunError, FileExistsError):
    """The output folder exists and is not empty (it may hold a run)."""


class ResumeError(RunError):
    """A run folder cannot be resumed: it holds a different run (the differing field is
    named), another process is running it, or its durable records are corrupt."""
