"""Options objects with keyword overrides, the one pattern of every entry point that
takes options: a frozen dataclass (validated in its ``__post_init__``) and the keywords a
caller passes instead of building one."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["merge_options"]


def merge_options(cls, options, overrides: Mapping[str, Any], caller: str):
    """``options`` (an instance of the dataclass ``cls``, or None for its defaults) with
    the keyword ``overrides`` applied (and validated again by ``cls``). TypeError naming
    ``caller`` and the keywords that are not fields of ``cls``, or when ``options`` is
    not a ``cls``."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(k for k in overrides if k not in names)
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s): {', '.join(map(repr, unknown))}; "
                        f"known: {', '.join(names)} (or options=)")
    if options is not None and not isinstance(options, cls):
        raise TypeError(f"{caller}(): options must be a {cls.__name__} or None, got "
                        f"{type(options).__name__}")
    if options is None:
        return cls(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options
