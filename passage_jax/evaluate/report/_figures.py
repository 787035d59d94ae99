"""The figures of a comparison report, drawn with matplotlib (Agg, files only):

* :func:`route_figure`: candidate A, candidate B and the reference route over a hillshaded
  elevation map with the obstacles, for a few tasks of the first seed pair (those where the
  two methods' regrets differ most, then the first tasks);
* :func:`regret_figure`: the distribution of all-task regret per method (empirical CDF of
  the finite, non-censored regrets on a symmetric-log axis, with the number of failures,
  whose regret is 999999, stated).
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from passage_jax.contract import FAILURE_REGRET
from passage_jax.evaluate.attribution import format_number as _fmt
from passage_jax.evaluate.score import chosen_run_tasks, load_npz, load_score, read_json
from passage_jax.evaluate.text_safety import figure_text
from passage_jax.fileio import atomic_write_bytes
from passage_jax.protocol.records import PathsReader, unpack_routes
from passage_jax.protocol.runfolder import MANIFEST, PATHS, REFERENCES

__all__ = ["route_figure", "regret_figure", "SeedRoutes", "choose_tasks", "ROUTE_STYLES",
           "REGRET_AXIS_LABEL"]

#: how each side's route is drawn: A wide, solid and half transparent underneath, B narrow
#: and dashed on top, so that where the two routes share cells both stay visible (B's
#: dashes inside A's band) and neither route looks cut where it runs under the other
ROUTE_STYLES = {"A": {"color": "tab:red", "lw": 4.2, "ls": "-", "alpha": 0.7, "zorder": 4},
                "B": {"color": "tab:blue", "lw": 1.8, "ls": (0, (4, 2)), "alpha": 1.0, "zorder": 5}}
#: the regret ECDF's x axis: the relative regret of docs/contract.md §4, (route cost − c*) / c*
REGRET_AXIS_LABEL = "relative regret (route cost − c*) / c*  [symlog; 0 = optimal]"


def _figure(**kw):
    """A matplotlib figure on its own Agg canvas (files only), outside pyplot: no global
    figure registry to close it from, the caller's backend left as it was, and half the
    import time of pyplot (about 0.5 s of 1.05 s cold)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415 (optional: figures only)
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def _save_figure(fig, path):
    """Lay out, render to PNG and write atomically."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    atomic_write_bytes(path, buf.getvalue())
    return path


@dataclass(frozen=True)
class SeedRoutes:
    """A scored seed folder's quality rows in task order (``rows``: regret, valid_path,
    status, sample_id, success), its routes (``paths``) and each row's record index."""
    rows: dict
    paths: PathsReader
    record_index: np.ndarray

    @classmethod
    def load(cls, folder: Path) -> SeedRoutes:
        p = load_score(folder).per_sample
        sel = np.flatnonzero(p["primary_quality"])
        sel = sel[np.argsort(p["task_index"][sel], kind="stable")]
        return cls({k: p[k][sel] for k in ("regret", "valid_path", "status", "sample_id", "success")},
                   PathsReader(folder / PATHS), p["record_index"][sel])

    def route(self, i: int):
        """The quality-repeat route of task ``i`` (an integer (L, 2) route, else None)."""
        (rt,) = self.paths.routes_at([int(self.record_index[i])])
        return rt if isinstance(rt, np.ndarray) and rt.ndim == 2 and rt.dtype.kind in "iu" else None


def _hillshade(z: np.ndarray) -> np.ndarray:
    from matplotlib.colors import LightSource  # noqa: PLC0415 (optional: matplotlib only for figures)

    return LightSource(azdeg=315, altdeg=45).hillshade(z, vert_exag=2.0, dx=30.0, dy=30.0)


def _references(fa: Path) -> tuple[list, dict]:
    """The reference routes of seed folder ``fa`` and its tasks' ids and input hashes."""
    ref = load_npz(fa / REFERENCES)
    return (unpack_routes(ref["route_coords"], ref["route_offsets"]),
            {"sample_id": [str(s) for s in ref["sample_id"]],
             "input_sha256": [str(x) for x in ref["input_sha256"]]})


def choose_tasks(ra: np.ndarray, rb: np.ndarray, n_all: int, n_tasks: int) -> list[int]:
    """Up to ``n_tasks`` task indices: half where the regrets ``ra``/``rb`` (capped at 10)
    differ most, then the first tasks."""
    gap = np.abs(np.minimum(ra, 10.0) - np.minimum(rb, 10.0))
    order = list(np.argsort(-gap, kind="stable"))
    chosen = [int(i) for i in order if gap[i] > 0][: n_tasks // 2]
    chosen += [i for i in range(n_all) if i not in chosen][: n_tasks - len(chosen)]
    return chosen[:n_tasks]


def _draw_terrain(ax, t, rr):
    """Elevation (returned: the image, for its colour bar), hillshade, obstacles and the
    reference route."""
    z = np.asarray(t.elevation_m, np.float64)
    im = ax.imshow(z, cmap="terrain", interpolation="nearest")
    ax.imshow(_hillshade(z), cmap="gray", alpha=0.35, interpolation="nearest")
    obst = np.asarray(t.obstacles, bool)
    over = np.zeros(obst.shape + (4,))
    over[obst] = (0.1, 0.1, 0.1, 0.75)
    ax.imshow(over, interpolation="nearest")
    ax.plot(rr[:, 1], rr[:, 0], color="white", lw=4.0, zorder=3)
    ax.plot(rr[:, 1], rr[:, 0], color="black", lw=1.2, ls="--", zorder=3,
            label="reference route")
    return im


def _draw_task(ax, t, rr, i: int, sides: tuple) -> None:
    """One task's panel: terrain, obstacles, the reference route and each side's route
    (``sides``: ``(SeedRoutes, style, label)`` per method, style from :data:`ROUTE_STYLES`),
    start and goal, and the elevation colour bar (metres)."""
    im = _draw_terrain(ax, t, rr)
    for d, style, lab in sides:
        route = d.route(i)
        txt = f"{lab} (regret {_fmt(d.rows['regret'][i], 3)}, {d.rows['status'][i]})"
        if route is not None and len(route):
            ax.plot(route[:, 1], route[:, 0], label=txt, solid_capstyle="round", **style)
        else:
            ax.plot([], [], label=txt + ", no route", **style)
    (r0, c0), (r1, c1) = t.scene.start, t.scene.goal
    ax.scatter([c0], [r0], marker="o", s=70, c="lime", edgecolors="black", zorder=5,
               label="start")
    ax.scatter([c1], [r1], marker="*", s=150, c="yellow", edgecolors="black", zorder=5,
               label="goal")
    ax.set_title(f"scene {t.id}  ({t.objective}/{t.variant})", fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
    cbar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    cbar.set_label("elevation (m)", fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.01), fontsize=8, ncol=2,
              frameon=False)


def route_figure(cmp: dict, path: Path, n_tasks: int = 4) -> Path:
    """The route figure of the comparison ``cmp`` (first seed pair), written to ``path``."""
    pair = cmp["pairs"][0]
    fa = Path(cmp["runs"]["A"]["folders"][str(pair["seed_a"])])
    fb = Path(cmp["runs"]["B"]["folders"][str(pair["seed_b"])])
    da, db = SeedRoutes.load(fa), SeedRoutes.load(fb)
    ref_routes, refs = _references(fa)
    chosen = choose_tasks(da.rows["regret"], db.rows["regret"], len(refs["sample_id"]), n_tasks)
    # only the chosen scenes are decoded, each checked against the run
    tasks = chosen_run_tasks(read_json(fa / MANIFEST), refs, chosen, str(fa))
    ncol = min(len(chosen), 2)
    nrow = int(math.ceil(len(chosen) / ncol))
    fig = _figure(figsize=(6.8 * ncol, 5.6 * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    # names and labels as written: matplotlib's ``$`` math escaped (text_safety.figure_text)
    na, nb = (figure_text(cmp["runs"][s]["method_name"]) for s in ("A", "B"))
    sides = ((da, ROUTE_STYLES["A"], f"A: {na}"), (db, ROUTE_STYLES["B"], f"B: {nb}"))
    for ax, i in zip(axes.ravel(), chosen):
        _draw_task(ax, tasks[i], ref_routes[i], i, sides)
    for ax in axes.ravel()[len(chosen):]:
        ax.axis("off")
    fig.suptitle(f"Routes on terrain (seed pair {figure_text(pair['label'])}); black = obstacles; "
                 f"A wide solid band, B dashed on top", fontsize=12)
    return _save_figure(fig, path)


def _pooled_regrets(cmp: dict, side: str) -> tuple[np.ndarray, int, int]:
    """``(sorted finite non-failure regrets, failures, all rows)`` of one side's quality
    repeat over every seed pair."""
    run = cmp["runs"][side]
    vals, fails, n = [], 0, 0
    for pair in cmp["pairs"]:
        seed = pair["seed_a"] if side == "A" else pair["seed_b"]
        p = load_score(Path(run["folders"][str(seed)])).per_sample
        r = p["regret"][p["primary_quality"]]
        n += r.size
        fails += int(np.sum(r >= FAILURE_REGRET))
        vals.append(r[(r < FAILURE_REGRET) & np.isfinite(r)])
    v = np.sort(np.concatenate(vals)) if vals else np.zeros(0)
    return v, fails, n


def _regret_label(side: str, name, v: np.ndarray, fails: int, n: int) -> str:
    undefined = n - fails - v.size
    return (f"{side}: {figure_text(name)} ("
            + (f"{fails}/{n} failures at regret 999999, not drawn" if fails else
               f"0/{n} failures")
            + (f"; {undefined} undefined (c* <= 0)" if undefined else "") + ")")


def _regret_axes(ax, linthresh: float, lowest: float) -> None:
    ax.set_xscale("symlog", linthresh=linthresh)
    # start left of zero so a curve at regret 0 (an optimal planner) is not hidden under the
    # axis, and negative regrets (a route cheaper than the reference) stay visible
    ax.set_xlim(left=min(-0.3 * linthresh, 1.5 * lowest))
    ax.axvline(0.0, color="0.5", lw=0.8, ls=":", zorder=1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(REGRET_AXIS_LABEL)
    ax.set_ylabel("fraction of all tasks")
    ax.set_title("Regret distribution (quality repeat, all seeds pooled)")
    ax.grid(alpha=0.3)
    # below the axes: inside, it would cover part of a curve (one at 0 rises along the left)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)


def regret_figure(cmp: dict, path: Path) -> Path:
    """The regret-distribution figure of the comparison ``cmp``, written to ``path``."""
    fig = _figure(figsize=(7.5, 5.0))
    ax = fig.subplots()
    linthresh = 1e-3
    lowest = 0.0
    for side, color in (("A", "tab:red"), ("B", "tab:blue")):
        v, fails, n = _pooled_regrets(cmp, side)
        lowest = min(lowest, float(v[0])) if v.size else lowest
        lab = _regret_label(side, cmp["runs"][side]["method_name"], v, fails, n)
        if v.size:
            y = np.arange(1, v.size + 1) / n
            ax.step(np.concatenate([[v[0]], v]), np.concatenate([[0], y]), where="post",
                    color=color, lw=2, label=lab)
        else:
            ax.plot([], [], color=color, label=lab)
    _regret_axes(ax, linthresh, lowest)
    return _save_figure(fig, path)
