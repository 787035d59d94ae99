"""A package's re-exported names, imported when first used (PEP 562).

A package ``__init__`` that re-exports names from its modules lists them here, by
module, instead of importing every module up front::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, {
        "passage_jax.data.codec": ("decode_tensor", "encode_tensor"),
    })

``from passage_jax.data import decode_tensor`` then imports ``passage_jax.data.codec``
alone, so a command loads only the modules it uses (``score`` never loads the audit,
the notebooks or SciPy's spatial module). Each name is bound on the package the first
time it is read; the package's ``__all__`` and ``dir()`` list every name.
"""
from __future__ import annotations

import importlib
import sys

__all__ = ["lazy_exports"]


def lazy_exports(package: str, table: dict[str, tuple[str, ...]]):
    """(``__getattr__``, ``__dir__``, ``__all__``) of ``package`` re-exporting the names
    of ``table`` (module -> names). A name listed under two modules is a programming
    error (ValueError)."""
    where: dict[str, str] = {}
    for module, names in table.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} is exported by {where[name]} and {module}")
            where[name] = module

    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, list(where)
