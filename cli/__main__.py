"""Entry point: ``python -m cli <command> ...``.

Each command lives in its own module ``cli/<name>.py`` exposing
``register(parser)`` (add arguments) and ``main(args) -> int`` (exit status).
Modules are imported only when their command runs, so ``--help`` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from passage_jax import __version__

__all__ = ["COMMANDS", "build_parser", "main"]

#: command -> (module, one-line help). Order is the order of --help.
COMMANDS = {
    "init-spec": ("cli.init_spec", "write a commented starter run spec"),
    "make-cohort": ("cli.make_cohort", "cut real-terrain scenes, solve exact labels, write shards"),
    "audit": ("cli.audit", "validate a dataset root: counts, errors, blocks, reference qualification"),
    "conform": ("cli.conform", "check a planner against the request/result interface"),
    "run": ("cli.run", "run a planner on frozen tasks and persist every timed route"),
    "score": ("cli.score", "score a run offline from its persisted routes"),
    "compare": ("cli.compare", "paired block-bootstrap comparison of two scored runs"),
    "trust": ("cli.trust", "trust axes of scored runs: stability, geographic, ODD boundary, efficiency"),
    "report": ("cli.report", "Markdown report with tables and route figures from a compare"),
    "analyze": ("cli.analyze", "prepare and execute the analysis notebooks of a dataset, per resolution"),
    "bench": ("cli.bench", "run + score a spec and write sidecar.json"),
    "train": ("cli.train", "train the value-field network and write a checkpoint"),
    "doctor": ("cli.doctor", "installed versions against the declared ranges, JAX backend, float64"),
}


def build_parser(load: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cli", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"passage_jax {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name == load:
            importlib.import_module(module).register(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.main(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
