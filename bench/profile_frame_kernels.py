"""GPU time of each kernel of the frontend's frame, alone, on the state of a real frame.

The frontend runs ``--frames`` real EuRoC frames (default configuration: reference templates,
affine warp, FB check, RANSAC); then each idempotent kernel of the last frame (LK, the FB check,
the RANSAC kernels, lk_extract, the pyramid) is captured ``REPS`` times into one CUDA graph,
queued behind a spin kernel, and timed with events: GPU time per launch, graph-node overhead
included, no host launch gaps. Variants of the LK kernels (iterations, IEEE division and square
root, levels of the FB check) separate the per-iteration cost from the per-level cost.

Usage (GPU machine): ``python3 bench/profile_frame_kernels.py [--out DIR] [--quick]``; prints a table and
writes ``kernel_profile.json``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPS = 20
ROUNDS = 30
SPIN = 200_000


def load_frames():
    import cv2

    root = Path(os.environ.get("VILIB_ROS_EUROC", ".data/euroc_v101_head")) / "mav0/cam0/data"
    return [cv2.imread(str(p), 0) for p in sorted(root.glob("*.png"))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="only LK with and without the FB check, 1 / 2 / 4 warps "
                    "per feature (no variants of iterations, division, levels; no RANSAC, pyramid, detector)")
    ap.add_argument("--ransac", action="store_true", help="only the RANSAC kernel (ransac_frame) on the last two "
                    "frames' tracks")
    a = ap.parse_args()
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros._cuda import device_name, get_module, launch
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from bench.frontend import graph_times

    frames = load_frames()
    ft = FeatureTracker(euroc_cam0(), FrontendConfig(), device="cuda")
    last = []
    for k in range(a.frames):
        fr = ft.process(frames[k % len(frames)], 10**12 + 50_000_000 * k)
        last = [*last[-1:], (fr.ids.copy(), fr.xy.astype(np.float32))]
    p = ft.pipeline
    K = p.k
    st = p.stream
    s = (a.frames - 1) % 4
    spin = bench_util().get_function("gpu_spin")
    res = {"device": device_name(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "frames": a.frames, "count": int(K.hdr("count").get()[0])}
    it = K.t["lk_iters"][:res["count"]].get()
    res["lk_iters"] = {"sum": int(it.sum()), "mean": float(it.mean()), "max": int(it.max()),
                       "p99": float(np.percentile(it, 99))}

    def timed(name, enqueue, reps=REPS):
        try:
            st.synchronize()
            st.begin_capture()
            try:
                for _ in range(reps):
                    enqueue()
            finally:
                g = st.end_capture()
            ts = [t * 1e6 / reps for t in graph_times(g, st, ROUNDS, warm=3, spin_cycles=SPIN)]
            res[name] = {"p50_us": float(np.median(ts)), "min_us": float(np.min(ts))}
            print(f"{name:48s} {np.median(ts):8.2f} us  (min {np.min(ts):.2f})", flush=True)
        except Exception as exc:
            res[name] = {"error": f"{exc.__class__.__name__}: {exc}"}
            print(f"{name:48s} ERROR {exc.__class__.__name__}: {exc}", flush=True)
            try:
                st.synchronize()
            except Exception:
                pass

    def go(kern, grid, block, args):
        launch(kern, grid, block, args, stream=st, checked=False)

    timed("empty kernel node", lambda: spin((1, 1, 1), (1, 1, 1), (np.int64(0),), stream=st))
    if a.ransac:
        res["ransac_state"] = ransac_rows(K, ft.config, st, timed, go, last)
        return finish(res, a.out)
    count = K.hdr("count")
    tc = K.config.tracker

    def with_tracker(**kw):
        old = K.config
        K.config = dataclasses.replace(old, tracker=dataclasses.replace(old.tracker, **kw))
        try:
            return K._lk_templates(s, count)
        finally:
            K.config = old

    timed("lk_template_fb (FB check fused)", lambda: go(*K._lk_templates(s, count, fb=True)))
    # the thread mappings (LK_FEATURE_WARPS: 1, 2, 4 warps per feature) and where the level's
    # solver comes from (LK_PRESOLVE 1: stored with the template; 0: built every frame)
    from vilib_ros.frontend.config import SOLVER_AREA
    from vilib_ros.frontend.gpu.tracker import LK_OPTIONS
    res["lk_feature_warps"] = K.tracker.feature_warps
    tc0 = K.config.tracker
    defs0 = {"LK_WARPS": K.tracker.warps, "LK_OSC_EPS": f"{float(tc0.osc_eps)!r}f",
             "LK_OSC_GROWTH": f"{float(tc0.osc_growth)!r}f", "TPL_SOLVER": SOLVER_AREA}
    w = K.tracker.warps
    for fw, pre in ((1, 0), (2, 0), (2, 1), (4, 1), (1, 1)):
        mod = get_module("lk", {**defs0, "LK_FEATURE_WARPS": fw, "LK_PRESOLVE": pre}, LK_OPTIONS)
        grid = ((K.S + w // fw - 1) // (w // fw), 1, 1), (32, w, 1)
        for fbk in (True, False):
            k0, _, _, a0 = K._lk_templates(s, count, fb=fbk)
            kk = mod.get_function(f"lk_template_{'fb_' if fbk else ''}{tc0.warp}_{tc0.mode}")
            timed(f"lk_template{'_fb' if fbk else ''} ({fw} warp(s) per feature, "
                  f"{'stored solver' if pre else 'solver per frame'})",
                  lambda kk=kk, grid=grid, a0=a0: go(kk, *grid, a0))
    if a.quick:
        return finish(res, a.out)
    for mi in (30, 10, 3, 1):
        timed(f"lk_template (max_iterations {mi})", lambda mi=mi: go(*with_tracker(max_iterations=mi)))
    kern, grid, block, args = K._lk_templates(s, count)
    try:
        res["lk_template_regs"] = int(kern.num_regs)
        res["lk_template_local_bytes"] = int(kern.local_size_bytes)
    except Exception:
        pass
    fname = f"lk_template_{tc.warp}_{tc.mode}"
    base_defs = {"LK_OSC_EPS": f"{float(tc.osc_eps)!r}f", "LK_OSC_GROWTH": f"{float(tc.osc_growth)!r}f"}
    # the same kernel with IEEE division and square root (the build before tracker.LK_OPTIONS)
    kf = get_module("lk", {"LK_WARPS": K.tracker.warps, "LK_FEATURE_WARPS": K.tracker.feature_warps,
                           "TPL_SOLVER": SOLVER_AREA, **base_defs}).get_function(fname)
    timed("lk_template (IEEE division / sqrt)", lambda: go(kf, grid, block, args))
    sp = (s - 1) % 4
    t = K.t

    def fb(levels=None):
        old = K.config
        if levels is not None:
            K.config = dataclasses.replace(old, tracker=dataclasses.replace(old.tracker, levels=levels))
        try:
            return K._lk(K._lk_tab[s], K._lk_tab[sp], count, t["lk_pos"], t["uv"],
                         (t["fb_pos"], t["fb_status"], None, None), gate=t["lk_status"])
        finally:
            K.config = old

    for lv in (5, 3, 2, 1):
        timed(f"fb (levels {lv})", lambda lv=lv: go(*fb(lv)))
    res["ransac_state"] = ransac_rows(K, ft.config, st, timed, go, last)
    timed("lk_extract", lambda: go(*K._extract(s, count)))
    timed("pyramid_frame (mapped host frame)", lambda: K.enqueue_upload(s, False, p._prm_dev[s], st, False))
    # the same kernel reading a frame in device memory: its compute alone
    src_old = int(p._prm_u64[s, 0])
    p._prm_u64[s, 0] = K.pyrs[(s + 1) % 4].levels[0].data.ptr
    timed("pyramid_frame (device frame)", lambda: K.enqueue_upload(s, False, p._prm_dev[s], st, False))
    p._prm_u64[s, 0] = src_old
    det = K.detector
    off = cp.zeros(1, cp.int64)
    timed("crf+nms gated off", lambda: det.enqueue(K._det_desc[s], st, False, occupancy=t["occ"], gate=off,
                                                    block_rows=K.crf_block_rows), reps=10)
    finish(res, a.out)


def ransac_rows(K, c, st, timed, go, last):
    """The RANSAC kernel (ransac_frame: candidates, hypotheses, scores and the selection in one
    launch) on a real pair: the tracks the last two frames share (their undistorted positions, as
    float32 like the device table; not the frame's own table, which table_update has already
    moved on: there x1 = x2 and every hypothesis fails before it is scored). Returns its state."""
    import cupy as cp

    from vilib_ros.frontend.gpu import ransac as ransac_gpu

    (ids0, xy0), (ids1, xy1) = last
    common, i0, i1 = np.intersect1d(ids0, ids1, return_indices=True)
    n = len(common)
    g = ransac_gpu.GpuRansac(K.S)
    pad = np.zeros((K.S, 2), np.float32)
    x1, x2 = pad.copy(), pad.copy()
    x1[:n], x2[:n] = xy0[i0], xy1[i1]
    x1d, x2d = cp.asarray(x1), cp.asarray(x2)
    status = cp.zeros(K.S, cp.int8)
    hdr = cp.asarray(np.array([n, 0, 0, 0, 0, 0, 0, 0], np.int64))
    thr = c.ransac_threshold / K.fx

    def ransac():
        g.enqueue(st, False, hdr, status, x1d, x1d, x2d, None, None, 0.0, thr, c.ransac_confidence)

    ransac()
    st.synchronize()
    state = {**g.state(), "pairs": n}
    print(f"RANSAC on the last two frames: {state}", flush=True)
    timed("ransac_frame", ransac)
    return state


def finish(res, out):
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "kernel_profile.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, dict) or "p50_us" not in v}, default=str))


if __name__ == "__main__":
    main()
