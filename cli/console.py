"""Console rendering of library results (rich tables): the library returns data, the
command line draws it.

Every table is followed by its footnotes (:func:`metrics_footnotes`,
:func:`contrast_footnotes`): the geometry columns are over each method's own valid routes
(with n valid / n), why a value or an interval is not available, and, when a regret figure
is the failure penalty, the success-conditional regret beside it.

**Text a user named or a file held is shown, never interpreted.** Every string on the
console that comes from a user (a path, a name) or from a file (a scene id, an error, a
method name) goes through :func:`printable`: each control character (C0, DEL, C1, the
Unicode line and paragraph separators and bidirectional overrides) is shown as its
escape (``\\n``, ``\\x1b``), so such a string never starts a new line, moves the cursor
or colours the terminal. On rich's console it is passed as text (:func:`text`, or
``markup=False``), never as markup, so ``rk[/]x`` and ``[red]`` print as typed.
:func:`say` prints one such line with plain ``print``. Importing this module does not
import rich (the error boundary of ``cli/__main__.py`` uses :func:`printable`).
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["print_metrics_table", "metrics_footnotes", "contrast_footnotes", "interval_reason",
           "success_regret", "quality_of", "print_footnotes", "pulled_up", "printable", "say",
           "text", "make_console"]

#: the characters :func:`printable` escapes: C0 controls, DEL, C1 controls, the Unicode line
#: and paragraph separators, and the bidirectional embeddings, overrides and isolates
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(value) -> str:
    """``str(value)`` with every control character shown as its escape (``\\n``, ``\\t``,
    ``\\x1b``, ``\\x85``, ``\\u2028``): one line that cannot move the cursor, colour the
    terminal or forge a line of its own, whatever a user named or a file held."""
    return _CONTROL.sub(_escape, str(value))


def say(line, file=None) -> None:
    """Print ``line`` as one :func:`printable` line (standard output, or ``file``)."""
    print(printable(line), file=sys.stdout if file is None else file, flush=file is sys.stderr)


def text(value, style: str | None = None):
    """``value`` as rich text (:func:`printable`, never read as markup), for a table's
    title or cell or ``console.print``."""
    from rich.text import Text  # noqa: PLC0415 (the module loads without rich)

    return Text(printable(value), style=style or "")


def make_console(**kwargs):
    """A rich console that reads no markup, emoji codes or highlights from the strings it is
    given (what it prints of a user's or a file's text is :func:`text`)."""
    from rich.console import Console  # noqa: PLC0415 (the module loads without rich)

    return Console(markup=False, emoji=False, highlight=False, **kwargs)

#: the regret metrics of the six: the ones a failure's penalty can dominate
REGRET_METRICS = ("regret_median", "regret_p90")


def print_metrics_table(scores: dict, title: str = "six primary metrics", console=None,
                        folders: dict | None = None) -> Table:
    """The six primary metrics of each scored seed (and their seed mean) as a rich table,
    from :func:`passage_jax.evaluate.metrics_rows`, then its footnotes
    (:func:`metrics_footnotes`; ``folders`` maps a seed's name to its scored folder, for the
    success-conditional regret)."""
    from rich.table import Table  # noqa: PLC0415 (CLI start-up)

    from passage_jax.evaluate import METRICS_COLUMNS, metrics_rows  # noqa: PLC0415 (CLI start-up)

    t = Table(title=text(title))
    for c in METRICS_COLUMNS:
        t.add_column(c, justify="left" if c == "seed" else "right", no_wrap=True)
    for row in metrics_rows(scores):
        t.add_row(*(text(x) for x in row))
    if console is None:
        console = make_console()
        console.width = max(console.width, 120)
    console.print(t)
    print_footnotes(metrics_footnotes(scores, folders), console)
    return t


def print_footnotes(lines: list, console=None) -> None:
    """Footnote lines under a table, as plain text (no rich markup is read from them, control
    characters shown escaped: :func:`printable`)."""
    if console is None:
        console = make_console()
    for line in lines:
        console.print(text(line), soft_wrap=True)


def _fmt(x) -> str:
    from passage_jax.evaluate.attribution import format_number  # noqa: PLC0415 (CLI start-up)

    return format_number(x)


def _label(name) -> str:
    name = str(name)
    return name[5:] if name.startswith("seed-") else name


def _failure_regret() -> float:
    from passage_jax.contract import FAILURE_REGRET  # noqa: PLC0415 (CLI start-up)

    return FAILURE_REGRET


def _is_penalty(x) -> bool:
    return x is not None and math.isfinite(float(x)) and float(x) >= _failure_regret()


def pulled_up(value, rows: dict | None) -> bool:
    """Whether a regret figure (median, p90) is raised by failed tasks: above every
    successful task's regret while some task failed (the quantile then reaches, or
    interpolates towards, the failure penalty). Without the per-task ``rows``: whether it is
    the penalty itself."""
    if value is None or not math.isfinite(float(value)):
        return False
    if rows is None:
        return _is_penalty(value)
    import numpy as np  # noqa: PLC0415 (CLI start-up)

    ok = np.asarray(rows["success"], bool)
    if ok.all():
        return False
    reg = np.asarray(rows["regret"], np.float64)[ok]
    reg = reg[np.isfinite(reg)]
    top = float(reg.max()) if reg.size else -math.inf
    return float(value) > top + 1e-9 * max(1.0, abs(top) if math.isfinite(top) else 1.0)


def quality_of(folder) -> dict | None:
    """The quality repeat's per-task rows of a scored seed folder (task order), or None when
    they cannot be read (a footnote is then left out, never the table)."""
    from passage_jax.evaluate import load_score  # noqa: PLC0415 (CLI start-up)
    from passage_jax.evaluate.compare import quality_rows  # noqa: PLC0415 (CLI start-up)

    try:
        return quality_rows(load_score(Path(folder), verify=False))
    except Exception:  # noqa: BLE001  (a footnote's extra figures are optional)
        return None


def success_regret(rows: dict, mask=None) -> dict:
    """Median and p90 regret over the tasks that succeeded (and lie in ``mask``), with their
    count: the regret of the routes a method did deliver, apart from the failure penalty."""
    import numpy as np  # noqa: PLC0415 (CLI start-up)

    ok = np.asarray(rows["success"], bool)
    if mask is not None:
        ok = ok & np.asarray(mask, bool)
    reg = np.asarray(rows["regret"], np.float64)[ok]
    reg = reg[np.isfinite(reg)]
    if reg.size == 0:
        return {"n": 0, "median": None, "p90": None}
    return {"n": int(reg.size), "median": float(np.quantile(reg, 0.5)),
            "p90": float(np.quantile(reg, 0.9))}


def metrics_footnotes(scores: dict, folders: dict | None = None) -> list[str]:
    """The footnotes of the six-metric table of ``scores`` (seed name -> ``metrics.json``):
    the geometry denominators, why a cell is n/a, and the success-conditional regret of a seed
    whose regret median or p90 is the failure penalty (read from ``folders[name]``)."""
    pen = _failure_regret()
    counts = ", ".join(f"{_label(n)}: {m['n_path_valid']}/{m['n_tasks']}" for n, m in scores.items())
    lines = [f"ASSD mean and H95 mean are over each seed's own valid routes (n valid / n: {counts}); "
             f"regret and the rates are over all tasks, a failed task's regret being the failure "
             f"penalty {pen:.0f}."]
    for n, m in scores.items():
        p = m["primary"]
        na = [k for k in ("assd_mean", "h95_mean") if p.get(k) is None
              or not math.isfinite(float(p[k]))]
        if na:
            why = ("no valid route" if m["n_path_valid"] == 0
                   else "no finite value over the valid routes")
            lines.append(f"seed {_label(n)}: {' and '.join(na)} n/a: {why} "
                         f"({m['n_path_valid']}/{m['n_tasks']} valid).")
        failed = (m["n_tasks"] - round(float(p["success_rate"]) * m["n_tasks"])
                  if p.get("success_rate") is not None else None)
        if not failed:
            continue
        rows = quality_of(folders[n]) if folders and n in folders else None
        dominated = [k for k in REGRET_METRICS if pulled_up(p.get(k), rows)]
        if not dominated:
            continue
        text = (f"seed {_label(n)}: {' and '.join(dominated)} "
                f"({', '.join(_fmt(p[k]) for k in dominated)}) is raised by the failure penalty "
                f"{pen:.0f} ({failed} of {m['n_tasks']} tasks failed)")
        if rows is not None:
            s = success_regret(rows)
            text += (f"; success-conditional regret over its {s['n']} successful task(s): median "
                     f"{_fmt(s['median'])}, p90 {_fmt(s['p90'])}" if s["n"] else
                     "; no task succeeded, so there is no success-conditional regret")
        lines.append(text + ".")
    return lines


def interval_reason(c: dict, blocks: dict | None = None) -> str | None:
    """Why a contrast has no interval (None when it has one): the contrast's own reason, the
    undefined bootstrap draws, or the blocks' missing uncertainty."""
    if c.get("ci_available") and c.get("ci_low") is not None:
        return None
    if c.get("reason"):
        return str(c["reason"])
    if c.get("delta") is None:
        return "no contrast: a method has no value for this metric"
    if c.get("n_undefined_draws"):
        return (f"{c['n_undefined_draws']}/{c.get('n_bootstrap')} bootstrap draws undefined (a "
                f"resample held no valid route of a method)")
    if blocks and blocks.get("uncertainty_status") != "available":
        return f"uncertainty {blocks.get('uncertainty_status')}: {blocks.get('reason') or 'no blocks'}"
    return "the percentile interval is undefined"


def _pair_rows(res: dict) -> list:
    """``(label, rows A, rows B)`` of each compared seed pair, or [] when a folder cannot be
    read."""
    out = []
    for p in res["pairs"]:
        fa = res["runs"]["A"]["folders"].get(str(p["seed_a"]))
        fb = res["runs"]["B"]["folders"].get(str(p["seed_b"]))
        ra = quality_of(fa) if fa else None
        rb = quality_of(fb) if fb else None
        if ra is None or rb is None or len(ra["regret"]) != len(rb["regret"]):
            return []
        out.append((p["label"], ra, rb))
    return out


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _regret_note(res: dict, dominated: list, pairs: list) -> str:
    """The success-conditional regret beside a regret contrast the failure penalty dominates."""
    import numpy as np  # noqa: PLC0415 (CLI start-up)

    pen = _failure_regret()
    fails = []
    for side in ("A", "B"):
        for lab, m in res["methods"][side]["per_seed"].items():
            sr = m["primary"].get("success_rate")
            if sr is not None:
                fails.append(f"{side} {lab}: {m['n_tasks'] - round(float(sr) * m['n_tasks'])}"
                             f"/{m['n_tasks']} failed")
    text = (f"{' and '.join(dominated)}: the contrast is dominated by failures (a failed task's "
            f"regret is the penalty {pen:.0f}; {', '.join(fails)})")
    if not pairs:
        return text + "."
    own = {"A": [], "B": []}
    both_d = {"median": [], "p90": []}
    n_both = []
    for _, ra, rb in pairs:
        own["A"].append(success_regret(ra))
        own["B"].append(success_regret(rb))
        both = np.asarray(ra["success"], bool) & np.asarray(rb["success"], bool)
        sa, sb = success_regret(ra, both), success_regret(rb, both)
        n_both.append(sa["n"])
        for q in ("median", "p90"):
            both_d[q].append(None if sa[q] is None or sb[q] is None else sa[q] - sb[q])
    over = "seed mean over pairs" if len(pairs) > 1 else "one pair"
    parts = []
    for side in ("A", "B"):
        parts.append(f"{side} median {_fmt(_mean([s['median'] for s in own[side]]))}, p90 "
                     f"{_fmt(_mean([s['p90'] for s in own[side]]))} over its successes "
                     f"({'/'.join(str(s['n']) for s in own[side])})")
    if min(n_both) == 0:
        both_text = "no task succeeded for both methods in some pair: no both-successful contrast"
    else:
        both_text = (f"A − B over the tasks both solved ({'/'.join(map(str, n_both))}): median "
                     f"{_fmt(_mean(both_d['median']))}, p90 {_fmt(_mean(both_d['p90']))}")
    return f"{text}. Success-conditional regret ({over}): {'; '.join(parts)}; {both_text}."


def contrast_footnotes(res: dict) -> list[str]:
    """The footnotes of the contrast table of comparison ``res``: the geometry contrasts'
    denominators and the both-valid contrast, why each missing interval is missing, and the
    success-conditional regret when a regret contrast is dominated by failures."""
    lines = []
    dens = res.get("valid_route_denominators") or {}
    if dens:
        counts = ", ".join(f"{lab}: A {c['n_valid_a']}/{c['n_tasks']}, B {c['n_valid_b']}/"
                           f"{c['n_tasks']}, both {c['n_both_valid']}" for lab, c in dens.items())
        gb = res.get("geometry_both_valid") or {}
        both = []
        for g in ("assd_mean", "h95_mean"):
            e = gb.get(g) or {}
            if e.get("delta") is not None:
                iv = (f"[{_fmt(e['ci_low'])}, {_fmt(e['ci_high'])}]" if e.get("ci_available")
                      else "no interval")
                both.append(f"{g} {_fmt(e['delta'])} {iv}")
        lines.append(f"assd_mean and h95_mean compare each method over its own valid routes "
                     f"(n valid / n per pair: {counts})"
                     + (f"; over the routes both made valid: {', '.join(both)}" if both else
                        "; the both-valid intersection is empty, no geometry contrast on it")
                     + ".")
    blocks = res.get("blocks") or {}
    reasons: dict = {}
    for k, c in res["contrasts"].items():
        why = interval_reason(c, blocks)
        if why:
            reasons.setdefault(why, []).append(k)
    for why, keys in reasons.items():
        what = ("every contrast" if len(keys) == len(res["contrasts"]) and len(keys) > 1
                else ", ".join(keys))
        lines.append(f"interval n/a for {what}: {why}.")
    pairs = _pair_rows(res)
    per_seed = {side: res["methods"][side]["per_seed"] for side in ("A", "B")}
    if pairs:
        dominated = [k for k in REGRET_METRICS if k in res["contrasts"] and any(
            pulled_up((per_seed[side].get(lab) or {}).get("primary", {}).get(k), rows)
            for lab, ra, rb in pairs for side, rows in (("A", ra), ("B", rb)))]
    else:
        dominated = [k for k in REGRET_METRICS if k in res["contrasts"] and any(
            _is_penalty(m["primary"].get(k)) for side in ("A", "B") for m in per_seed[side].values())]
    if dominated:
        lines.append(_regret_note(res, dominated, pairs))
    return lines
