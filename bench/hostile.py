"""Hostile inputs against the CLI, as a user would type them: every probe is one
``python -m cli ...`` process on the shipped real terrain, and the table says what it
did: probe, family, outcome, exit code, and the first words of its error line.

A probe passes when the command either refuses with one line that names what is
wrong (non-zero exit, no traceback, nothing written outside the folders it was
given) or, where the input is legal after all, does the right thing (exit 0 with the
correct result). Exits 1 when any probe fails.

    python bench/hostile.py                 # every probe (about two minutes on 2 cores)
    python bench/hostile.py --only score    # probes whose name contains "score"
    python bench/hostile.py --keep DIR      # build the material in DIR and keep it

Families (issue 21): 1 seeds dropped or mixed, 2 a run still being written, 3 a killed
score, 4 a full disk (needs root and tmpfs; otherwise reported as skipped), 5 names
escaping the results folder, 6 YAML alias bombs, 7 a planner that changes directory,
8 planner children outliving their worker, 9 tracebacks for odd files and paths, 10
shard decoding, 11 outputs inside the dataset root, 12 checkpoints overwritten, m the
minor ones; cap spec counts over their caps, tty console text read as markup or terminal
control.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import forgery  # noqa: E402  (bench/ on sys.path first)

ROOT = Path(__file__).resolve().parents[1]

BASE_SPEC = {
    "method_name": "bfs", "inference": "passage_jax.planners.bfs:make_planner", "resolution": 64,
    "cost_model": "energy", "split": "test", "n_samples": 3, "seeds": [1234, 2026, 3407],
    "dataset_path": "shipped", "latency_warmup": 0, "latency_repeats": 1,
}


@dataclasses.dataclass
class Outcome:
    code: int
    err: str
    seconds: float

    @property
    def line(self) -> str:
        lines = [ln for ln in self.err.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    @property
    def named_refusal(self) -> bool:
        return self.code not in (0, None) and "Traceback" not in self.err and bool(self.line)


def cli(*args, cwd=None, env=None, timeout=300) -> Outcome:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    e.update(env or {})
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "cli", *map(str, args)], cwd=cwd or ROOT, env=e,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(None, f"timed out after {timeout} s", time.monotonic() - t0)
    return Outcome(p.returncode, p.stderr, time.monotonic() - t0)


def write_spec(path: Path, **over) -> Path:
    d = dict(BASE_SPEC, **over)
    path.write_text(json.dumps(d))
    return path


class Material:
    """A scored three-seed run and a second method's, built once."""

    def __init__(self, base: Path):
        self.base = base
        self.spec = write_spec(base / "bfs.json")
        self.run = base / "bfs_run"
        self.other = base / "greedy_run"
        if not (self.run / "run.json").exists():
            for spec, out in ((self.spec, self.run),
                              (write_spec(base / "greedy.json", method_name="greedy",
                                          inference="passage_jax.planners.greedy:make_planner"),
                               self.other)):
                for args in (("run", "--spec", spec, "--output", out, "--no-progress"),
                             ("score", "--run", out)):
                    o = cli(*args)
                    if o.code != 0:
                        raise SystemExit(f"material: {' '.join(map(str, args))} failed: {o.err[-2000:]}")
            o = cli("compare", "--score", self.run, "--score", self.other, "--output",
                    base / "cmp.json", "--n-bootstrap", "200")
            if o.code != 0:
                raise SystemExit(f"material: compare failed: {o.err[-2000:]}")

    def copy(self, name: str, src: Path | None = None) -> Path:
        dst = self.base / "probes" / name
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src or self.run, dst)
        return dst


def refused(o: Outcome, *words) -> tuple[bool, str]:
    ok = o.named_refusal and all(w.lower() in o.line.lower() for w in words)
    return ok, o.line


def _unscore(run: Path) -> None:
    for s in run.glob("seed-*"):
        for n in ("per_sample.npz", "metrics.json", "score_receipt.json"):
            (s / n).unlink(missing_ok=True)


def _rehash(seed: Path, name: str) -> None:
    """Record a changed run file's hash in its manifest (a tampering the hashes cannot see)."""
    from passage_jax.fileio import sha256_file  # noqa: PLC0415 (bench start-up)

    m = json.loads((seed / "manifest.json").read_text())
    m["files"][name] = sha256_file(seed / name)
    (seed / "manifest.json").write_text(json.dumps(m))


# --------------------------------------------------------------------------- #
# probes: name -> (family, function(material) -> (passed, outcome, detail))
# --------------------------------------------------------------------------- #

def p_seed_manifest_missing(m):
    run = m.copy("seed_manifest_missing")
    _unscore(run)
    (run / "seed-2026" / "manifest.json").unlink()
    o = cli("score", "--run", run)
    return (*refused(o, "seed-2026"), o)


def p_seed_folder_missing(m):
    run = m.copy("seed_folder_missing")
    _unscore(run)
    shutil.rmtree(run / "seed-3407")
    o = cli("score", "--run", run)
    return (*refused(o, "3407"), o)


def p_foreign_seed_folder(m):
    run = m.copy("foreign_seed")
    _unscore(run)
    shutil.rmtree(run / "seed-2026")
    shutil.copytree(m.other / "seed-2026", run / "seed-2026")
    _unscore(run)
    o = cli("score", "--run", run)
    return (*refused(o, "seed-2026"), o)


def p_run_still_written(m):
    run = m.copy("unfinished")
    _unscore(run)
    (run / "run.json").unlink()
    shutil.move(run / "seed-3407", run / ".seed-3407.partial")
    o = cli("score", "--run", run)
    ok, line = refused(o, "resume")
    return ok and not (run / "seed-1234" / "score_receipt.json").exists(), line, o


def p_killed_score_rescored(m):
    run = m.copy("killed_score")
    for s in run.glob("seed-*"):
        (s / "score_receipt.json").unlink()
        (s / "metrics.json").unlink()
    o = cli("score", "--run", run)
    ok = o.code == 0 and all((s / "score_receipt.json").is_file() for s in run.glob("seed-*"))
    return ok, o.line or "scored again", o


def p_full_disk(m):
    point = m.base / "tmpfs"
    point.mkdir(exist_ok=True)
    mnt = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(point)],
                         capture_output=True, text=True)
    if mnt.returncode != 0:
        return None, f"skipped: cannot mount a tmpfs ({mnt.stderr.strip()[:60]})", Outcome(None, "", 0)
    try:
        run = point / "run"
        shutil.copytree(m.run, run)
        _unscore(run)
        st = os.statvfs(point)
        with open(point / "filler", "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - 4096))
        o = cli("score", "--run", run)
        ok, line = refused(o, "no space left")
        return ok and not any((s / "score_receipt.json").exists() for s in run.glob("seed-*")), line, o
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def p_method_name_escapes(m):
    results = m.base / "probes" / "results_root"
    outside = m.base / "probes" / "escaped"
    shutil.rmtree(outside, ignore_errors=True)
    spec = write_spec(m.base / "escape.json", method_name=f"../{outside.name}/x",
                      results_root=str(results))
    o = cli("bench", "--spec", spec, "--no-progress")
    ok, line = refused(o, "method_name")
    return ok and not outside.exists(), line, o


def p_method_name_absolute(m):
    target = m.base / "probes" / "absolute_target"
    shutil.rmtree(target, ignore_errors=True)
    spec = write_spec(m.base / "absolute.json", method_name=str(target))
    o = cli("bench", "--spec", spec, "--no-progress", "--output", m.base / "probes" / "abs_out")
    ok, line = refused(o, "method_name")
    return ok and not target.exists(), line, o


def p_yaml_alias_bomb(m):
    spec = m.base / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    body = "\n".join("  " + ln for ln in lines)
    spec.write_text(textwrap.dedent("""\
        method_name: bomb
        inference: passage_jax.planners.bfs:make_planner
        resolution: 64
        cost_model: energy
        split: test
        dataset_path: shipped
        inference_kwargs:
        """) + body + "\n")
    out = m.base / "probes" / "bomb_out"
    shutil.rmtree(out, ignore_errors=True)
    o = cli("run", "--spec", spec, "--output", out, timeout=120)
    ok, line = refused(o, "alias")
    return ok and o.seconds < 30 and not out.exists(), line, o


def p_chdir_planner(m):
    mod = m.base / "chdir_planner.py"
    mod.write_text(textwrap.dedent(f"""\
        import os
        from passage_jax.planners.bfs import make_planner as _bfs

        def make_planner(**kw):
            inner = _bfs()
            class P:
                def plan(self, request):
                    os.chdir({str(m.base / 'probes')!r})
                    return inner.plan(request)
            return P()
        """))
    work = m.base / "probes" / "chdir_work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = write_spec(m.base / "chdir.json", method_name="chdir", inference="chdir_planner:make_planner",
                      seeds=[1234])
    o = cli("run", "--spec", spec, "--output", "relative_out", "--no-progress", cwd=work,
            env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(m.base)])})
    stray = m.base / "probes" / "relative_out"
    if o.code == 0:
        return (work / "relative_out" / "run.json").is_file() and not stray.exists(), \
            "run completed in the folder named at launch", o
    ok, line = refused(o)
    return ok and "--resume" not in line and not stray.exists(), line, o


def p_planner_children(m):
    mod = m.base / "spawning_planner.py"
    pids = m.base / "probes" / "child_pids.txt"
    pids.parent.mkdir(parents=True, exist_ok=True)
    pids.unlink(missing_ok=True)
    mod.write_text(textwrap.dedent(f"""\
        import subprocess, sys, time

        def make_planner(**kw):
            class P:
                def plan(self, request):
                    for session in (False, True):
                        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                             start_new_session=session)
                        with open({str(pids)!r}, "a") as f:
                            f.write(f"{{p.pid}}\\n")
                    time.sleep(600)
            return P()
        """))
    spec = write_spec(m.base / "spawn.json", method_name="spawn", inference="spawning_planner:make_planner",
                      seeds=[1234], n_samples=1, execution="supervised", worker_warmup=0,
                      budget={"wall_time_ms": 500})
    out = m.base / "probes" / "spawn_out"
    shutil.rmtree(out, ignore_errors=True)
    o = cli("run", "--spec", spec, "--output", out, "--no-progress",
            env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(m.base)])})
    time.sleep(1.0)
    alive = []
    for pid in (int(x) for x in pids.read_text().split()) if pids.exists() else []:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
            os.kill(pid, 9)
    ok = o.code == 0 and not alive and pids.exists()
    return ok, f"run exit {o.code}; children left alive: {alive or 'none'}", o


def p_binary_spec(m):
    spec = m.base / "binary.yaml"
    spec.write_bytes(bytes(range(256)) * 4)
    o = cli("run", "--spec", spec, "--output", m.base / "probes" / "binary_out")
    return (*refused(o, str(spec)), o)


def _output_probe(path_of):
    def probe(m):
        target = path_of(m)
        o = cli("run", "--spec", m.spec, "--output", target)
        return (*refused(o), o)
    return probe


def _file(m):
    f = m.base / "probes" / "a_file"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("x")
    return f


def _loop(m):
    a = m.base / "probes" / "loop_a"
    if not a.is_symlink():
        a.parent.mkdir(parents=True, exist_ok=True)
        b = m.base / "probes" / "loop_b"
        a.symlink_to(b)
        b.symlink_to(a)
    return a / "out"


def p_compare_output_folder(m):
    d = m.base / "probes" / "cmp_folder"
    d.mkdir(parents=True, exist_ok=True)
    o = cli("compare", "--score", m.run, "--score", m.other, "--output", d, "--force",
            "--n-bootstrap", "200")
    return (*refused(o, str(d)), o)


def p_report_missing_keys(m):
    bad = m.base / "probes" / "cmp_missing.json"
    doc = json.loads((m.base / "cmp.json").read_text())
    doc.pop("pairs", None)
    bad.write_text(json.dumps(doc))
    o = cli("report", "--compare", bad, "--output", m.base / "probes" / "rep_missing" / "r.md")
    return (*refused(o, str(bad)), o)


def p_report_not_object(m):
    bad = m.base / "probes" / "cmp_list.json"
    bad.write_text("[1, 2, 3]")
    o = cli("report", "--compare", bad, "--output", m.base / "probes" / "rep_list" / "r.md")
    return (*refused(o, str(bad)), o)


def p_truncated_paths(m):
    run = m.copy("truncated_paths")
    _unscore(run)
    seed = run / "seed-1234"
    data = (seed / "paths.npz").read_bytes()
    (seed / "paths.npz").write_bytes(data[:len(data) // 2])
    _rehash(seed, "paths.npz")
    o = cli("score", "--run", run, "--force")
    return (*refused(o, "paths.npz"), o)


def p_truncated_per_sample(m):
    run = m.copy("truncated_per_sample")
    seed = run / "seed-1234"
    data = (seed / "per_sample.npz").read_bytes()
    (seed / "per_sample.npz").write_bytes(data[:len(data) // 2])
    from passage_jax.fileio import sha256_file  # noqa: PLC0415 (bench start-up)

    r = json.loads((seed / "score_receipt.json").read_text())
    r["outputs"]["per_sample.npz"] = sha256_file(seed / "per_sample.npz")
    (seed / "score_receipt.json").write_text(json.dumps(r))
    o = cli("compare", "--score", run, "--score", m.other, "--output",
            m.base / "probes" / "trunc_cmp.json", "--n-bootstrap", "200")
    return (*refused(o, "per_sample.npz"), o)


def p_latency_not_number(m):
    run = m.copy("latency_fast")
    _unscore(run)
    seed = run / "seed-1234"
    lines = (seed / "requests.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["latency_ms"] = "fast"
    lines[0] = json.dumps(rec)
    (seed / "requests.jsonl").write_text("\n".join(lines) + "\n")
    _rehash(seed, "requests.jsonl")
    o = cli("score", "--run", run)
    return (*refused(o, "latency_ms"), o)


def _shard_probe(mutate, *words):
    def probe(m):
        from passage_jax.data import shipped_cohort_root  # noqa: PLC0415 (bench start-up)

        root = m.base / "probes" / f"root_{mutate.__name__}"
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(Path(shipped_cohort_root()) / "64x64", root / "64x64")
        shard = sorted((root / "64x64" / "test").glob("*.parquet"))[0]
        mutate(shard)
        o = cli("audit", "--dataset-path", root, "--resolution", "64")
        ok = o.code == 1 and "Traceback" not in o.err and all(w in (o.err + o.line) for w in words)
        return ok, o.line, o
    return probe


def _rewrite_first_row(shard: Path, column: str, fn) -> None:
    import pyarrow as pa  # noqa: PLC0415 (bench start-up)
    import pyarrow.parquet as pq  # noqa: PLC0415 (bench start-up)

    t = pq.read_table(shard)
    vals = t.column(column).to_pylist()
    vals[0] = fn(vals[0])
    t = t.set_column(t.schema.get_field_index(column), column, pa.array(vals, t.schema.field(column).type))
    pq.write_table(t, shard)


def nested_metadata(shard):
    _rewrite_first_row(shard, "metadata", lambda v: "[" * 100_000 + "]" * 100_000)


def trailing_frame_bytes(shard):
    _rewrite_first_row(shard, "tensor", lambda v: v + b"trailing bytes")


def second_frame(shard):
    _rewrite_first_row(shard, "tensor", lambda v: v + v)


def p_output_in_dataset(m):
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415 (bench start-up)

    root = m.base / "probes" / "dataset_copy"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(Path(shipped_cohort_root()) / "64x64", root / "64x64")
    spec = write_spec(m.base / "inside.json", dataset_path=str(root), seeds=[1234])
    out = root / "64x64" / "test" / "run_here"
    o = cli("run", "--spec", spec, "--output", out)
    ok, line = refused(o, "dataset")
    return ok and not out.exists(), line, o


def p_train_over_checkpoint(m):
    out = m.base / "probes" / "ckpt"
    out.mkdir(parents=True, exist_ok=True)
    (out / "params.msgpack").write_bytes(b"precious")
    (out / "checkpoint.json").write_text("{}")
    o = cli("train", "--config", ROOT / "configs" / "train_value64.yaml", "--out", out, "--no-progress")
    ok, line = refused(o, "force")
    return ok and (out / "params.msgpack").read_bytes() == b"precious" and o.seconds < 60, line, o


def p_train_shipped_checkpoint(m):
    from passage_jax.learned.checkpoint import SHIPPED_CHECKPOINT_DIR  # noqa: PLC0415 (bench start-up)

    o = cli("train", "--config", ROOT / "configs" / "train_value64.yaml", "--out",
            SHIPPED_CHECKPOINT_DIR / "value64-1234.json", "--force", "--no-progress")
    return (*refused(o), o)


def p_resume_prefix(m):
    o = cli("run", "--spec", m.spec, "--output", m.run)
    ok, line = refused(o)
    return ok and "--resume:" not in line, line, o


def p_score_shipped_alias(m):
    run = m.copy("alias")
    _unscore(run)
    o = cli("score", "--run", run, "--dataset-path", "shipped")
    return o.code == 0, o.line or "scored with the shipped alias", o


def p_audit_json_overwrite(m):
    f = m.base / "probes" / "audit.json"
    f.write_text("keep me")
    o = cli("audit", "--dataset-path", "shipped", "--resolution", "64", "--json", f)
    ok, line = refused(o, str(f))
    return ok and f.read_text() == "keep me", line, o


def p_dataset_symlink_loop(m):
    a = m.base / "probes" / "ds_loop_a"
    if not a.is_symlink():
        a.symlink_to(m.base / "probes" / "ds_loop_b")
        (m.base / "probes" / "ds_loop_b").symlink_to(a)
    o = cli("audit", "--dataset-path", a, "--resolution", "64")
    ok, line = refused(o)
    return ok and "does not exist" not in line, line, o


def p_train_batch_string(m):
    cfg = m.base / "probes" / "train_bad.yaml"
    cfg.write_text("batch: sixteen\n")
    o = cli("train", "--config", cfg, "--out", m.base / "probes" / "never")
    return (*refused(o, "batch"), o)


def p_planner_build_fails(m):
    out = m.base / "probes" / "build_fails"
    shutil.rmtree(out, ignore_errors=True)
    bad = write_spec(m.base / "buildfail.json", seeds=[1234], inference="passage_jax.planners.bfs:no_such")
    o1 = cli("run", "--spec", bad, "--output", out)
    good = write_spec(m.base / "buildok.json", seeds=[1234])
    o2 = cli("run", "--spec", good, "--output", out, "--no-progress")
    return o1.named_refusal and o2.code == 0, f"first: {o1.line[:60]} / fixed spec: exit {o2.code}", o2


# --------------------------------------------------------------------------- #
# family 13: hostile text on the pages (report.md, report.html, the leaderboard's
# index.html): a run folder, a method name, a compare folder or a planner-returned
# precision string that closes a code span or a link to inject an image or raw HTML.
# A probe passes when every command exits 0, no page holds a byte of the secret files
# placed outside every named folder (their base64 or their marker), and report.md,
# parsed with raw HTML enabled, holds no HTML token and no image but its own figures.
# --------------------------------------------------------------------------- #

PAGE_MARK = b"PASSAGE-HOSTILE-SECRET-9e107d9d"


def _secrets(m) -> tuple[Path, Path]:
    d = m.base / "probes" / "secret"
    d.mkdir(parents=True, exist_ok=True)
    png, svg = d / "secret.png", d / "secret.svg"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + PAGE_MARK + b"\x00" * 64)
    svg.write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg"><text>' + PAGE_MARK + b"</text></svg>")
    return png, svg


def _page_leaks(path: Path, secrets) -> str | None:
    """What a page holds of the secrets (None: nothing)."""
    import base64  # noqa: PLC0415 (bench start-up)

    text = path.read_text(encoding="utf-8")
    for f in secrets:
        if base64.b64encode(f.read_bytes()).decode() in text:
            return f"{path.name} embeds {f.name}"
    return f"{path.name} holds the secret's marker" if PAGE_MARK.decode() in text else None


def _markdown_html(md: Path, figures) -> str | None:
    """Raw HTML or a foreign image in a Markdown file, parsed with raw HTML enabled."""
    from markdown_it import MarkdownIt  # noqa: PLC0415 (bench start-up)

    for tok in MarkdownIt("commonmark", {"html": True}).enable("table").parse(md.read_text()):
        for t in [tok, *(tok.children or ())]:
            if t.type in ("html_block", "html_inline"):
                return f"{md.name} holds raw HTML {t.content.strip()[:40]!r}"
            if t.type == "image" and t.attrGet("src") not in figures:
                return f"{md.name} links the image {t.attrGet('src')!r}"
    return None


def _page_probe(name, text_of):
    """A run copied into a folder named by the hostile text (also A's method_name in the
    compare file), compared, reported with --html, and put on a leaderboard."""
    def probe(m):
        png, svg = _secrets(m)
        text = text_of(str(png), str(svg))
        case = m.base / "probes" / "pages" / name
        shutil.rmtree(case, ignore_errors=True)
        run = Path(str(case / "runs") + "/" + text)
        forgery.renamed_copy(m.run, run, text)  # run under the hostile method name, every file agreeing
        cmp = case / "w" / "compare.json"
        cmp.parent.mkdir(parents=True)
        o = cli("compare", "--score", run, "--score", m.other, "--output", cmp,
                "--n-bootstrap", "50")
        if o.code != 0:
            return False, f"compare exit {o.code}: {o.line}", o
        o = cli("report", "--compare", cmp, "--output", case / "w" / "report.md", "--html",
                "--route-tasks", "1")
        if o.code != 0:
            return False, f"report exit {o.code}: {o.line}", o
        o2 = cli("leaderboard", cmp.parent, "--output", case / "w" / "lb", "--n-bootstrap", "50")
        if o2.code != 0:
            return False, f"leaderboard exit {o2.code}: {o2.line}", o2
        pages = [case / "w" / "report.html", case / "w" / "report.md", case / "w" / "lb" / "index.html"]
        bad = [x for x in (*(_page_leaks(p, (png, svg)) for p in pages),
                           _markdown_html(case / "w" / "report.md",
                                          ("report_routes.png", "report_regret.png"))) if x]
        return not bad, "; ".join(bad) or "exit 0; no secret byte, no raw HTML on the pages", o2
    return probe


def p_page_precision(m):
    """A planner whose returned precision string is an image reference to the secret."""
    png, _svg = _secrets(m)
    mod = m.base / "precision_planner.py"
    mod.write_text(textwrap.dedent(f"""\
        from passage_jax.planners.bfs import make_planner as _bfs

        def make_planner(**kw):
            inner = _bfs()
            class P:
                def plan(self, request):
                    res = inner.plan(request)
                    res.precision = {f"![p]({png})<img src={png}>"!r}
                    return res
            return P()
        """))
    spec = write_spec(m.base / "precision.json", method_name="precise", seeds=[1234],
                      inference="precision_planner:make_planner")
    out = m.base / "probes" / "precision_run"
    lb = m.base / "probes" / "precision_lb"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(lb, ignore_errors=True)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(m.base)])}
    for args in (("run", "--spec", spec, "--output", out, "--no-progress"), ("score", "--run", out)):
        o = cli(*args, env=env)
        if o.code != 0:
            return False, f"{args[0]} exit {o.code}: {o.line}", o
    o = cli("leaderboard", m.run, out, "--output", lb, "--n-bootstrap", "50")
    if o.code != 0:
        return False, f"leaderboard exit {o.code}: {o.line}", o
    bad = _page_leaks(lb / "index.html", (png,))
    return bad is None, bad or "exit 0; the precision shown as text, no secret byte", o


# --------------------------------------------------------------------------- #
# round 2: 14 routes of every dtype and shape (bool and 1-byte dtypes once made paths.npz
# unreadable), 15 a planner raising SystemExit, KeyboardInterrupt or GeneratorExit (from
# plan() or its route's __array__, in process and in a worker), 16 a seed folder or run
# file that is a symbolic link out of the run folder (score once wrote through it).
# --------------------------------------------------------------------------- #

ROUND2_PLANNERS = textwrap.dedent("""\
    import numpy as np
    from passage_jax.planners.bfs import make_planner as _bfs

    VARIANTS = {
        "bool": lambda r: r.astype(bool), "uint8": lambda r: r.astype(np.uint8),
        "int8": lambda r: r.astype(np.int8), "float16": lambda r: r.astype(np.float16),
        "big_int32": lambda r: r.astype(">i4"), "zero_d": lambda r: np.array(int(r[0, 0])),
        "three_d": lambda r: r.reshape(1, -1, 2), "empty": lambda r: np.zeros((3, 0), np.int8),
        "object": lambda r: r.astype(object), "ragged": lambda r: [list(r[0]), [1]],
    }

    class Raising:
        def __init__(self, exc):
            self.exc = exc
        def __array__(self, *a, **k):
            raise self.exc

    def _exc(kind):
        return {"SystemExit0": SystemExit(0), "SystemExit3": SystemExit(3),
                "GeneratorExit": GeneratorExit(), "KeyboardInterrupt": KeyboardInterrupt()}[kind]

    def make_variants(**kw):
        inner, calls = _bfs(), [0]
        names = sorted(VARIANTS)
        def plan(request):
            res = inner.plan(request)
            res.path = VARIANTS[names[calls[0] % len(names)]](np.asarray(res.path))
            calls[0] += 1
            return res
        return plan

    def make_raising(**kw):
        inner, calls = _bfs(), [0]
        cycle = [(k, w) for k in ("SystemExit0", "SystemExit3", "GeneratorExit", "KeyboardInterrupt")
                 for w in ("plan", "array")]
        def plan(request):
            kind, where = cycle[calls[0] % len(cycle)]
            calls[0] += 1
            if where == "plan":
                raise _exc(kind)
            res = inner.plan(request)
            res.path = Raising(_exc(kind))
            return res
        return plan
    """)


def _round2_run(m, name: str, **over) -> tuple[Outcome, Outcome, Path]:
    (m.base / "round2_planners.py").write_text(ROUND2_PLANNERS)
    spec = write_spec(m.base / f"{name}.json", method_name=name, seeds=[1234], **over)
    out = m.base / "probes" / name
    shutil.rmtree(out, ignore_errors=True)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(m.base)])}
    o = cli("run", "--spec", spec, "--output", out, "--no-progress", env=env)
    s = cli("score", "--run", out) if o.code == 0 else Outcome(None, "", 0)
    return o, s, out


def _records(out: Path) -> list:
    f = out / "seed-1234" / "requests.jsonl"
    return [json.loads(x) for x in f.read_text().splitlines()] if f.is_file() else []


def p_route_dtypes(m):
    o, s, out = _round2_run(m, "route_dtypes", inference="round2_planners:make_variants",
                            latency_repeats=3)
    recs = _records(out)
    bad = [r["record"] for r in recs if r["status"] not in ("ok", "invalid_path")
           or (r["status"] == "invalid_path" and not r["problem"])]
    ok = o.code == 0 and s.code == 0 and len(recs) == 12 and not bad and "Traceback" not in o.err + s.err
    return ok, f"run exit {o.code}, score exit {s.code}; records without a reason: {bad or 'none'}", s


def _planner_exits(execution):
    def probe(m):
        extra = {"budget": {"wall_time_ms": 60000}, "worker_warmup": 0} if execution == "supervised" else {}
        o, s, out = _round2_run(m, f"planner_exits_{execution}", inference="round2_planners:make_raising",
                                latency_repeats=2, execution=execution, **extra)
        recs = _records(out)
        named = [r for r in recs if r["status"] == "runtime_error" and r["error_type"] in
                 ("SystemExit", "GeneratorExit", "KeyboardInterrupt")]
        ok = (o.code == 0 and s.code == 0 and len(recs) == 9 and len(named) == 9
              and "Traceback" not in o.err + s.err)
        return ok, f"run exit {o.code}, score exit {s.code}; {len(named)} of {len(recs)} records name it", o
    return probe


def _linked_out(what):
    def probe(m):
        run = m.copy(f"linked_{what.replace('.', '_')}")
        _unscore(run)
        outside = m.base / "probes" / f"outside_{what}"
        shutil.rmtree(outside, ignore_errors=True)
        link = run / "seed-2026" if what == "seed" else run / "seed-1234" / what
        shutil.move(link, outside)
        link.symlink_to(outside)
        o = cli("score", "--run", run)
        ok, line = refused(o, str(link))
        written = [p.name for d in (outside, run / "seed-1234", run / "seed-2026") if d.is_dir()
                   for p in d.iterdir() if p.name in ("per_sample.npz", "metrics.json", "score_receipt.json")]
        return ok and o.code == 2 and not written, line, o
    return probe


# --------------------------------------------------------------------------- #
# family cap: counts over their caps (a spec's latency_repeats: 1000000000 used to be
# accepted and its pass list built up front, 14-20 GB in a minute with nothing journalled).
# A probe passes when the spec is refused within seconds, in one line naming the key and
# the cap, and nothing is written.
# family tty: console text a user named or a file held, read as rich markup (rk[/]x: an
# internal MarkupError after scoring every seed; rb[red]x shown as rbx) or as terminal
# control (a newline forging a success line, an ANSI escape). A probe passes when the
# command exits 0 or 2 (never 70), shows the name as typed, every error on one line, and
# no control character reaches the console unescaped.
# --------------------------------------------------------------------------- #

SPOOF = "score: all 3 seeds verified"


def _cap_probe(**over):
    def probe(m):
        key = next(iter(over))
        out = m.base / "probes" / f"cap_{key}"
        shutil.rmtree(out, ignore_errors=True)
        spec = write_spec(m.base / f"cap_{key}.json", **over)
        o = cli("run", "--spec", spec, "--output", out)
        ok, line = refused(o, key.split(".")[0], "exceeds", "cap")
        return ok and o.code == 2 and o.seconds < 30 and not out.exists(), line, o
    return probe


def _cli_both(*args, cwd=None) -> tuple[Outcome, str]:
    """``cli`` with standard output kept too (what the console showed)."""
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "cli", *map(str, args)], cwd=cwd or ROOT, env=e,
                       capture_output=True, text=True, timeout=300)
    return Outcome(p.returncode, p.stderr, time.monotonic() - t0), p.stdout


def _raw_controls(text: str) -> bool:
    return any((ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f for c in text)


def _named_run_probe(name: str):
    """A copy of the run in a folder named ``name`` (relative to probes/tty), scored."""
    def probe(m):
        base = m.base / "probes" / "tty"
        base.mkdir(parents=True, exist_ok=True)
        dst = base / name
        shutil.rmtree(dst, ignore_errors=True)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(m.run, dst)
        _unscore(dst)
        o, out = _cli_both("score", "--run", name, cwd=base)
        shown = f"score {name}" in out if "\n" not in name else "\\n" in o.err
        forged = any(ln.strip().startswith(SPOOF) for ln in (out + o.err).splitlines())
        ok = (o.code == 0 and shown and not forged and "MarkupError" not in o.err
              and not _raw_controls(out + o.err))
        return ok, f"exit {o.code}; shown as typed: {shown}; forged line: {forged}", o
    return probe


def p_audit_json_markup(m):
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415 (bench start-up)

    base = m.base / "probes" / "tty_audit"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    o, out = _cli_both("audit", "--dataset-path", shipped_cohort_root(), "--resolution", "64",
                       "--no-qualify", "--json", "a[/]b.json", cwd=base)
    ok = o.code == 0 and "wrote a[/]b.json" in out and (base / "a[" / "]b.json").is_file()
    return ok and "MarkupError" not in o.err, f"exit {o.code}; {o.line or 'wrote a[/]b.json'}", o


def _error_line_probe(*args, shown: str):
    def probe(m):
        o, out = _cli_both(*args, cwd=m.base)
        lines = [ln for ln in o.err.splitlines() if ln.strip()]
        ok = o.code == 2 and len(lines) == 1 and shown in lines[0] and not _raw_controls(o.err + out)
        return ok, lines[0] if lines else "", o
    return probe


def p_shard_named_newline(m):
    from passage_jax.data import shipped_cohort_root  # noqa: PLC0415 (bench start-up)

    root = m.base / "probes" / "root_newline_shard"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(Path(shipped_cohort_root()) / "64x64", root / "64x64")
    shard = sorted((root / "64x64" / "test").glob("*.parquet"))[0]
    _rewrite_first_row(shard, "metadata", lambda v: "{}")
    shard.rename(shard.with_name(f"bad\n{SPOOF}\x1b[2J.parquet"))
    o, out = _cli_both("audit", "--dataset-path", root, "--resolution", "64", "--no-qualify")
    lines = [ln for ln in o.err.splitlines() if ln.strip()]
    ok = (o.code == 1 and len(lines) == 1 and "\\n" in lines[0] and not _raw_controls(o.err + out)
          and not any(ln.strip().startswith(SPOOF) for ln in (out + o.err).splitlines()))
    return ok, o.line, o


def _huge_weight(v):
    md = json.loads(v)
    md["solvers"]["energy"]["weight"] = 1.797e308
    return json.dumps(md)


def huge_weight(shard):
    _rewrite_first_row(shard, "metadata", _huge_weight)


def p_references_from_empty(m):
    out = m.base / "probes" / "references_from_empty"
    shutil.rmtree(out, ignore_errors=True)
    spec = write_spec(m.base / "references_from_empty.json", references_from="")
    o = cli("run", "--spec", spec, "--output", out)
    ok, line = refused(o, "references_from", "empty")
    return ok and not out.exists(), line, o



# --------------------------------------------------------------------------- #
# family 17: trusted run folders (issue 37): one verification of a run folder for every
# reader (score, trust, check-entry, a run's references_from). A references.npz forged
# with every hash and identity rewritten (run_started.json too) at two scales of c*, or
# with forged routes; the same forgery leaving run_started.json; an unlisted file in a run
# or seed folder (what a supervised planner could write there); a journal changed after
# the run; a seed folder linked out of the run for trust. A probe passes when the command
# refuses in one line naming the file (and, for references_from, nothing runs), or, for an
# honest reuse, exits 0 and the manifest records the recomputed sample.
# --------------------------------------------------------------------------- #

def _forged(m, name: str, edit, started: bool = True) -> Path:
    """A copy of the run with forged references whose hashes and identities agree
    (:func:`forgery.forged_references`)."""
    dst = m.base / "probes" / name
    shutil.rmtree(dst, ignore_errors=True)
    return forgery.forged_references(m.run, dst, edit, started)


def _reuse(m, name: str, folder: Path) -> tuple[Outcome, Path]:
    out = m.base / "probes" / f"{name}_reuse"
    shutil.rmtree(out, ignore_errors=True)
    spec = write_spec(m.base / f"{name}_reuse.json", method_name="reuse", seeds=[1234],
                      references_from=str(folder))
    return cli("run", "--spec", spec, "--output", out, "--no-progress"), out


def _forged_probe(name: str, edit, *words, started: bool = True):
    def probe(m):
        forged = _forged(m, name, edit, started)
        o, out = _reuse(m, name, forged)
        ok, line = refused(o, "references_from", *words)
        return ok and not (out / "run.json").exists(), line, o
    return probe


def _unlisted(where: str, command: str):
    def probe(m):
        run = m.copy(f"unlisted_{where}_{command}")
        extra = run / "planner_dump.bin" if where == "run" else run / "seed-2026" / "planner_dump.bin"
        extra.write_bytes(b"written by a planner")
        args = {"score": ("score", "--run", run, "--force"), "trust": ("trust", "--score", run),
                "check-entry": ("check-entry", run)}[command]
        o = cli(*args)
        ok, line = refused(o, str(extra), "not part of a finished")
        return ok and o.code == 2, line, o
    return probe


def p_reuse_unlisted(m):
    run = m.copy("reuse_unlisted")
    extra = run / "seed-1234" / "notes.txt"
    extra.write_text("a note")
    o, out = _reuse(m, "reuse_unlisted", run)
    ok, line = refused(o, "references_from", str(extra))
    return ok and not (out / "run.json").exists(), line, o


def p_reuse_honest(m):
    o, out = _reuse(m, "honest", m.run)
    if o.code != 0:
        return False, o.line, o
    rec = json.loads((out / "seed-1234" / "manifest.json").read_text())["references"]["reused_from"]
    sample = (rec or {}).get("recomputed") or {}
    ok = isinstance(sample.get("seed"), int) and len(sample.get("task_index") or []) == 3
    return ok, f"exit 0; recomputed tasks {sample.get('task_index')} (seed {sample.get('seed')})", o


def p_journal_changed(m):
    run = m.copy("journal_changed")
    with open(run / "seed-3407" / "records.journal", "ab") as f:
        f.write(b"appended after the run")
    o = cli("score", "--run", run, "--force")
    return (*refused(o, "records.journal", "sha256"), o)


def p_trust_seed_linked_out(m):
    run = m.copy("trust_linked_seed")
    outside = m.base / "probes" / "trust_outside_seed"
    shutil.rmtree(outside, ignore_errors=True)
    shutil.move(run / "seed-2026", outside)
    (run / "seed-2026").symlink_to(outside)
    o = cli("trust", "--score", run)
    return (*refused(o, str(run / "seed-2026"), "outside the run folder"), o)


PROBES = {
    "score: a seed's manifest missing": ("1", p_seed_manifest_missing),
    "score: a seed folder missing": ("1", p_seed_folder_missing),
    "score: another method's seed folder": ("1", p_foreign_seed_folder),
    "score: a run still being written": ("2", p_run_still_written),
    "score: a killed score is redone": ("3", p_killed_score_rescored),
    "score: a full disk": ("4", p_full_disk),
    "bench: method_name ../x": ("5", p_method_name_escapes),
    "bench: method_name absolute": ("5", p_method_name_absolute),
    "run: YAML alias bomb": ("6", p_yaml_alias_bomb),
    "run: planner calls os.chdir": ("7", p_chdir_planner),
    "run: planner children outlive it": ("8", p_planner_children),
    "run: binary spec file": ("9", p_binary_spec),
    "run: --output is a file": ("9", _output_probe(lambda m: _file(m))),
    "run: --output below a file": ("9", _output_probe(lambda m: _file(m) / "x")),
    "run: --output in a symlink loop": ("9", _output_probe(_loop)),
    "run: --output /dev/null/x": ("9", _output_probe(lambda m: "/dev/null/x")),
    "run: --output /proc/x": ("9", _output_probe(lambda m: "/proc/passage_probe")),
    "compare: --output a folder --force": ("9", p_compare_output_folder),
    "report: compare JSON missing keys": ("9", p_report_missing_keys),
    "report: compare JSON not an object": ("9", p_report_not_object),
    "score: truncated paths.npz (rehashed)": ("9", p_truncated_paths),
    "compare: truncated per_sample.npz (rehashed)": ("9", p_truncated_per_sample),
    "score: latency_ms \"fast\"": ("9", p_latency_not_number),
    "audit: metadata nested 100,000 deep": ("10", _shard_probe(nested_metadata, "nest")),
    "audit: bytes after the tensor frame": ("10", _shard_probe(trailing_frame_bytes, "trailing")),
    "audit: a second tensor frame": ("10", _shard_probe(second_frame, "second")),
    "run: --output inside the dataset root": ("11", p_output_in_dataset),
    "train: --out over a checkpoint": ("12", p_train_over_checkpoint),
    "train: --out a shipped checkpoint": ("12", p_train_shipped_checkpoint),
    "run: refusal without --resume": ("m", p_resume_prefix),
    "score: --dataset-path shipped": ("m", p_score_shipped_alias),
    "audit: --json over a file": ("m", p_audit_json_overwrite),
    "audit: dataset path a symlink loop": ("m", p_dataset_symlink_loop),
    "train: batch: sixteen": ("m", p_train_batch_string),
    "run: planner build fails, folder reusable": ("m", p_planner_build_fails),
    "pages: folder name ![x](/abs) in backticks": ("13", _page_probe(
        "inline", lambda p, v: f"r`![x]({p})`")),
    "pages: reference image ![x][r] + [r]: /abs": ("13", _page_probe(
        "reference", lambda p, v: f"r`![x][r]`\n\n[r]: {p}\n")),
    "pages: <img src=/abs> and <script>": ("13", _page_probe(
        "html", lambda p, v: f"r`<img src={p}><script>alert(1)</script>`")),
    "pages: an svg": ("13", _page_probe("svg", lambda p, v: f"r`![x]({v})`")),
    "pages: ../ out of the page's folder": ("13", _page_probe(
        "relative", lambda p, v: "r`![x](../../../secret/secret.png)`")),
    "pages: backtick runs 2 and 3": ("13", _page_probe(
        "backticks", lambda p, v: f"r``![x]({p})```![y]({p})```")),
    "pages: newline then an image": ("13", _page_probe("newline", lambda p, v: f"r\n![x]({p})\n")),
    "pages: planner-returned precision": ("13", p_page_precision),
    "run+score: routes of every dtype and shape": ("14", p_route_dtypes),
    "run: planner raises SystemExit & co": ("15", _planner_exits("in_process")),
    "run: planner raises SystemExit & co (worker)": ("15", _planner_exits("supervised")),
    "score: a seed folder linked out of the run": ("16", _linked_out("seed")),
    "score: paths.npz linked out of the run": ("16", _linked_out("paths.npz")),
    "run: latency_repeats 1000000000": ("cap", _cap_probe(latency_repeats=1_000_000_000)),
    "run: latency_warmup 1000000000": ("cap", _cap_probe(latency_warmup=1_000_000_000)),
    "run: n_samples 10**12": ("cap", _cap_probe(n_samples=10**12)),
    "run: a seed of 2**40": ("cap", _cap_probe(seeds=[2**40])),
    "run: budget max_expansions 10**15": ("cap", _cap_probe(budget={"max_expansions": 10**15})),
    "run: budget wall_time_ms 1e300": ("cap", _cap_probe(budget={"wall_time_ms": 1e300})),
    "score: run folder rk[/]x": ("tty", _named_run_probe("rk[/]x")),
    "score: run folder rb[red]x": ("tty", _named_run_probe("rb[red]x")),
    "score: run folder named with a newline": ("tty", _named_run_probe(f"r\n{SPOOF}\x1b[2J")),
    "audit: --json a[/]b.json": ("tty", p_audit_json_markup),
    "score: --run nope\\n<spoofed success>": ("tty", _error_line_probe(
        "score", "--run", f"nope\n{SPOOF}", shown="nope\\nscore: all 3 seeds verified")),
    "score: --run with an ANSI escape": ("tty", _error_line_probe(
        "score", "--run", "nope\x1b[31mred\x1b[0m", shown="nope\\x1b[31mred\\x1b[0m")),
    "run: --spec named with a newline": ("tty", _error_line_probe(
        "run", "--spec", f"s\n{SPOOF}.yaml", "--output", "o", shown=f"s\\n{SPOOF}.yaml")),
    "audit: a shard named with a newline": ("tty", p_shard_named_newline),
    "audit: weight 1.797e308": ("m", _shard_probe(huge_weight, "metadata.solvers.energy.weight")),
    "run: references_from \"\"": ("m", p_references_from_empty),
    "run: references_from forged c* x0.5": ("17", _forged_probe(
        "forged_half", forgery.scale_c_star(0.5), "c*")),
    "run: references_from forged c* x(1+1e-7)": ("17", _forged_probe(
        "forged_tiny", forgery.scale_c_star(1 + 1e-7), "c*")),
    "run: references_from forged routes": ("17", _forged_probe(
        "forged_route", forgery.reverse_routes, "route")),
    "run: references_from forged, old run_started": ("17", _forged_probe(
        "forged_partial", forgery.scale_c_star(0.5), "run_started.json", started=False)),
    "run: references_from an unlisted file": ("17", p_reuse_unlisted),
    "run: references_from an honest run": ("17", p_reuse_honest),
    "score: an unlisted file in the run folder": ("17", _unlisted("run", "score")),
    "score: an unlisted file in a seed folder": ("17", _unlisted("seed", "score")),
    "trust: an unlisted file in a seed folder": ("17", _unlisted("seed", "trust")),
    "check-entry: an unlisted file": ("17", _unlisted("run", "check-entry")),
    "score: records.journal changed": ("17", p_journal_changed),
    "trust: a seed folder linked out of the run": ("17", p_trust_seed_linked_out),
}

# --------------------------------------------------------------------------- #
# family 18: score and comparison files re-derived when read (issue 37): a metrics.json
# forged with its receipt's hash updated (a regret median of 0.0, n_tasks -3, NaN, 1e400, a
# success rate of 1.5, another timing profile), and a comparison file forged (method name,
# cost model, tasks hash, n_tasks -3, Infinity). A probe passes when compare, leaderboard or
# report refuses in one line naming the file and the field and writes nothing, or, for the
# honest inputs, exits 0.
# --------------------------------------------------------------------------- #

def _forge_json(path: Path, field: str, text: str) -> None:
    """Set the dotted ``field`` of the JSON file ``path`` to the JSON text ``text``."""
    doc = json.loads(path.read_text())
    *parents, last = field.split(".")
    node = doc
    for k in parents:
        node = node[k]
    node[last] = "@@forged@@"
    path.write_text(json.dumps(doc).replace('"@@forged@@"', text))


def _forge_metrics(run: Path, field: str, text: str) -> Path:
    """seed-1234's metrics.json forged, the receipt's hash of it updated to match."""
    from passage_jax.fileio import sha256_file  # noqa: PLC0415 (bench start-up)

    seed = run / "seed-1234"
    _forge_json(seed / "metrics.json", field, text)
    rec = json.loads((seed / "score_receipt.json").read_text())
    rec["outputs"]["metrics.json"] = sha256_file(seed / "metrics.json")
    (seed / "score_receipt.json").write_text(json.dumps(rec))
    return seed / "metrics.json"


def _metrics_probe(command: str, field: str, text: str):
    def probe(m):
        name = f"forged_metrics_{command}_{field.replace('.', '_')}"
        run = m.copy(name)
        out = m.base / "probes" / f"{name}_out"
        shutil.rmtree(out, ignore_errors=True)
        if command == "report":
            c = cli("compare", "--score", run, "--score", m.other, "--output", out.with_suffix(".json"),
                    "--force", "--n-bootstrap", "200")
            if c.code != 0:
                return False, c.line, c
        forged = _forge_metrics(run, field, text)
        if command == "compare":
            o = cli("compare", "--score", run, "--score", m.other, "--output", out / "c.json",
                    "--n-bootstrap", "200")
        elif command == "leaderboard":
            o = cli("leaderboard", run, m.other, "--output", out)
        else:
            o = cli("report", "--compare", out.with_suffix(".json"), "--output", out / "r.md")
        ok, line = refused(o, str(forged), f"'{field}'")
        return ok and not out.exists(), line, o
    return probe


def _compare_file_probe(command: str, field: str, text: str):
    def probe(m):
        name = f"forged_cmp_{command}_{field.replace('.', '_')}"
        bad = m.base / "probes" / f"{name}.json"
        bad.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(m.base / "cmp.json", bad)
        _forge_json(bad, field, text)
        out = m.base / "probes" / f"{name}_out"
        shutil.rmtree(out, ignore_errors=True)
        o = (cli("report", "--compare", bad, "--output", out / "r.md") if command == "report"
             else cli("leaderboard", bad, "--output", out))
        ok, line = refused(o, str(bad), f"'{field}'")
        return ok and not out.exists(), line, o
    return probe


def p_honest_score_files(m):
    out = m.base / "probes" / "honest_leaderboard"
    shutil.rmtree(out, ignore_errors=True)
    o = cli("leaderboard", m.base / "cmp.json", m.run, "--output", out)
    ok = o.code == 0 and (out / "leaderboard.json").is_file()
    return ok, "exit 0; leaderboard.json written" if ok else o.line, o


PROBES.update({
    "leaderboard: metrics.json regret median 0.0": ("18", _metrics_probe(
        "leaderboard", "primary.regret_median", "0.0")),
    "compare: metrics.json n_tasks -3": ("18", _metrics_probe("compare", "n_tasks", "-3")),
    "report: metrics.json success rate NaN": ("18", _metrics_probe(
        "report", "primary.success_rate", "NaN")),
    "compare: metrics.json latency p50 1e400": ("18", _metrics_probe(
        "compare", "latency.warm.interpolated.p50", "1e400")),
    "leaderboard: metrics.json success rate 1.5": ("18", _metrics_probe(
        "leaderboard", "primary.success_rate", "1.5")),
    "leaderboard: metrics.json timing profile": ("18", _metrics_probe(
        "leaderboard", "timing_profile.profile", '"supervised_service_v1"')),
    "report: compare file method name": ("18", _compare_file_probe(
        "report", "runs.A.method_name", '"learned"')),
    "leaderboard: compare file cost model": ("18", _compare_file_probe(
        "leaderboard", "identity.data.cost_model", '"slope"')),
    "report: compare file tasks hash": ("18", _compare_file_probe(
        "report", "identity.tasks_sha256", '"00"')),
    "leaderboard: compare file n_tasks -3": ("18", _compare_file_probe(
        "leaderboard", "identity.n_tasks", "-3")),
    "report: compare file delta Infinity": ("18", _compare_file_probe(
        "report", "contrasts.regret_median.delta", "Infinity")),
    "leaderboard: honest comparison and run": ("18", p_honest_score_files),
})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run the probes whose name contains this text")
    ap.add_argument("--keep", type=Path, default=None, help="build the material here and keep it")
    args = ap.parse_args(argv)
    base = args.keep or Path(tempfile.mkdtemp(prefix="passage_hostile_"))
    base.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        m = Material(base)
        print(f"material built in {time.monotonic() - t0:.0f} s under {base}")
        print(f"| {'probe':<44} | fam | {'outcome':<7} | exit | {'seconds':>7} | error line |")
        print(f"|{'-' * 46}|-----|---------|------|---------|------------|")
        failed = 0
        for name, (family, probe) in PROBES.items():
            if args.only and args.only not in name:
                continue
            passed, detail, o = probe(m)
            outcome = "skipped" if passed is None else "pass" if passed else "FAIL"
            failed += passed is False
            code = "-" if o.code is None else str(o.code)
            print(f"| {name:<44} | {family:>3} | {outcome:<7} | {code:>4} | {o.seconds:7.1f} | "
                  f"{' '.join(str(detail).split())[:110]} |", flush=True)
        print(f"{failed} probe(s) failed; {time.monotonic() - t0:.0f} s in all")
        return 1 if failed else 0
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
