"""``python -m cli doctor [--json]``: the installation as this package sees it.

Versions of passage_jax, Python and the declared dependencies, whether each installed
version lies inside the range the installed passage_jax declares (its distribution
metadata, i.e. pyproject.toml at install time), the JAX backend and devices, and
whether float64 works on the default backend. Exit status 1 when a runtime dependency
is missing or out of range.
"""
from __future__ import annotations

import importlib.metadata
import json
import platform
import sys

__all__ = ["register", "main", "installed_version", "requirement_checks", "missing_extra_packages",
           "jax_summary", "collect"]

DIST = "passage_jax"


def register(p):
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def installed_version(name: str) -> str | None:
    """Installed version of distribution ``name``; None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requires_of(name: str) -> list:
    try:
        return importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def missing_extra_packages(req, version_of, requires_of=None) -> list[str]:
    """The distributions a requirement's own extras pull in (``jax[cuda12]`` ->
    ``jax-cuda12-plugin``) that are not installed; empty for a requirement without extras."""
    from packaging.requirements import Requirement  # noqa: PLC0415 (declared dependency, CLI start-up)

    if not req.extras:
        return []
    missing = []
    for text in (requires_of or _requires_of)(req.name):
        sub = Requirement(text)
        if sub.marker is None or not any(sub.marker.evaluate({"extra": e}) for e in req.extras):
            continue
        if version_of(sub.name) is None and sub.name not in missing:
            missing.append(sub.name)
    return missing


def requirement_checks(requires=None, extras=None, version_of=None, requires_of=None) -> list[dict]:
    """One row per declared requirement of the installed distribution.

    ``requires``/``extras`` default to the installed distribution's ``Requires-Dist`` and
    ``Provides-Extra``. ``extra`` is None for a runtime dependency, else the extra naming
    it. ``in_range`` is True/False for an installed package, None when it is not
    installed (or when ``packaging`` is missing; ``error`` then says so). A requirement
    with extras of its own (``jax[cuda12]``) is installed only when the packages those
    extras pull in are: ``missing`` lists the absent ones (``in_range`` None then), so
    ``[cuda] jax`` without the CUDA plugin is not reported in range. A runtime
    dependency that is missing or out of range makes ``ok`` False; an extra that is not
    installed does not. ``requires_of(name)`` gives a distribution's own requirements
    (default: its installed metadata).
    """
    version_of = version_of or installed_version
    if requires is None:
        requires = importlib.metadata.requires(DIST) or []
        if extras is None:
            extras = importlib.metadata.metadata(DIST).get_all("Provides-Extra") or []
    extras = list(extras or [])
    try:
        from packaging.requirements import Requirement  # noqa: PLC0415 (declared dependency, CLI start-up)
    except ImportError:  # reported, not replaced by a guess
        return [{"requirement": text, "name": text.split(";")[0].strip(), "extra": None,
                 "specifier": None, "installed": None, "in_range": None, "ok": False,
                 "error": "the package 'packaging' is not installed: ranges cannot be checked"}
                for text in requires]
    rows = []
    for text in requires:
        req = Requirement(text)
        extra = None
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            extra = next((e for e in extras if req.marker.evaluate({"extra": e})), None)
            if extra is None:  # a marker for another platform or Python
                continue
        have = version_of(req.name)
        in_range = None if have is None else req.specifier.contains(have, prereleases=True)
        row = {"requirement": text, "name": req.name, "extra": extra,
               "specifier": _spec_text(req.specifier), "installed": have, "in_range": in_range}
        missing = missing_extra_packages(req, version_of, requires_of) if have is not None else []
        if missing:  # the base package alone does not satisfy jax[cuda12]
            row.update(in_range=None, missing=missing)
            in_range = None
        row["ok"] = bool(in_range) if extra is None else in_range is not False
        rows.append(row)
    return rows


def _spec_text(specifier) -> str:
    """A specifier set with its lower bounds first (``>=0.10,<0.11``)."""
    return ",".join(sorted((str(s) for s in specifier), key=lambda s: (not s.startswith(">"), s)))


def jax_summary() -> dict:
    """Default backend, its devices, and whether float64 arithmetic works there."""
    import jax  # noqa: PLC0415 (CLI start-up: JAX loads only when the command runs)
    import jax.numpy as jnp  # noqa: PLC0415 (CLI start-up)

    devices = jax.devices()
    out = {"backend": jax.default_backend(), "device_count": len(devices),
           "devices": [{"id": d.id, "platform": d.platform, "kind": d.device_kind} for d in devices]}
    try:
        with jax.enable_x64(True):
            tiny = 2.0 ** -40  # lost in float32, kept in float64
            x = jax.jit(lambda a: a + tiny)(jnp.ones((), jnp.float64))
            value = float(jax.device_get(x))
            out["float64"] = bool(x.dtype == jnp.float64 and value - 1.0 == tiny)
            out["float64_detail"] = f"dtype {x.dtype}, 1 + 2**-40 - 1 = {value - 1.0!r}"
    except Exception as e:  # an unsupported dtype on the backend is the answer, not a crash
        out["float64"] = False
        out["float64_detail"] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return out


def collect(version_of=None) -> dict:
    """Everything ``doctor`` reports, as one JSON-ready dict."""
    from passage_jax.compilation import cache_problems, cache_usage  # noqa: PLC0415 (CLI start-up)
    from passage_jax.protocol.records import package_versions  # noqa: PLC0415 (CLI start-up)

    checks = requirement_checks(version_of=version_of)
    return {
        "passage_jax": (version_of or installed_version)(DIST),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "packages": {**package_versions(),
                     **{r["name"]: r["installed"] for r in checks if r["extra"] is None}},
        "requirements": checks,
        "jax": jax_summary(),
        "compilation_cache": {**cache_usage(), "problems": cache_problems()},
        "ok": all(r["ok"] for r in checks) and not cache_problems(),
    }


def _missing_text(r: dict) -> str:
    """The state of a requirement whose extras' packages are absent (``[cuda] jax``)."""
    names = ", ".join(r["missing"])
    if any("cuda" in n for n in r["missing"]):
        return f"no CUDA plugin is installed ({names} missing; JAX runs without CUDA)"
    return f"not installed ({names} missing)"


def _text(report: dict) -> str:
    lines = [f"passage_jax {report['passage_jax']}",
             f"Python {report['python']} ({report['python_executable']})",
             f"platform {report['platform']}", "", "declared dependencies (installed / declared range):"]
    for r in report["requirements"]:
        if "error" in r:
            state = r["error"]
        elif r.get("missing"):
            state = _missing_text(r)
        elif r["installed"] is None:
            state = "MISSING" if r["extra"] is None else "not installed"
        else:
            state = "in range" if r["in_range"] else "OUT OF RANGE"
        name = f"[{r['extra']}] {r['name']}" if r["extra"] else r["name"]
        lines.append(f"  {name:<24} {r['installed'] or '-':<12} {r['specifier'] or '':<22} {state}")
    j = report["jax"]
    lines += ["", f"JAX backend {j['backend']}, {j['device_count']} device(s):"]
    lines += [f"  {d['id']}: {d['platform']} {d['kind']}" for d in j["devices"]]
    lines.append(f"float64 on {j['backend']}: {'yes' if j['float64'] else 'NO'} ({j['float64_detail']})")
    c = report["compilation_cache"]
    lines.append(f"compilation cache {c['path']}: " + (
        "switched off (PASSAGE_JAX_NO_COMPILE_CACHE)" if c["switched_off"] else
        f"{c['entries']} entries, {c['bytes'] / 2**20:.1f} MiB" if c["exists"] else
        "empty (made by the first command that compiles)"))
    lines += [f"  PROBLEM: {p}" for p in c.get("problems", [])]
    lines.append("" if report["ok"] else "\nsome runtime dependencies are missing or out of range, or the "
                 "compilation cache cannot be used (pip install -c constraints.txt -e . installs the "
                 "tested versions)")
    return "\n".join(lines).rstrip() + "\n"


def main(args) -> int:
    report = collect()
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        sys.stdout.write(_text(report))
    return 0 if report["ok"] else 1
