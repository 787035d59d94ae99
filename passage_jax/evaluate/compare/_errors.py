"""Why two scored runs cannot be compared: one error family, each refusal its own class."""
from __future__ import annotations

__all__ = ["CompareError", "OutputExists", "OutputIsFolder", "InvalidResamples", "LimitsDiffer",
           "RosterHashMissing", "RosterMismatch", "PrecisionMismatch", "NoncanonicalPairing",
           "TestEvidenceError"]


class CompareError(RuntimeError):
    """The two runs cannot be compared (or an input is malformed)."""


class OutputExists(CompareError, FileExistsError):
    """The comparison file already exists (replacing it must be asked for)."""


class OutputIsFolder(CompareError):
    """The comparison's output path is an existing folder (``force`` replaces a file only)."""


class InvalidResamples(CompareError, ValueError):
    """The number of bootstrap resamples is not a positive integer."""


class LimitsDiffer(CompareError):
    """The runs' procedure limits differ while identical limits are required."""


class RosterHashMissing(CompareError):
    """A roster was given without its sealed sha256, or a sha256 without a roster."""


class RosterMismatch(CompareError):
    """The runs were admitted with different rosters, or a roster was given that is not
    the one the runs recorded."""


class PrecisionMismatch(CompareError):
    """The runs' references came from arithmetic paths with different stated tolerances."""


class NoncanonicalPairing(CompareError):
    """A run under the canonical inference protocol is paired with a noncanonical one."""


class TestEvidenceError(CompareError, ValueError):
    """A paired-test evidence file is malformed, or a confirmatory test cannot be run."""

    __test__ = False   # not a test class
