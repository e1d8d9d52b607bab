"""Would a shorter 8-point solve make RANSAC's model kernel cheaper? (issue 10; the model kernel's
~13 us are warp 0's serial solve, ``ransac_kernel_probe_2026-11-28.md``.)

Times, on the same 256 hypotheses of 160 synthetic correspondences (normalised, 10 % outliers), each
alone behind a spin kernel:

* ``warp``: today's solve, ``rs_hypothesis_warp`` of ``kernels/ransac.cu`` (one warp per
  hypothesis, a lane per column of the design matrix, full pivoting), without the scoring (since
  2026-11-28 13:00 UTC it takes the 8 sampled pairs from shared memory; the probe gathers them);
* ``thread``: one thread per hypothesis, the same sampling and normalisation, then elimination
  with partial (row) pivoting in the thread's own memory, no shuffles, no barriers;
* ``launch``: an empty kernel of the same grid (the floor between two events).

and how far the ``thread`` models are from today's (the largest |F| difference after scaling each F to
unit norm and the same sign). A probe: neither variant is in the package. Writes
``ransac_solve_probe.json`` / ``.md`` to ``--out``.

    python3 bench/ransac_solve_probe.py --out bench/out
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBE = r"""
extern "C" __global__ void probe_solve_warp(const unsigned int* __restrict__ table, const double2* __restrict__ x1,
                                            const double2* __restrict__ x2, int n, double* __restrict__ F,
                                            signed char* __restrict__ valid)
{
    __shared__ double s_a[8 * 9];
    __shared__ double2 s_p1[RS_SAMPLE], s_p2[RS_SAMPLE];
    double G[9];
    const int h = blockIdx.x;
    int idx[RS_SAMPLE];
    rs_sample(table, h, n, idx);
    if (threadIdx.x < RS_SAMPLE) { s_p1[threadIdx.x] = x1[idx[threadIdx.x]]; s_p2[threadIdx.x] = x2[idx[threadIdx.x]]; }
    __syncwarp();
    const bool ok = rs_hypothesis_warp(s_p1, s_p2, s_a, G);
    if (threadIdx.x == 0) {
        valid[h] = ok ? 1 : 0;
        for (int j = 0; j < 9; ++j) F[9 * h + j] = ok ? G[j] : 0.0;
    }
}

extern "C" __global__ void probe_solve_thread(const unsigned int* __restrict__ table, const double2* __restrict__ x1,
                                              const double2* __restrict__ x2, int n, double* __restrict__ F,
                                              signed char* __restrict__ valid)
{
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= RS_HYPOTHESES) return;
    int idx[RS_SAMPLE];
    rs_sample(table, h, n, idx);
    double s1, tx1, ty1, s2, tx2, ty2;
    bool ok = rs_normalise(x1, x2, idx, &s1, &tx1, &ty1, &s2, &tx2, &ty2);
    double a[8][9];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        const int k = idx[r];
        rs_design_row(s1 * x1[k].x + tx1, s1 * x1[k].y + ty1, s2 * x2[k].x + tx2, s2 * x2[k].y + ty2, a[r]);
    }
#pragma unroll
    for (int i = 0; i < 8 && ok; ++i) {
        int p = i;
        double big = fabs(a[i][i]);
#pragma unroll
        for (int r = i + 1; r < 8; ++r) { const double v = fabs(a[r][i]); if (v > big) { big = v; p = r; } }
        if (!(big > 1e-12)) { ok = false; break; }
#pragma unroll
        for (int r = i + 1; r < 8; ++r)
            if (r == p) {
#pragma unroll
                for (int c = 0; c < 9; ++c) { const double t = a[i][c]; a[i][c] = a[r][c]; a[r][c] = t; }
            }
        const double inv = 1.0 / a[i][i];
#pragma unroll
        for (int r = i + 1; r < 8; ++r) {
            const double m = a[r][i] * inv;
#pragma unroll
            for (int c = i + 1; c < 9; ++c) a[r][c] = a[r][c] - m * a[i][c];
        }
    }
    double f[9];
    f[8] = 1.0;
#pragma unroll
    for (int i = 7; i >= 0; --i) {
        double acc = 0.0;
#pragma unroll
        for (int c = i + 1; c < 9; ++c) acc += a[i][c] * f[c];
        f[i] = -acc / a[i][i];
    }
    double G[9];
    rs_denormalise(f, s1, tx1, ty1, s2, tx2, ty2, G);
    valid[h] = ok ? 1 : 0;
    for (int j = 0; j < 9; ++j) F[9 * h + j] = ok ? G[j] : 0.0;
}

extern "C" __global__ void probe_empty(int* out) { if (out && threadIdx.x == 1000000) out[0] = 1; }
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--repeats", type=int, default=300)
    args = ap.parse_args()
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros._cuda import KERNEL_DIR, device_name, kernel_source
    from vilib_ros.bench.frontend import SPIN_CYCLES
    from vilib_ros.frontend.config import ransac_defines as kernel_defines
    from vilib_ros.frontend.gpu.ransac import OPTIONS
    from vilib_ros.frontend.ransac import HYPOTHESES, TABLE

    defines = kernel_defines()
    opts = ("-std=c++17", f"-I{KERNEL_DIR}", *OPTIONS, *(f"-D{k}={v}" for k, v in defines.items()))
    mod = cp.RawModule(code=kernel_source("ransac") + PROBE, options=opts)
    kw, kt, ke = (mod.get_function(f"probe_{n}") for n in ("solve_warp", "solve_thread", "empty"))
    spin = bench_util().get_function("gpu_spin")
    rng = np.random.default_rng(0)
    n = 160
    x1 = rng.uniform(-0.6, 0.6, (n, 2))
    x2 = x1 + np.array([0.01, 0.002])
    x2[: n // 10] += rng.uniform(-0.05, 0.05, (n // 10, 2))
    d1, d2 = cp.asarray(x1.astype(np.float64)), cp.asarray(x2.astype(np.float64))
    table = cp.asarray(np.ascontiguousarray(TABLE[:HYPOTHESES]))
    Fw, Ft = cp.zeros((HYPOTHESES, 9)), cp.zeros((HYPOTHESES, 9))
    vw, vt = cp.zeros(HYPOTHESES, cp.int8), cp.zeros(HYPOTHESES, cp.int8)
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    variants = {"warp": lambda: kw((HYPOTHESES,), (32,), (table, d1, d2, np.int32(n), Fw, vw), stream=stream),
                "thread": lambda: kt(((HYPOTHESES + 127) // 128,), (128,), (table, d1, d2, np.int32(n), Ft, vt),
                                     stream=stream),
                "launch": lambda: ke((HYPOTHESES,), (32,), (np.uint64(0),), stream=stream)}
    times = {k: [] for k in variants}
    for rep in range(args.repeats + 20):
        for name, go in variants.items():
            spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=stream)
            e0.record(stream)
            go()
            e1.record(stream)
            e1.synchronize()
            if rep >= 20:
                times[name].append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    A, B = Fw.get(), Ft.get()
    both = (vw.get() == 1) & (vt.get() == 1)
    A = A[both] / np.linalg.norm(A[both], axis=1, keepdims=True)
    B = B[both] / np.linalg.norm(B[both], axis=1, keepdims=True)
    B *= np.sign(np.sum(A * B, axis=1, keepdims=True))
    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "candidates": n, "hypotheses": HYPOTHESES,
           "p50_us": {k: float(np.median(v)) for k, v in times.items()},
           "p90_us": {k: float(np.percentile(v, 90)) for k, v in times.items()},
           "valid": {"warp": int((vw.get() == 1).sum()), "thread": int((vt.get() == 1).sum())},
           "max_abs_diff_unit_F": float(np.abs(A - B).max()) if both.any() else None,
           "median_abs_diff_unit_F": float(np.median(np.abs(A - B).max(1))) if both.any() else None}
    print(json.dumps(res), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ransac_solve_probe.json").write_text(json.dumps(res, indent=1))
    L = [f"# The 8-point solve: a warp with full pivoting against a thread with partial pivoting ({res['date']})", "",
         f"Machine: {res['device']}; {HYPOTHESES} hypotheses of {n} synthetic correspondences; median / p90 of "
         f"{args.repeats} launches each, alone behind a spin kernel.", "",
         "| variant | p50 us | p90 us | valid models |", "|---|---:|---:|---:|"]
    for k in variants:
        L.append(f"| {k} | {res['p50_us'][k]:.1f} | {res['p90_us'][k]:.1f} | {res['valid'].get(k, '-')} |")
    L += ["", f"Models of both (unit norm, same sign): largest |difference| {res['max_abs_diff_unit_F']:.2e}, "
          f"median per model {res['median_abs_diff_unit_F']:.2e}."]
    (out / "ransac_solve_probe.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
