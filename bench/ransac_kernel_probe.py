"""How long does the frame's RANSAC take on the device (issue 10)? Since 2026-11-28 13:00 UTC it is
one kernel, ``ransac_frame``: one block per hypothesis (256) computes the candidates, solves its
normalised 8-point F (warp 0, float64) and scores it; the last block to finish selects.

Times the launch alone (events around it, queued behind a spin kernel) for 64, 160 and 400
candidates of a 3D scene seen from two poses (10 % outliers), so that every sample gives a model.
(The probe of 2026-11-28 10:22 UTC timed the three kernels of before, ``ransac_candidates``,
``ransac_models`` with 1-8 scoring warps and ``ransac_select``, on a pure image translation:
``ransac_kernel_probe_2026-11-28.md``.) Writes ``ransac_kernel_probe.json`` / ``.md`` to ``--out``.

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


def scene(n: int, seed: int = 0, outliers: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Normalised image positions (float32) of n points 2-6 m in front of a camera that moves 0.2 m
    and turns 2 degrees; ``outliers`` of the second positions moved at random."""
    rng = np.random.default_rng(seed)
    P = np.c_[rng.uniform(-2, 2, (n, 2)), rng.uniform(2, 6, n)]
    a = np.deg2rad(2.0)
    R = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    Q = P @ R.T + np.array([0.2, 0.03, 0.05])
    x1, x2 = P[:, :2] / P[:, 2:], Q[:, :2] / Q[:, 2:]
    k = int(n * outliers)
    x2[:k] += rng.uniform(-0.05, 0.05, (k, 2))
    return x1.astype(np.float32), x2.astype(np.float32)


def kernel_times(n: int, repeats: int = 300) -> tuple[dict, dict]:
    """``ransac_frame`` on ``n`` candidates -> ({"ransac_frame": [us per launch]}, the GPU's state
    after the last)."""
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros.bench.frontend import SPIN_CYCLES
    from vilib_ros.frontend.gpu import ransac as ransac_gpu

    r = ransac_gpu.GpuRansac(512)
    x1, x2 = scene(n)
    p1, p2 = np.zeros((r.S, 2), np.float32), np.zeros((r.S, 2), np.float32)
    p1[:n], p2[:n] = x1, x2
    hdr = cp.asarray(np.array([n, 0, 0, 0, 0, 0, 0, 0], np.int64))
    st, d1, d2 = cp.zeros(r.S, cp.int8), cp.asarray(p1), cp.asarray(p2)
    stream = cp.cuda.Stream(non_blocking=True)
    spin = bench_util().get_function("gpu_spin")
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    times = {"ransac_frame": []}
    for rep in range(repeats + 20):
        spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=stream)
        e0.record(stream)
        r.enqueue(stream, False, hdr, st, d1, d1, d2, None, None, 0.0, 1.0 / 458.0, 0.99)
        e1.record(stream)
        e1.synchronize()
        if rep >= 20:
            times["ransac_frame"].append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return times, r.state()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out")
    args = ap.parse_args()
    from vilib_ros._cuda import device_name

    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    for n in (64, 160, 400):
        times, state = kernel_times(n)
        v = times["ransac_frame"]
        row = {"n_candidates": n, "p50_us": float(np.median(v)), "p90_us": float(np.percentile(v, 90)),
               "best": state["best"], "inliers": state["count"], "evaluated": state["evaluated"]}
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ransac_kernel_probe.json").write_text(json.dumps(res, indent=1))
    L = [f"# The RANSAC kernel by candidates ({res['date']})", "",
         f"Machine: {res['device']}; a 3D scene from two poses (normalised, 10 % outliers); median of 300 "
         "launches each, queued behind a spin kernel.", "",
         "| candidates | ransac_frame p50 us | p90 us | chosen | inliers | hypotheses read |",
         "|---:|---:|---:|---:|---:|---:|"]
    for r in res["rows"]:
        L.append(f"| {r['n_candidates']} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['best']} | {r['inliers']} | "
                 f"{r['evaluated']} |")
    (out / "ransac_kernel_probe.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
