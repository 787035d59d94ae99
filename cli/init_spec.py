"""``python -m cli init-spec --out F``: write a commented starter run spec."""
from __future__ import annotations

import sys
from pathlib import Path

from cli.console import say


def register(p):
    p.add_argument("--out", required=True, help="where to write the YAML spec (must not exist)")


def main(args) -> int:
    # command start-up: the library loads only when the command runs (--help stays instant)
    from passage_jax.fileio import atomic_write_text  # noqa: PLC0415 (CLI start-up)
    from passage_jax.run.specification import STARTER_SPEC  # noqa: PLC0415 (CLI start-up)

    out = Path(args.out)
    if out.exists() or out.is_symlink():
        say(f"init-spec: {out} already exists; refusing to overwrite it", sys.stderr)
        return 2
    try:
        atomic_write_text(out, STARTER_SPEC)
    except OSError as e:
        say(f"init-spec: cannot write {out}: {e.strerror or e}", sys.stderr)
        return 2
    say(f"wrote {out}")
    return 0
