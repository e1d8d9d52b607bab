"""Where does ``ransac_models`` spend its 13.6 us (issue 10: RANSAC is ~23 us of the ~96 us GPU
frame)? The kernel: one block per hypothesis (256), warp 0 solves the normalised 8-point F by
elimination (float64, one lane per column), then RS_SCORE_WARPS warps score the candidates.

Times the three RANSAC kernels one by one (events between them, queued behind a spin kernel) for
RS_SCORE_WARPS 1, 2, 4 (today) and 8 and for 64, 160 and 400 candidates (10 % outliers): if the
models kernel does not move with the warps or the candidates, its time is the solve's serial
chain (and the launch), not the scoring. Writes ``ransac_kernel_probe.json`` / ``.md`` to ``--out``.

    python3 bench/ransac_kernel_probe.py --out bench/out
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kernel_times(score_warps: int, n: int, repeats: int = 300) -> tuple[dict, dict]:
    """The three RANSAC launches one by one (events between them, queued behind a spin kernel) with
    ``score_warps`` scoring warps on ``n`` synthetic candidates (10 % outliers) -> ({kernel: [us per
    launch]}, the GPU's state after the last)."""
    import cupy as cp

    from vilib_ros._cuda import get_module
    from vilib_ros.bench.frontend import SPIN_CYCLES
    from vilib_ros.frontend import ransac_gpu

    default_warps = ransac_gpu.SCORE_WARPS
    ransac_gpu.SCORE_WARPS = score_warps              # a module per define set (get_module's cache)
    try:
        r = ransac_gpu.GpuRansac(512)
        rng = np.random.default_rng(0)
        x1 = rng.uniform(-0.6, 0.6, (n, 2)).astype(np.float32)
        x2 = x1 + np.array([0.01, 0.002], np.float32)
        x2[: n // 10] += rng.uniform(-0.05, 0.05, (n // 10, 2)).astype(np.float32)
        p1, p2 = np.zeros((r.S, 2), np.float32), np.zeros((r.S, 2), np.float32)
        p1[:n], p2[:n] = x1, x2
        hdr = cp.asarray(np.array([n, 0, 0, 0, 0, 0, 0, 0], np.int64))
        st, d1, d2 = cp.zeros(r.S, cp.int8), cp.asarray(p1), cp.asarray(p2)
        stream = cp.cuda.Stream(non_blocking=True)
        spin = get_module("bench_util").get_function("gpu_spin")
        names = ("candidates", "models", "select")
        ev = [cp.cuda.Event() for _ in range(4)]
        orig = dict(r._k)

        def wrap(name, j):                            # the launch, then an event after it
            def call(*a, **kw):
                orig[name](*a, **kw)
                ev[j + 1].record(stream)
            return call

        r._k = {k: wrap(k, j) for j, k in enumerate(names)}
        times = {k: [] for k in names}
        for rep in range(repeats + 20):
            spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=stream)
            ev[0].record(stream)
            r.enqueue(stream, False, hdr, st, d1, d1, d2, None, None, 0.0, 1.0 / 458.0, 0.99)
            ev[3].synchronize()
            if rep >= 20:
                for j, k in enumerate(names):
                    times[k].append(cp.cuda.get_elapsed_time(ev[j], ev[j + 1]) * 1e3)
        return times, r.state()
    finally:
        ransac_gpu.SCORE_WARPS = default_warps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out")
    args = ap.parse_args()
    from vilib_ros._cuda import device_name

    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    for w in (1, 2, 4, 8):
        for n in (64, 160, 400):
            times, state = kernel_times(w, n)
            row = {"score_warps": w, "n_candidates": n, **{f"{k}_us": float(np.median(v)) for k, v in times.items()},
                   "best": state["best"], "inliers": state["count"]}
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ransac_kernel_probe.json").write_text(json.dumps(res, indent=1))
    L = [f"# RANSAC kernels by scoring warps and candidates ({res['date']})", "",
         f"Machine: {res['device']}; synthetic correspondences (normalised, 10 % outliers); median of 300 "
         "launches each, queued behind a spin kernel, events between the kernels.", "",
         "| scoring warps | candidates | candidates us | models us | select us | chosen | inliers |",
         "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        L.append(f"| {r['score_warps']} | {r['n_candidates']} | {r['candidates_us']:.1f} | {r['models_us']:.1f} | "
                 f"{r['select_us']:.1f} | {r['best']} | {r['inliers']} |")
    (out / "ransac_kernel_probe.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
