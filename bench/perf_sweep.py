"""Variant sweep for the two GPU performance misses (LK tracker, NMS-C), one device call.

Usage (device machine): PYTHONPATH=. VILIB_ROS_EUROC=.data/euroc_v101_head python3 bench/perf_sweep.py OUT_DIR [lk|nms|all]

* LK: 100 EuRoC features (the bench's goodFeaturesToTrack points), 16 frame pairs, modes
  gain_offset / translation, oscillation stop on/off, LK_WARPS 1/2/4/8. GPU time two ways:
  'ev' = events around the launch with the GPU idle (the old bench method: includes the host
  launch gap), 'q' = the same with the GPU first held busy by a spin kernel (kernel execution
  only); host end to end as in bench-tracker; iterations; agreement with the NumPy reference.
* NMS: l = 1, 2, n = 1..4 (sad_arc), warps_per_cell x nms_pix, kernels: flat NMS-C ('global'),
  the earlier one ('global_v0'), 'smem', baseline (full map + flat / v0 cell selection); cell
  outputs of every variant compared with 'global_v0' on every frame.
Prints short tables; writes perf_sweep.json into OUT_DIR.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

SPIN = 400_000


def _frames():
    from vilib_ros.bench.tracker import load_frames

    return load_frames(os.environ.get("VILIB_ROS_EUROC", ".data/euroc_v101_head"))


def sweep_lk(frames, warps_list=(4,)):
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros.bench.tracker import _features
    from vilib_ros.frontend.config import TrackerConfig
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid
    from vilib_ros.frontend.gpu.tracker import GpuLKTracker
    from vilib_ros.frontend.reference.lk import track_cpu

    spin = bench_util().get_function("gpu_spin")
    W, H = frames[0].shape[1], frames[0].shape[0]
    pts = _features(frames[0], 100)
    n = len(pts)
    pairs = [(i, i + 1) for i in range(16)]
    pyrs = {}
    for i in range(17):
        p = GpuPyramid(W, H, 5)
        p.upload(frames[i])
        p.build()
        pyrs[i] = p
    cp.cuda.Device().synchronize()
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    rt = cp.cuda.runtime
    rows = []
    for mode in ("gain_offset", "translation"):
        for osc in (True, False):
            cfg = TrackerConfig(mode=mode) if osc else TrackerConfig(mode=mode, osc_eps=0.0, osc_growth=0.0)
            refs = {a: track_cpu(frames[a], frames[b], pts, None, cfg) for a, b in pairs[:4]}
            for warps in warps_list:
                trk = GpuLKTracker(W, H, cfg, max_features=n, warps=warps)
                pin_in = cp.cuda.alloc_pinned_memory(trk.in_layout.nbytes)
                h_in_buf = np.frombuffer(pin_in, np.uint8, trk.in_layout.nbytes)
                h_in = trk.in_layout.views(h_in_buf)
                pin_out = cp.cuda.alloc_pinned_memory(trk.out_layout.nbytes)
                h_out = trk.out_layout.views(np.frombuffer(pin_out, np.uint8, trk.out_layout.nbytes))
                h_in["tmpl_pos"][:n] = pts
                h_in["pred"][:n] = pts
                h_in["active"][:] = 1
                trk.d_in_buf.set(h_in_buf)
                ev, q, host, enq, its, mx, trk_frac = [], [], [], [], [], 0, []
                agree, dpos = [], []
                for r in range(120):
                    a, b = pairs[r % len(pairs)]
                    e0.record(stream)
                    trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream,
                                     checked=False)
                    e1.record(stream)
                    e1.synchronize()
                    t_ev = cp.cuda.get_elapsed_time(e0, e1) * 1e3
                    spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN),), stream=stream)
                    e0.record(stream)
                    t0 = time.perf_counter()
                    trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream,
                                     checked=False)
                    t_enq = time.perf_counter() - t0
                    e1.record(stream)
                    e1.synchronize()
                    t_q = cp.cuda.get_elapsed_time(e0, e1) * 1e3
                    t0 = time.perf_counter()
                    rt.memcpyAsync(trk.d_in_buf.data.ptr, h_in_buf.ctypes.data, trk.in_layout.nbytes,
                                   rt.memcpyHostToDevice, stream.ptr)
                    trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream,
                                     checked=False)
                    rt.memcpyAsync(pin_out.ptr, trk.d_out_buf.data.ptr, trk.out_layout.nbytes, rt.memcpyDeviceToHost,
                                   stream.ptr)
                    stream.synchronize()
                    t_host = (time.perf_counter() - t0) * 1e6
                    if r >= 10:
                        ev.append(t_ev)
                        q.append(t_q)
                        host.append(t_host)
                        enq.append(t_enq * 1e6)
                        st, it = h_out["status"][:n], h_out["iterations"][:n]
                        its.append(float(it.mean()))
                        mx = max(mx, int(it.max()))
                        trk_frac.append(float(np.mean(st == 0)))
                        if a in refs and r < 30:
                            ref = refs[a]
                            agree.append(float(np.mean(st == ref.status)))
                            both = (st == 0) & (ref.status == 0)
                            dpos.append(np.linalg.norm(h_out["pos"][:n] - ref.pos, axis=1)[both])
                dp = np.concatenate(dpos) if dpos else np.zeros(1)
                row = {"mode": mode, "osc": osc, "warps": warps, "gpu_us_events": float(np.median(ev)),
                       "gpu_us_queued": float(np.median(q)), "host_us": float(np.median(host)),
                       "enqueue_us": float(np.median(enq)), "mean_iters": float(np.mean(its)), "max_iters": mx,
                       "tracked": float(np.mean(trk_frac)), "status_agree_ref": float(np.mean(agree)),
                       "pos_diff_ref_median": float(np.median(dp)), "pos_diff_ref_p99": float(np.percentile(dp, 99))}
                rows.append(row)
                print("LK %-11s osc=%d warps=%d  gpu ev %6.1f  q %6.1f  host %6.1f  enq %5.1f  it %5.1f/%3d  trk %.3f  "
                      "agree %.3f  dpos med %.2e p99 %.2e" % (mode, osc, warps, row["gpu_us_events"], row["gpu_us_queued"],
                                                             row["host_us"], row["enqueue_us"], row["mean_iters"], mx,
                                                             row["tracked"], row["status_agree_ref"],
                                                             row["pos_diff_ref_median"], row["pos_diff_ref_p99"]),
                      flush=True)
    return rows


def sweep_nms(frames, n_frames=24, warps_list=(8,), reps=1):
    import cupy as cp

    from vilib_ros.bench.detector import detect_timed
    from vilib_ros.frontend.config import DetectorConfig
    from vilib_ros.frontend.gpu.detector import GpuFastDetector

    H, W = frames[0].shape
    rows = []
    mism = 0
    for levels in (1, 2):
        for r in (1, 2, 3, 4):
            cfg = DetectorConfig(levels=levels, nms_radius=r, score="sad_arc")
            ref_cells = {}
            for warps in warps_list:
                for static in (False, True):
                    det = GpuFastDetector(W, H, cfg, warps_per_cell=warps, static_geometry=static, use_graph=False)
                    ring = det.pinned_frames(n_frames)
                    for buf, f in zip(ring, frames):
                        buf[...] = f
                    ev = [cp.cuda.Event() for _ in range(4)]
                    variants = [("global", False), ("smem", False), ("base", True)]
                    times = {v[0]: [] for v in variants}
                    for rep in range(reps):
                        for fi, buf in enumerate(ring):
                            for name, base in variants:
                                det.nms_kernel = "global" if base else name
                                res = detect_timed(det, buf, ev, baseline=base)
                                if rep > 0 or fi > 0:
                                    times[name].append(cp.cuda.get_elapsed_time(ev[2], ev[3]) * 1e3)
                                o = np.concatenate([res.x, res.y, res.score, res.level.astype(np.float32)])
                                if fi not in ref_cells:
                                    ref_cells[fi] = o
                                elif not np.array_equal(o, ref_cells[fi], equal_nan=True):
                                    mism += 1
                                    print("MISMATCH", levels, r, warps, static, name, fi, flush=True)
                    row = {"levels": levels, "n": r, "warps": warps, "static": static,
                           **{k: float(np.median(v)) for k, v in times.items()}}
                    rows.append(row)
                    best = min(row["global"], row["smem"])
                    print("NMS l=%d n=%d w=%d static=%d  global %5.1f  smem %5.1f  base %5.1f | base/global %.2fx "
                          "base/smem %.2fx base/best %.2fx" % (levels, r, warps, static, row["global"], row["smem"],
                                                               row["base"], row["base"] / row["global"],
                                                               row["base"] / row["smem"], row["base"] / best), flush=True)
    print("NMS mismatches:", mism)
    return rows


def profile_target(frames, what):
    """A few launches of one kernel for ncu (default configuration)."""
    import cupy as cp

    if what == "lkprof":
        from vilib_ros.bench.tracker import _features
        from vilib_ros.frontend.factory import make_tracker

        pts = _features(frames[0], 100)
        trk = make_tracker(frames[0].shape[1], frames[0].shape[0], device="cuda", max_features=len(pts))
        for i in range(12):
            trk.track(frames[i], frames[i + 1], pts)
    else:
        from vilib_ros.frontend.config import DetectorConfig
        from vilib_ros.frontend.gpu.detector import GpuFastDetector

        for levels in (1, 2):
            det = GpuFastDetector(frames[0].shape[1], frames[0].shape[0], DetectorConfig(levels=levels), use_graph=False)
            for f in frames[:6]:
                det.detect(f)
                det.detect_baseline(f)
    cp.cuda.Device().synchronize()


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out")
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    out.mkdir(parents=True, exist_ok=True)
    frames = _frames()
    if what in ("lkprof", "nmsprof"):
        return profile_target(frames, what)
    res = {}
    if what in ("nms", "all"):
        res["nms"] = sweep_nms(frames)
        (out / "perf_sweep.json").write_text(json.dumps(res, indent=1))
    if what in ("lk", "all"):
        res["lk"] = sweep_lk(frames)
        (out / "perf_sweep.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
