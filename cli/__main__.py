"""Entry point: ``python -m cli <command> ...``.

Each command lives in its own module ``cli/<name>.py`` exposing
``register(parser)`` (add arguments) and ``main(args) -> int`` (exit status).
Modules are imported only when their command runs, so ``--help`` is instant.

Before anything loads JAX, a command module's optional ``check(args)`` runs: the named
input files and folders exist, a spec parses and passes its schema, its planner module
can be found (:mod:`cli.inputs`); only then is JAX's compilation cache set up and
``main(args)`` run. An unknown flag is refused with the command's closest option
(``run: unrecognized arguments: --specc (did you mean --spec?)``).

Every command runs inside one error boundary (:func:`failure_line`): whatever escapes
it, a full disk, a folder that is a file, a malformed input the command did not
expect, becomes one line ``<command>: <what failed>`` on standard error and a
non-zero exit, never a traceback (``--debug`` or ``PASSAGE_JAX_DEBUG=1`` shows it). The
line shows every control character escaped (``\\n``, ``\\x1b``: :func:`cli.console.printable`),
so a path or a name holding one cannot forge a second line or drive the terminal.
"""
from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import sys

from cli.console import printable
from passage_jax import __version__

__all__ = ["COMMANDS", "build_parser", "main", "failure_line", "flag_hint", "EXIT_ERROR",
           "EXIT_INTERNAL", "DEBUG_ENV"]

#: command -> (module, one-line help). Order is the order of --help.
COMMANDS = {
    "init-spec": ("cli.init_spec", "write a commented starter run spec"),
    "make-cohort": ("cli.make_cohort", "cut real-terrain scenes, solve exact labels, write shards"),
    "audit": ("cli.audit", "validate a dataset root: counts, errors, blocks, reference qualification"),
    "conform": ("cli.conform", "check a planner against the request/result interface"),
    "admit-test": ("cli.admit_test", "test admission gate: may this split_role: test run proceed"),
    "check-entry": ("cli.check_entry", "reproducible-entry check: what a run or compare has and lacks"),
    "run": ("cli.run", "run a planner on frozen tasks and persist every timed route"),
    "score": ("cli.score", "score a run offline from its persisted routes"),
    "compare": ("cli.compare", "paired block-bootstrap comparison of two scored runs"),
    "trust": ("cli.trust", "trust axes of scored runs: stability, geographic, ODD boundary, efficiency"),
    "report": ("cli.report", "Markdown report with tables and route figures from a compare"),
    "leaderboard": ("cli.leaderboard", "static page ranking compared and scored methods against a baseline"),
    "analyze": ("cli.analyze", "prepare and execute the analysis notebooks of a dataset, per resolution"),
    "bench": ("cli.bench", "run + score a spec and write sidecar.json"),
    "train": ("cli.train", "train the value-field network and write a checkpoint"),
    "doctor": ("cli.doctor", "installed versions against the declared ranges, JAX backend, float64"),
}

#: exit status of a failure the input or the environment caused (named in one line)
EXIT_ERROR = 2
#: exit status of an error inside the evaluator itself (``EX_SOFTWARE``)
EXIT_INTERNAL = 70
#: set to 1 to let a failing command end with its traceback
DEBUG_ENV = "PASSAGE_JAX_DEBUG"
_MAX_LINE = 600
#: commands that compile nothing (no persistent compilation cache is set up for them)
NO_COMPILE = frozenset({"init-spec", "doctor"})


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``(.+?)``")


def plain(text: str | None) -> str | None:
    """``text`` without reST markup, for ``--help``: ``literals`` and :role:`targets` become
    their plain words (``:func:`~a.b.f``` becomes ``f``)."""
    if not text:
        return text

    def role(m):
        target = m.group(1)
        return target.rsplit(".", 1)[-1] if m.group(0).count("`~") else target

    return _LITERAL.sub(r"\1", _ROLE.sub(role, text)).replace("....", "...")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line ``<command>: <what>`` (exit 2), as every
    other failure of a command is; a flag it does not know gets the closest of the
    command's own options (:func:`flag_hint`)."""

    #: the command line being parsed (:func:`build_parser`), read for the did-you-mean
    argv: tuple = ()
    #: on the top-level parser: the loaded command's parser, which owns its flags
    command_parser = None

    def error(self, message):
        owner = self.command_parser
        if owner is not None and message.startswith("unrecognized arguments"):
            owner.error(message)  # the command's flags: name the command, and its --help
        name = self.prog.split()[-1] if self.prog != "python -m cli" else "python -m cli"
        hint = flag_hint(owner or self, self.argv, message)
        self.exit(EXIT_ERROR, printable(f"{name}: {message}{hint} (see {self.prog} --help)") + "\n")


def _known_flag(flag: str, options) -> bool:
    """Whether argparse takes ``flag``: an option string, or (``--`` long options) the
    unambiguous start of one."""
    if flag in options:
        return True
    return flag.startswith("--") and sum(o.startswith(flag) for o in options) == 1


def flag_hint(parser, argv, message: str = "") -> str:
    """``" (did you mean --spec?)"`` for the flags of ``argv`` that ``parser`` does not
    know and that are close to one of its options (difflib, as the spec's unknown keys),
    each named unless ``message`` names it already; empty when none is."""
    options = [o for o in parser._option_string_actions if o.startswith("--")]
    unknown = []
    for token in argv:
        if token == "--":
            break
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and len(flag) > 2 and not _known_flag(flag, options):
            unknown.append(flag)
    hints = []
    for flag in dict.fromkeys(unknown):
        close = difflib.get_close_matches(flag, options, n=1, cutoff=0.6)
        if close:
            hints.append((flag, close[0]))
    if not hints:
        return ""
    named = re.findall(r"--[\w-]+", message)
    if len(hints) == 1 and hints[0][0] in named:
        return f" (did you mean {hints[0][1]}?)"
    return " (" + "; ".join(f"{f}" + ("" if f in named else " is not an option")
                            + f": did you mean {c}?" for f, c in hints) + ")"


def _plain_help(p: argparse.ArgumentParser) -> None:
    for action in p._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            action.help = plain(action.help)


def build_parser(load: str | None = None, argv=()) -> argparse.ArgumentParser:
    """The parser of every command, with the arguments of command ``load`` registered;
    ``argv``, the command line it is for, lets a usage error suggest a flag."""
    parser = _Parser(prog="python -m cli", description=plain(__doc__.splitlines()[0]))
    parser.argv = tuple(argv)
    parser.add_argument("--version", action="version", version=f"passage_jax {__version__}")
    _debug_flag(parser)
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    sub.required = True
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=plain(help_), description=plain(help_))
        _debug_flag(p)
        p.argv = parser.argv
        if name == load:
            importlib.import_module(module).register(p)
            p.description = plain(p.description)
            _plain_help(p)
            parser.command_parser = p
    return parser


def _persistent_cache() -> None:
    """JAX's persistent compilation cache for this command and the processes it starts
    (supervised workers, notebook kernels): :mod:`passage_jax.compilation`."""
    from passage_jax.compilation import enable_persistent_cache  # noqa: PLC0415 (loads JAX)

    enable_persistent_cache(environ=True)


def _debug_flag(p) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help=f"end a failure with its traceback (also: {DEBUG_ENV}=1)")


def _is_library_error(e: BaseException) -> bool:
    """An error the evaluator raises on purpose (its own classes, or the standard ones it
    uses to name bad input), as opposed to a bug."""
    mod = type(e).__module__ or ""
    return (mod.split(".")[0] in ("passage_jax", "cli")
            or isinstance(e, (OSError, ValueError, MemoryError, RecursionError, UnicodeError)))


def _one_line(text: str) -> str:
    """``text`` as one line: control characters shown escaped (:func:`cli.console.printable`,
    so a name holding a newline or an ANSI escape cannot forge a line or colour the
    terminal), runs of spaces as one, cut to :data:`_MAX_LINE` characters."""
    text = " ".join(printable(text).split())
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE - 3] + "..."


def _os_error(e: OSError) -> str:
    what = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        what = "no space left on device"
    elif e.errno == errno.EDQUOT:
        what = "disk quota exceeded"
    names = [n for n in (e.filename, getattr(e, "filename2", None)) if n is not None]
    where = " -> ".join(str(os.fsdecode(n)) for n in names) or "(the file was not named)"
    code = f" [{errno.errorcode.get(e.errno, e.errno)}]" if e.errno is not None else ""
    return f"{where}: {what}{code}; nothing incomplete was accepted as a result"


def failure_line(command: str, e: BaseException) -> tuple[str, int]:
    """The one line and exit status that report ``e`` escaping ``command``."""
    if isinstance(e, OSError) and not type(e).__module__.startswith("passage_jax"):
        return _one_line(f"{command}: {_os_error(e)}"), EXIT_ERROR
    if isinstance(e, MemoryError):
        return _one_line(f"{command}: out of memory{': ' + str(e) if str(e) else ''}"), EXIT_ERROR
    if isinstance(e, RecursionError):
        return _one_line(f"{command}: an input is nested too deeply to read ({e})"), EXIT_ERROR
    text = str(e) or type(e).__name__
    if _is_library_error(e):
        return _one_line(f"{command}: {text}"), EXIT_ERROR
    return (_one_line(f"{command}: internal error {type(e).__name__}: {text} (rerun with --debug "
                      f"or {DEBUG_ENV}=1 for the traceback)"), EXIT_INTERNAL)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in COMMANDS else None, argv)
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        module = importlib.import_module(COMMANDS[args.command][0])
        check = getattr(module, "check", None)
        if check is not None:
            check(args)  # named inputs and the spec, before anything loads JAX
        if args.command not in NO_COMPILE:
            _persistent_cache()
        return int(module.main(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # the boundary: one named line, never a traceback
        if debug:
            raise
        line, code = failure_line(args.command, e)
        print(line, file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
