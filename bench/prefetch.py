"""Benchmark: the task stream's read-ahead (issue 22, item 3) against the same stream
reading on the calling thread (``prefetch=False``).

Material: the shipped real-terrain 256 x 256 test split (24 scenes), read in chunks of
4 (6 chunks). Each chunk is handed to a kernel, as ``score`` and admission do in
``open_tasks(..., on_chunk=...)``:

* ``sleep``: ``time.sleep`` for as long as reading a chunk takes (measured first): a
  device kernel that leaves the host's CPU free, so the ideal is max(read, kernel);
* ``jit``: a jitted JAX op on the chunk's elevation (min-plus neighbour sweeps, sized to
  take about as long as reading a chunk). On a CPU backend it shares the cores with the
  decoding, so the overlap is smaller there than with a device.

Two passes per kernel: the opening read (``open_tasks`` with ``on_chunk``: read, decode,
validate, hash, then the kernel) and a re-read pass (``TaskStream.chunks()``: every task
checked against its stub's input hash), each with the reader's default 4 decode workers
and with 0 (decoding inline: the reader's own window of ``2 * workers`` rows, which
already overlaps some decoding with the kernel, is gone). Times are medians over the
repeats, the two settings interleaved; "read" is the pass without a kernel, "kernel"
the kernel alone over chunks held in memory; "overlap" is the share of the most that
overlapping can save (min(read, kernel)) that the read-ahead saved.

Peak memory: tracemalloc's peak over an opening read with the ``sleep`` kernel (NumPy
arrays included; a 256 x 256 scene decodes to about 1 MB), a separate untimed pass. The
last table times the score's per-task input-hash check: hashing again
(``protocol.records.input_hash`` as it is today) against the hash kept on the task
(``data.task_input_hash``).

    python bench/prefetch.py            # chunks 4 and 8, 11 repeats
    python bench/prefetch.py --quick    # chunk 4, 5 repeats (about 30 s on 2 cores)

Last line: ``speedup: <no read-ahead seconds / read-ahead seconds>`` of the opening read
with the ``sleep`` kernel at chunk 4 and 4 decode workers.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import tracemalloc

import numpy as np

RES, SPLIT, OBJECTIVE = 256, "test", "energy"


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _paired(fn, repeats: int) -> dict:
    """Median seconds of ``fn(prefetch)`` for both settings, the two interleaved (the
    machine's load drifts alike for both)."""
    times: dict = {False: [], True: []}
    for _ in range(repeats):
        for pf in (False, True):
            t = time.perf_counter()
            fn(pf)
            times[pf].append(time.perf_counter() - t)
    return {pf: statistics.median(v) for pf, v in times.items()}


def _open(chunk, prefetch, on_chunk=None, workers=4):
    from passage_jax.data import open_tasks

    return open_tasks("shipped", RES, SPLIT, OBJECTIVE, n_samples=None, chunk=chunk,
                      prefetch=prefetch, on_chunk=on_chunk, workers=workers)


def _jit_kernel(iters: int):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def sweep(z):
        def body(_, v):
            v = jnp.minimum(v, jnp.roll(v, 1, axis=1) + jnp.abs(z - jnp.roll(z, 1, axis=1)))
            return jnp.minimum(v, jnp.roll(v, 1, axis=2) + jnp.abs(z - jnp.roll(z, 1, axis=2)))
        return jax.lax.fori_loop(0, iters, body, z)

    def kernel(tasks):
        z = np.stack([t.elevation_m for t in tasks]).astype(np.float32)
        return np.asarray(sweep(z))  # blocks until done

    return kernel


def _calibrate_jit(chunks, target: float):
    """A jit kernel taking about ``target`` seconds a chunk."""
    iters = 8
    kernel = _jit_kernel(iters)
    kernel(chunks[0])  # compile
    per = _median_time(lambda: kernel(chunks[0]), 3)
    iters = max(1, int(round(iters * target / max(per, 1e-6))))
    kernel = _jit_kernel(iters)
    for c in chunks:  # compile every chunk shape (the last chunk may be smaller)
        kernel(c)
    return kernel, iters


def _peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def bench_chunk(chunk: int, workers: int, repeats: int) -> tuple[list, float, dict, int]:
    stream = _open(chunk, True, workers=workers)
    chunks = [ts for _, ts in stream.chunks()]
    stream.release()
    n_chunks = len(chunks)
    again = _open(chunk, True, workers=workers)  # the re-read passes' stream

    def opening(kernel=None):
        on_chunk = None if kernel is None else (lambda first, ts: kernel(ts))
        return lambda pf: _open(chunk, pf, on_chunk, workers)

    def reread(kernel=None):
        def run(pf):
            again.prefetch = pf
            for _, ts in again.chunks():
                if kernel is not None:
                    kernel(ts)
        return run

    read = {"opening read": _paired(opening(), repeats)[False],
            "re-read pass": _paired(reread(), repeats)[False]}
    per_chunk = read["opening read"] / n_chunks

    def sleep_kernel(ts):
        time.sleep(per_chunk)

    jit_kernel, iters = _calibrate_jit(chunks, per_chunk)
    rows, headline = [], None
    for name, kernel in (("sleep", sleep_kernel), (f"jit x{iters}", jit_kernel)):
        k_alone = _median_time(lambda kernel=kernel: [kernel(ts) for ts in chunks], repeats)
        for what, make in (("opening read", opening), ("re-read pass", reread)):
            t = _paired(make(kernel), repeats)
            r = read[what]
            # the share of the possible saving (sum - max) that the read-ahead got
            got = (t[False] - t[True]) / max(min(r, k_alone), 1e-9)
            rows.append((chunk, workers, name, what, r, k_alone, r + k_alone, max(r, k_alone),
                         t[False], t[True], t[False] / t[True], got))
            if name == "sleep" and what == "opening read":
                headline = t[False] / t[True]
    again.release()
    mem = {pf: _peak_mb(lambda pf=pf: _open(chunk, pf, lambda first, ts: sleep_kernel(ts), workers))
           for pf in (False, True)}
    return rows, headline, mem, n_chunks


def bench_hash(repeats: int) -> tuple[float, float]:
    from passage_jax.data import task_input_hash
    from passage_jax.protocol.records import input_hash

    stream = _open(4, True)
    tasks = [t for _, ts in stream.chunks() for t in ts]
    stream.release()
    again = _median_time(lambda: [input_hash(t) for t in tasks], repeats)
    kept = _median_time(lambda: [task_input_hash(t) for t in tasks], repeats)
    assert [input_hash(t) for t in tasks] == [task_input_hash(t) for t in tasks]
    return again, kept


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="chunk 4 only, 5 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 11)
    sizes = (4,) if args.quick else (4, 8)
    print(f"# read-ahead of the task stream: shipped {RES}x{RES} {SPLIT} (24 scenes), median of "
          f"{repeats}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print()
    print("| chunk | workers | kernel | pass | read s | kernel s | sum s | max s | no read-ahead s "
          "| read-ahead s | speedup | overlap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    headline, mems = None, {}
    for chunk in sizes:
        for workers in (4, 0):
            rows, h, mem, n_chunks = bench_chunk(chunk, workers, repeats)
            mems[chunk, workers] = (mem, n_chunks)
            if headline is None:
                headline = h  # chunk 4, the default 4 decode workers
            for r in rows:
                print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} "
                      f"| {r[7]:.3f} | {r[8]:.3f} | {r[9]:.3f} | {r[10]:.2f} | {r[11]:.0%} |")
    print()
    print("overlap: (no read-ahead s - read-ahead s) / min(read s, kernel s), the share of the "
          "saving that full overlap gives")
    print()
    print("| chunk | workers | chunks | peak traced MB, no read-ahead | peak traced MB, read-ahead |")
    print("|---|---|---|---|---|")
    for (chunk, workers), (mem, n_chunks) in mems.items():
        print(f"| {chunk} | {workers} | {n_chunks} | {mem[False]:.1f} | {mem[True]:.1f} |")
    again, kept = bench_hash(repeats)
    print()
    print("| score's input-hash check of 24 tasks | seconds |")
    print("|---|---|")
    print(f"| hashed again (records.input_hash today) | {again:.4f} |")
    print(f"| kept on the task (task_input_hash) | {kept:.6f} |")
    print()
    print(f"speedup: {headline:.2f}")


if __name__ == "__main__":
    main()
