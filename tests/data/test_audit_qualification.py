"""``audit`` qualifies every valid scene's six references (docs/contract.md §3)."""
from __future__ import annotations

import json

import numpy as np

from cli.__main__ import main as cli_main
from passage_jax.data import load_scenes, shipped_cohort_root
from passage_jax.data.writer import write_split
from passage_jax.graph import route_cost, route_problem
from passage_jax.reference import astar


def _rows(scenes):
    return [{"id": s.id, "tensor": s.input_tensor("obstacles"), "routes": dict(s.routes),
             "metadata": s.metadata} for s in scenes]


def _audit(root, out):
    rc = cli_main(["audit", "--dataset-path", str(root), "--resolution", "64",
                   "--json", str(out), "--workers", "2"])
    return rc, json.loads(out.read_text())


def test_audit_qualifies_shipped_scenes_and_refuses_a_suboptimal_label(tmp_path, capsys):
    scenes = load_scenes(shipped_cohort_root(), 64, "test", n_samples=3)
    rows = _rows(scenes)
    write_split(tmp_path / "good", 64, "test", rows)
    rc, rep = _audit(tmp_path / "good", tmp_path / "good.json")
    assert rc == 0, capsys.readouterr().err
    for entry, scene in zip(rep["scenes"], scenes):
        refs = entry["references"]
        assert len(refs) == 6 and all(q["qualified"] for q in refs.values())
        # c* agrees with the independent A* and the released route's own cost
        t = scene.task("energy", "obstacles")
        sr = astar(t.elevation_m, t.obstacles, scene.start, scene.goal, "energy", t.weight)
        q = refs["energy/obstacles"]
        assert abs(q["c_star"] - sr.cost) <= 1e-9 * sr.cost
        assert q["route_cost"] == route_cost(t.route, t.elevation_m, "energy", t.weight)
    assert rep["summary"]["resolutions"]["64"]["splits"]["test"]["qualification"][
        "n_qualified"] == 18

    # a legal but non-optimal label: another objective's (or the obstacle variant's)
    # released route stored as the elevation/free label of the first scene where it
    # costs clearly more under the elevation model
    def suboptimal():
        for i, sc in enumerate(scenes):
            z, w = sc.elevation_m, sc.weight("elevation")
            best = route_cost(sc.routes[("elevation", "free")], z, "elevation", w)
            for key in (("slope_uphill", "free"), ("elevation", "obstacles")):
                r = sc.routes[key]
                if route_cost(r, z, "elevation", w) > best * 1.001:
                    return i, r
        raise AssertionError("no suboptimal substitute found")

    i_bad, s_route = suboptimal()
    bad = scenes[i_bad]
    e_route, z, w = bad.routes[("elevation", "free")], bad.elevation_m, bad.weight("elevation")
    assert route_problem(s_route, bad.start, bad.goal, shape=z.shape) is None
    rows[i_bad]["routes"][("elevation", "free")] = s_route
    write_split(tmp_path / "bad", 64, "test", rows)
    rc, rep = _audit(tmp_path / "bad", tmp_path / "bad.json")
    err = capsys.readouterr().err
    assert rc == 1
    unq = rep["summary"]["unqualified"]
    assert [(u["id"], u["task"]) for u in unq] == [(bad.id, "elevation/free")]
    assert bad.id in unq[0]["reason"] and "not optimal" in unq[0]["reason"]
    assert bad.id in err
    assert rep["scenes"][i_bad]["valid"] is True  # valid data, unqualified reference
    assert not rep["scenes"][i_bad]["references"]["elevation/free"]["qualified"]
    assert np.isclose(rep["scenes"][i_bad]["references"]["elevation/free"]["c_star"],
                      route_cost(e_route, z, "elevation", w), rtol=1e-9)
