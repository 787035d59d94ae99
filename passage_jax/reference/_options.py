"""Options objects with keyword overrides: one frozen dataclass per entry point
(validated in its ``__post_init__``), and the keywords a caller passes instead."""
from __future__ import annotations

import dataclasses

__all__ = ["merge_options"]


def merge_options(cls, options, overrides: dict, caller: str):
    """``options`` (an instance of the dataclass ``cls``, or None for its defaults) with
    the keyword ``overrides`` applied (and validated again). TypeError naming the
    keywords that are not fields of ``cls``, or when ``options`` is not a ``cls``."""
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"{caller}(): options must be a {cls.__name__} or None, got "
                        f"{type(options).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(k for k in overrides if k not in names)
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s) {unknown}; "
                        f"known: {names + ['options']}")
    if options is None:
        return cls(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options
