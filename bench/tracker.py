"""``python -m bench tracker``: the LK tracker and the whole frontend, against OpenCV.

Measured in one run:

* tracker over 50..1000 features per mode (translation / offset / gain / gain_offset) on
  real EuRoC frame pairs (pyramids already on the device, as in the frontend):
  ``gpu_us`` = CUDA-event time of the LK kernel, ``host_us`` = host wall time of one
  tracking call end to end (positions up from pinned memory, kernel, results down to pinned
  memory, synchronise), ``host_pyr_us`` = the same plus image upload and pyramid build;
  OpenCV CPU ``calcOpticalFlowPyrLK`` (21x21 window, 3 levels) on the same features and frames;
* IMU prediction on/off on the fast-rotation synthetic preset (tracks kept frame to frame,
  mean LK iterations, median error against ground-truth flow);
* the whole frontend (:class:`vilib_ros.frontend.FeatureTracker`) on the real frames looped
  ``--frames`` times: sustained frames/s, per-frame latency p50/p99, GPU time per frame, with
  and without the stream pipeline (submit ahead / result) and CUDA graph capture; CuPy memory
  pool used bytes after warm-up and at the end;
* the per-frame table (:mod:`bench.frontend`): ``process()`` from a pageable frame,
  mono and stereo, p50/p90/p99, host and GPU time per frame, submit-ahead frames/s, against the
  original implementation's 125 us / ~8,000 frames/s.

Writes ``tracker_bench.json``, ``tracker_bench.md`` and ``frontend_per_frame.{json,md}`` to ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import time
from pathlib import Path

import numpy as np

from bench.results import write_results

log = logging.getLogger("bench.tracker")

REPO = Path(__file__).resolve().parents[1]
#: the committed per-frame table: each new one shows the change against it
PREVIOUS_PER_FRAME = REPO / "bench" / "results" / "frontend_per_frame.json"
TARGETS = {"gpu_us_100": 40.0, "host_us_100": 60.0, "speedup_vs_opencv": 10.0, "frontend_fps": 5000.0,
           "frontend_p99_ms": 0.5}
STAMP0 = 1_000_000_000_000
DT_NS = 50_000_000


def default_frames_dir() -> str:
    env = os.environ.get("VILIB_ROS_EUROC")
    if env:
        return env
    for c in (REPO.parent / "shared" / "data" / "euroc_v101_head", REPO / ".data" / "euroc_v101_head"):
        if (c / "mav0" / "cam0" / "data").is_dir():
            return str(c)
    return "../shared/data/euroc_v101_head"


def configure_parser(p) -> None:
    p.add_argument("--out", default="bench/out", help="output folder for tracker_bench.{json,md}")
    p.add_argument("--frames", type=int, default=10000, help="frames for the whole-frontend runs (real frames looped)")
    p.add_argument("--frames-dir", default=default_frames_dir(),
                   help="EuRoC ASL folder; default $VILIB_ROS_EUROC or ../shared/data/euroc_v101_head")
    p.add_argument("--features", default="50,100,200,400,700,1000", help="feature counts for the tracker sweep")
    p.add_argument("--repeats", type=int, default=200, help="tracking calls per (features, mode)")
    p.add_argument("--imu-frames", type=int, default=40, help="frames of the fast-rotation synthetic run")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--per-frame", type=int, default=2000,
                   help="frames per measurement of the per-frame table (process() from pageable frames); 0 = skip")
    p.add_argument("--per-frame-only", action="store_true",
                   help="only the per-frame table: frontend_per_frame.json and frontend_per_frame.md in --out")
    p.add_argument("--templates-only", action="store_true",
                   help="only the cost of reference templates + affine warp against frame to frame (process() mono and "
                        "stereo, --per-frame frames per variant): frontend_templates.json and .md in --out")


def load_frames(path) -> list[np.ndarray]:
    import cv2

    files = sorted((Path(path) / "mav0" / "cam0" / "data").glob("*.png"))
    if not files:
        raise FileNotFoundError(f"no frames under {path}/mav0/cam0/data")
    return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]


def _pct(v, q):
    return float(np.percentile(np.asarray(v, float), q)) if len(v) else float("nan")


def _features(img, n):
    import cv2

    pts = cv2.goodFeaturesToTrack(img, n, 0.001, 5, blockSize=5).reshape(-1, 2)
    m = (pts[:, 0] > 20) & (pts[:, 0] < img.shape[1] - 21) & (pts[:, 1] > 20) & (pts[:, 1] < img.shape[0] - 21)
    return np.ascontiguousarray(pts[m][:n].astype(np.float32))


# ------------------------------------------------------------------------------------ tracker

SPIN_CYCLES = 400_000   # ~0.2 ms: longer than the host needs to enqueue the measured launch


def _spin_kernel():
    from bench.kernels import bench_util

    return bench_util().get_function("gpu_spin")



def bench_opencv(frames, pts_all, counts, repeats):
    import cv2

    out = {}
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01)
    for n in counts:
        pts = pts_all[:n].reshape(-1, 1, 2)
        times = []
        reps = max(20, repeats // 4)
        for r in range(reps):
            i = (r * 7) % (len(frames) - 1)
            t0 = time.perf_counter()
            cv2.calcOpticalFlowPyrLK(frames[i], frames[i + 1], pts, None, winSize=(21, 21), maxLevel=2, criteria=crit)
            times.append(time.perf_counter() - t0)
        out[n] = {"host_us_median": 1e6 * float(np.median(times)), "host_us_p90": 1e6 * _pct(times, 90)}
    return out


def bench_gpu_tracker(frames, pts_all, counts, repeats, mode):
    """Per feature count: GPU kernel time (CUDA events), host end to end (one packed upload of
    positions + initial guesses, the kernel, one packed download into pinned memory, synchronise),
    and the same with the new frame's upload from pinned memory + pyramid build."""
    import cupy as cp

    from vilib_ros.frontend.config import TrackerConfig
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid
    from vilib_ros.frontend.gpu.tracker import GpuLKTracker

    cfg = TrackerConfig(mode=mode)
    W, H = frames[0].shape[1], frames[0].shape[0]
    m = max(counts)
    trk = GpuLKTracker(W, H, cfg, max_features=m)
    stream = cp.cuda.Stream(non_blocking=True)
    pairs = [(i, i + 1) for i in range(0, min(len(frames) - 1, 16))]
    pyrs = {}
    for i in {j for p in pairs for j in p}:
        p = GpuPyramid(W, H, cfg.levels)
        p.upload(frames[i])
        p.build()
        pyrs[i] = p
    cp.cuda.Device().synchronize()
    pin_in = cp.cuda.alloc_pinned_memory(trk.in_layout.nbytes)
    h_in_buf = np.frombuffer(pin_in, np.uint8, trk.in_layout.nbytes)
    h_in = trk.in_layout.views(h_in_buf)
    pin_out = cp.cuda.alloc_pinned_memory(trk.out_layout.nbytes)
    h_out = trk.out_layout.views(np.frombuffer(pin_out, np.uint8, trk.out_layout.nbytes))
    pin_img = cp.cuda.alloc_pinned_memory(W * H)
    h_img = np.frombuffer(pin_img, np.uint8, W * H).reshape(H, W)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    spin = _spin_kernel()
    rt = cp.cuda.runtime
    H2D, D2H = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    scratch = GpuPyramid(W, H, cfg.levels)
    trk.level_table(scratch)
    for p in pyrs.values():
        trk.level_table(p)
    out = {}
    for n in counts:
        h_in["tmpl_pos"][:n] = pts_all[:n]
        h_in["pred"][:n] = pts_all[:n]
        h_in["active"][:] = 1
        gpu_t, gpu_idle_t, host_t, host_pyr_t, iters, tracked, max_it = [], [], [], [], [], [], 0
        for r in range(repeats + 10):
            a, b = pairs[r % len(pairs)]
            # 1) GPU time of the kernel alone: the GPU is first held busy by a spin kernel, so the
            #    events bracket the kernel's execution, not the host's launch gap ...
            spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=stream)
            e0.record(stream)
            trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream, checked=False)
            e1.record(stream)
            e1.synchronize()
            t_gpu = cp.cuda.get_elapsed_time(e0, e1) * 1e-3
            # ... and (earlier method, for comparison) events around the launch on an idle GPU,
            #    which include the Python launch time between the two records
            e0.record(stream)
            trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream, checked=False)
            e1.record(stream)
            e1.synchronize()
            t_gpu_idle = cp.cuda.get_elapsed_time(e0, e1) * 1e-3
            # 2) host end to end, pyramids on the device
            t0 = time.perf_counter()
            rt.memcpyAsync(trk.d_in_buf.data.ptr, h_in_buf.ctypes.data, trk.in_layout.nbytes, H2D, stream.ptr)
            trk.track_device(pyrs[a], pyrs[b], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream, checked=False)
            rt.memcpyAsync(pin_out.ptr, trk.d_out_buf.data.ptr, trk.out_layout.nbytes, D2H, stream.ptr)
            stream.synchronize()
            t1 = time.perf_counter()
            st, it = h_out["status"][:n].copy(), h_out["iterations"][:n].copy()
            # 3) + the new frame: copy into pinned, upload, pyramid
            t2 = time.perf_counter()
            np.copyto(h_img, frames[b])
            rt.memcpyAsync(scratch.levels[0].data.ptr, h_img.ctypes.data, W * H, H2D, stream.ptr)
            scratch.launches(stream=stream, checked=False)
            rt.memcpyAsync(trk.d_in_buf.data.ptr, h_in_buf.ctypes.data, trk.in_layout.nbytes, H2D, stream.ptr)
            trk.track_device(pyrs[a], scratch, trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream, checked=False)
            rt.memcpyAsync(pin_out.ptr, trk.d_out_buf.data.ptr, trk.out_layout.nbytes, D2H, stream.ptr)
            stream.synchronize()
            t3 = time.perf_counter()
            if r >= 10:
                gpu_t.append(t_gpu)
                gpu_idle_t.append(t_gpu_idle)
                host_t.append(t1 - t0)
                host_pyr_t.append(t3 - t2)
                tracked.append(np.count_nonzero(st == 0) / n)
                iters.append(float(it[st == 0].mean()) if np.any(st == 0) else 0.0)
                max_it = max(max_it, int(it.max()))
        out[n] = {"gpu_us_median": 1e6 * float(np.median(gpu_t)), "gpu_us_p90": 1e6 * _pct(gpu_t, 90),
                  "gpu_idle_us_median": 1e6 * float(np.median(gpu_idle_t)),
                  "host_us_median": 1e6 * float(np.median(host_t)), "host_us_p90": 1e6 * _pct(host_t, 90),
                  "host_pyr_us_median": 1e6 * float(np.median(host_pyr_t)),
                  "tracked_fraction": float(np.mean(tracked)), "mean_iterations": float(np.mean(iters)),
                  "max_iterations": max_it}
    return out


def bench_iteration_cap(frames, pts_all, n=100, mode="gain_offset", caps=(1, 2, 5, 10, 20, 30), repeats=50):
    """GPU kernel time against the per-level iteration cap: one warp per feature makes the kernel
    as long as its slowest feature, so the time follows the cap (the tail), not the mean."""
    import cupy as cp

    from vilib_ros.frontend.config import TrackerConfig
    from vilib_ros.frontend.gpu.pyramid import GpuPyramid
    from vilib_ros.frontend.gpu.tracker import GpuLKTracker

    W, H = frames[0].shape[1], frames[0].shape[0]
    pyrs = []
    for i in range(9):
        p = GpuPyramid(W, H, 5)
        p.upload(frames[i])
        p.build()
        pyrs.append(p)
    stream = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    out = {}
    for cap in caps:
        trk = GpuLKTracker(W, H, TrackerConfig(mode=mode, max_iterations=cap), max_features=n)
        trk.d_tmpl_pos.set(pts_all[:n])
        trk.d_pred.set(pts_all[:n])
        trk.d_active.fill(1)
        cp.cuda.Device().synchronize()
        ts, mx = [], 0
        spin = _spin_kernel()
        for r in range(repeats + 5):
            a = r % 8
            spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=stream)
            e0.record(stream)
            trk.track_device(pyrs[a], pyrs[a + 1], trk.d_tmpl_pos, trk.d_pred, trk.d_active, n, stream=stream,
                             checked=False)
            e1.record(stream)
            e1.synchronize()
            if r >= 5:
                ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
                mx = max(mx, int(trk.d_out["iterations"].get().max()))
        out[cap] = {"gpu_us_median": 1e6 * float(np.median(ts)), "max_total_iterations": mx}
    return out


# ------------------------------------------------------------------------------------ IMU


def bench_imu(device, n_frames):
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.synthetic import SequenceConfig, SyntheticSequence

    seq = SyntheticSequence(SequenceConfig(duration_s=n_frames / 20.0, stereo=False, seed=2, preset="fast_rotation"))
    n = min(n_frames, seq.num_frames)
    imgs = [seq.render(k)[0] for k in range(n)]
    t_imu, imu, _, _ = seq.imu()
    st = seq.frame_stamps_ns
    res = {}
    for use in (False, True):
        ft = FeatureTracker(seq.camera(0), FrontendConfig(imu_prediction=use), device=device)
        kept, errs, prev = [], [], None
        for k in range(n):
            m = (t_imu >= st[k - 1] - 10_000_000) & (t_imu <= st[k] + 10_000_000) if k else np.zeros(len(t_imu), bool)
            fr = ft.process(imgs[k], int(st[k]), gyro=np.column_stack([t_imu[m], imu[m, :3]]))
            if prev is not None and len(prev):
                common, i0, i1 = np.intersect1d(prev.ids, fr.ids, return_indices=True)
                gt, vis = seq.gt_flow(k - 1, k, prev.uv[i0])
                errs.append(np.linalg.norm(fr.uv[i1] - gt, axis=1)[vis])
                kept.append(len(common) / len(prev))
            prev = fr
        e = np.concatenate(errs) if errs else np.zeros(0)
        s = ft.stats
        res["imu_prediction" if use else "no_prediction"] = {
            "tracks_kept_per_frame": float(np.mean(kept)), "mean_iterations": s["iterations_total"] / max(1, s["tracked_total"]),
            "median_error_px": float(np.median(e)) if e.size else float("nan"),
            "gross_error_fraction": float(np.mean(e > 1.0)) if e.size else float("nan"),
            "redetections": int(s["redetections"]), "tracks_lost": int(s["tracks_lost"]), "frames": n}
    return res


# ------------------------------------------------------------------------------------ frontend


def bench_frontend(frames, n_frames, device, pipelined, use_graph, max_features=0):
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    ft = FeatureTracker(euroc_cam0(), FrontendConfig(use_graph=use_graph, max_features=max_features), device=device)
    pool = None
    if ft.device == "cuda":
        import cupy as cp

        pool = cp.get_default_memory_pool()
    nf = len(frames)
    warm = 50
    lat, gpu, ntr = [], [], []
    mem = {}
    t_start = None
    k = 0
    total = n_frames + warm
    if pipelined:
        ft.submit(frames[0], STAMP0)
        for k in range(1, total + 1):
            if k == warm:
                if pool is not None:
                    mem["start"] = int(pool.used_bytes())
                t_start = time.perf_counter()
            if k < total:
                ft.submit(frames[k % nf], STAMP0 + k * DT_NS)
            fr = ft.result()
            if k > warm:
                lat.append(fr.timings["total_s"])
                gpu.append(fr.timings.get("gpu_s", np.nan))
                ntr.append(len(fr))
    else:
        for k in range(total):
            if k == warm:
                if pool is not None:
                    mem["start"] = int(pool.used_bytes())
                t_start = time.perf_counter()
            t0 = time.perf_counter()
            fr = ft.process(frames[k % nf], STAMP0 + k * DT_NS)
            if k >= warm:
                lat.append(time.perf_counter() - t0)
                gpu.append(fr.timings.get("gpu_s", np.nan))
                ntr.append(len(fr))
    wall = time.perf_counter() - t_start
    if pool is not None:
        mem["end"] = int(pool.used_bytes())
    return {"device": ft.device, "pipelined": pipelined, "graph": bool(use_graph and ft.device == "cuda"),
            "graph_error": getattr(ft, "graph_error", None), "frames": len(lat), "fps": len(lat) / wall,
            "latency_ms_p50": 1e3 * _pct(lat, 50), "latency_ms_p99": 1e3 * _pct(lat, 99),
            "latency_ms_max": 1e3 * float(np.max(lat)), "gpu_us_p50": 1e6 * float(np.nanmedian(gpu)) if np.isfinite(gpu).any() else None,
            "tracks_per_frame": float(np.mean(ntr)), "redetections": int(ft.stats["redetections"]),
            "graph_launches": int(ft.stats.get("graph_launches", 0)), "pool_used_bytes": mem}


def profile_frontend(frames, n_frames, device):
    """Where the host time of the fastest frontend variant goes (cProfile, per frame)."""
    import cProfile
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    bench_frontend(frames, n_frames, device, True, True)
    pr.disable()
    st = pstats.Stats(pr)
    rows = []
    for (fn, line, name), (cc, nc, tt, ct, _) in st.stats.items():
        rows.append({"function": f"{Path(fn).name}:{line}:{name}", "calls_per_frame": nc / (n_frames + 50),
                     "self_us_per_frame": 1e6 * tt / (n_frames + 50), "cum_us_per_frame": 1e6 * ct / (n_frames + 50)})
    rows.sort(key=lambda r: -r["self_us_per_frame"])
    return rows[:25]


def _host_overhead(frames, device):
    """Python-side cost per CuPy launch (empty-ish kernel), to explain misses."""
    if device != "cuda":
        return None
    import cupy as cp

    k = cp.RawKernel(r'extern "C" __global__ void nop(int* p) { if (threadIdx.x == 1234) p[0] = 1; }', "nop")
    a = cp.zeros(1, cp.int32)
    s = cp.cuda.Stream(non_blocking=True)
    for _ in range(100):
        k((1,), (32,), (a,), stream=s)
    s.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        k((1,), (32,), (a,), stream=s)
    t1 = time.perf_counter()
    s.synchronize()
    ev = cp.cuda.Event()
    t2 = time.perf_counter()
    for _ in range(2000):
        ev.record(s)
        ev.synchronize()
    t3 = time.perf_counter()
    return {"launch_us": 1e6 * (t1 - t0) / 2000, "record_sync_roundtrip_us": 1e6 * (t3 - t2) / 2000}


# ------------------------------------------------------------------------------------ report


def _md(res) -> str:
    L = ["# Tracker / frontend benchmark", "", f"- device: {res['device_name']}", f"- date: {res['date']}",
         f"- data: {res['data']}", f"- host: {res['host']}", ""]
    tr = res.get("tracker", {})
    if tr:
        L += ["## LK tracker (pyramids on the device; real EuRoC pairs)", "",
              "GPU us (kernel) = CUDA events around the launch with the GPU first held busy by a spin kernel "
              "(kernel execution); GPU us (idle events) = events around the launch on an idle GPU (the method of "
              "earlier runs: adds the host's launch time between the two records).", "",
              "| features | mode | GPU us (kernel) | GPU us (idle events) | host us (e2e) | host us (+upload+pyramid) | tracked | mean iters | max iters | OpenCV CPU us | speed-up (host) |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, modes in tr["gpu"].items():
            ocv = tr["opencv"].get(n, {}).get("host_us_median", float("nan"))
            for mode, r in modes.items():
                L.append(f"| {n} | {mode} | {r['gpu_us_median']:.1f} | {r.get('gpu_idle_us_median', float('nan')):.1f} | {r['host_us_median']:.1f} | {r['host_pyr_us_median']:.1f} | "
                         f"{r['tracked_fraction']:.2f} | {r['mean_iterations']:.1f} | {r['max_iterations']} | {ocv:.0f} | "
                         f"{ocv / r['host_us_median']:.1f}x |")
        L.append("")
    imu = res.get("imu")
    if imu:
        L += ["## IMU prediction, fast-rotation synthetic preset", "",
              "| | tracks kept / frame | mean LK iterations | median error px | > 1 px |", "|---|---:|---:|---:|---:|"]
        for k, v in imu.items():
            L.append(f"| {k} | {v['tracks_kept_per_frame']:.1%} | {v['mean_iterations']:.1f} | {v['median_error_px']:.3f} | "
                     f"{v['gross_error_fraction']:.1%} |")
        L.append("")
    fe = res.get("frontend", [])
    if fe:
        L += ["## Whole frontend, real frames looped", "",
              "| pipeline | graph | frames | frames/s | latency p50 ms | p99 ms | max ms | GPU us p50 | tracks/frame | redetections | pool bytes start/end |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in fe:
            g = r["gpu_us_p50"]
            L.append(f"| {'submit-ahead' if r['pipelined'] else 'process()'} | {r['graph']} | {r['frames']} | {r['fps']:.0f} | "
                     f"{r['latency_ms_p50']:.3f} | {r['latency_ms_p99']:.3f} | {r['latency_ms_max']:.2f} | "
                     f"{'' if g is None else f'{g:.0f}'} | {r['tracks_per_frame']:.0f} | {r['redetections']} | "
                     f"{r['pool_used_bytes'].get('start')}/{r['pool_used_bytes'].get('end')} |")
        L.append("")
    if res.get("iteration_cap"):
        L += ["## LK kernel time vs the per-level iteration cap (100 features, gain_offset)", "",
              "| cap | GPU us | max total iterations of a feature |", "|---:|---:|---:|"]
        for k, v in res["iteration_cap"].items():
            L.append(f"| {k} | {v['gpu_us_median']:.1f} | {v['max_total_iterations']} |")
        L.append("")
    if res.get("host_profile"):
        L += ["## Host time per frame, submit-ahead + graph (cProfile, top 25 by self time; profiler overhead included)", "",
              "| function | calls/frame | self us/frame | cumulative us/frame |", "|---|---:|---:|---:|"]
        for r in res["host_profile"]:
            L.append(f"| `{r['function']}` | {r['calls_per_frame']:.2f} | {r['self_us_per_frame']:.1f} | {r['cum_us_per_frame']:.1f} |")
        L.append("")
    if res.get("launch_overhead"):
        o = res["launch_overhead"]
        L += [f"CuPy launch cost from Python: {o['launch_us']:.1f} us per kernel launch, "
              f"{o['record_sync_roundtrip_us']:.1f} us per event record + synchronize.", ""]
    if res.get("per_frame"):
        from bench.frontend import markdown

        L += [markdown(res["per_frame"])]
    L += ["## Targets", ""] + [f"- {t}" for t in res.get("verdicts", [])]
    return "\n".join(L) + "\n"


def _verdicts(res):
    v = []
    tr = res.get("tracker", {})
    g100 = tr.get("gpu", {}).get(100, {}).get("gain_offset")
    o100 = tr.get("opencv", {}).get(100)
    t100 = tr.get("gpu", {}).get(100, {}).get("translation")
    if t100:
        v.append(f"100 features (translation): GPU {t100['gpu_us_median']:.1f} us, host end to end "
                 f"{t100['host_us_median']:.1f} us"
                 + (f", {o100['host_us_median'] / t100['host_us_median']:.1f}x OpenCV CPU LK" if o100 else ""))
    if g100:
        idle = g100.get("gpu_idle_us_median")
        v.append(f"100 features (gain_offset): GPU {g100['gpu_us_median']:.1f} us kernel execution"
                 + (f" ({idle:.1f} us with idle-GPU events, the earlier method)" if idle is not None else "")
                 + f" (target <= {TARGETS['gpu_us_100']:.0f}): "
                 f"{'met' if g100['gpu_us_median'] <= TARGETS['gpu_us_100'] else 'MISSED'}")
        v.append(f"100 features (gain_offset): host end to end {g100['host_us_median']:.1f} us (target <= {TARGETS['host_us_100']:.0f}): "
                 f"{'met' if g100['host_us_median'] <= TARGETS['host_us_100'] else 'MISSED'}")
        if o100:
            sp = o100["host_us_median"] / g100["host_us_median"]
            v.append(f"speed-up vs OpenCV CPU LK at 100 features: {sp:.1f}x (target >= {TARGETS['speedup_vs_opencv']:.0f}x): "
                     f"{'met' if sp >= TARGETS['speedup_vs_opencv'] else 'MISSED'}")
    cap = res.get("iteration_cap")
    if cap and g100 and g100["gpu_us_median"] > TARGETS["gpu_us_100"]:
        ks = sorted(cap, key=int)
        lo, hi = cap[ks[0]], cap[ks[-1]]
        slope = (hi["gpu_us_median"] - lo["gpu_us_median"]) / max(1, hi["max_total_iterations"] - lo["max_total_iterations"])
        v.append(f"why the GPU time misses: one warp per feature makes the kernel as long as its slowest feature. "
                 f"With 100 features the mean is {g100['mean_iterations']:.1f} iterations but the slowest feature runs "
                 f"{g100.get('max_iterations', hi['max_total_iterations'])} (the 30-per-level cap on 4-5 levels: gain/offset "
                 f"drifting on weak coarse-level patches). Measured: {lo['gpu_us_median']:.1f} us with a cap of "
                 f"{ks[0]} ({lo['max_total_iterations']} iterations: launch + per-level setup), then "
                 f"{slope:.2f} us per extra iteration of the slowest feature; a cap of 5 per level would give "
                 f"{cap.get('5', {}).get('gpu_us_median', float('nan')):.1f} us")
    lo_ = res.get("launch_overhead")
    if lo_ and g100 and g100["host_us_median"] > TARGETS["host_us_100"]:
        v.append(f"why host end to end misses: it is the GPU time ({g100['gpu_us_median']:.1f} us) plus 3 CuPy calls "
                 f"(upload, launch, download; {lo_['launch_us']:.1f} us per launch from Python) and the synchronisation")
    fe = [r for r in res.get("frontend", []) if r["device"] == "cuda"]
    if fe:
        best = max(fe, key=lambda r: r["fps"])
        v.append(f"frontend best {best['fps']:.0f} frames/s ({'submit-ahead' if best['pipelined'] else 'process()'}, graph={best['graph']}) "
                 f"(target >= {TARGETS['frontend_fps']:.0f}): {'met' if best['fps'] >= TARGETS['frontend_fps'] else 'MISSED'}")
        bp = min(fe, key=lambda r: r["latency_ms_p99"])
        v.append(f"frontend best p99 latency {bp['latency_ms_p99']:.3f} ms (target < {TARGETS['frontend_p99_ms']}): "
                 f"{'met' if bp['latency_ms_p99'] < TARGETS['frontend_p99_ms'] else 'MISSED'}")
        flat = all(r["pool_used_bytes"].get("start") == r["pool_used_bytes"].get("end") for r in fe)
        v.append(f"memory pool used bytes flat over every run: {flat}")
    return v


def render_markdown_from_json(path) -> str:
    """Markdown of a saved tracker_bench.json (re-rendered with the current report code)."""
    res = json.loads(Path(path).read_text())
    res["tracker"] = {"gpu": {int(k): v for k, v in res["tracker"]["gpu"].items()},
                      "opencv": {int(k): v for k, v in res["tracker"]["opencv"].items()}}
    res["verdicts"] = _verdicts(res)
    return _md(res)


def run_command(args) -> int:
    from vilib_ros._cuda import device_name, resolve_device

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(args.device)
    for flag, module, fn, stem in (("templates_only", "templates", "bench_templates", "frontend_templates"),
                                   ("per_frame_only", "frontend", "bench_per_frame", "frontend_per_frame")):
        if not getattr(args, flag, False):
            continue
        if device != "cuda":
            print(f"python -m bench tracker --{flag.replace('_', '-')}: {stem} is measured on a CUDA device")
            return 2
        import importlib

        mod = importlib.import_module(f"bench.{module}")
        r = getattr(mod, fn)(load_frames(args.frames_dir), max(100, args.per_frame))
        if stem == "frontend_per_frame":
            mod.attach_previous(r, PREVIOUS_PER_FRAME)
        write_results(out, stem, r, mod.markdown(r))
        return 0
    frames = load_frames(args.frames_dir)
    counts = [int(c) for c in str(args.features).split(",") if c]
    res = {"device_name": device_name() if device == "cuda" else platform.processor() or "cpu",
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{args.frames_dir} ({len(frames)} frames {frames[0].shape[1]}x{frames[0].shape[0]})",
           "host": f"{platform.node()} {platform.python_version()}", "targets": TARGETS}
    t0 = time.time()
    pts = _features(frames[0], max(counts))
    counts = [c for c in counts if c <= len(pts)]
    res["tracker"] = {"opencv": bench_opencv(frames, pts, counts, args.repeats), "gpu": {}}
    log.info("OpenCV LK done (%.1f s)", time.time() - t0)
    if device == "cuda":
        from vilib_ros.frontend.config import MODES

        for n in counts:
            res["tracker"]["gpu"][n] = {}
        for mode in MODES:
            r = bench_gpu_tracker(frames, pts, counts, args.repeats, mode)
            for n in counts:
                res["tracker"]["gpu"][n][mode] = r[n]
        log.info("GPU tracker sweep done (%.1f s)", time.time() - t0)
        res["launch_overhead"] = _host_overhead(frames, device)
        res["iteration_cap"] = {str(k): v for k, v in bench_iteration_cap(frames, pts).items()}
    try:
        res["imu"] = bench_imu(device, args.imu_frames)
        log.info("IMU prediction run done (%.1f s)", time.time() - t0)
    except ImportError as exc:
        log.warning("synthetic sequences unavailable: %s", exc)
    res["frontend"] = []
    variants = [(False, False), (False, True), (True, False), (True, True)] if device == "cuda" else [(False, False)]
    for pipelined, graph in variants:
        n = args.frames if device == "cuda" else min(args.frames, 100)
        r = bench_frontend(frames, n, device, pipelined, graph)
        res["frontend"].append(r)
        log.info("frontend pipelined=%s graph=%s: %.0f fps p99 %.3f ms (%.1f s)", pipelined, graph, r["fps"],
                 r["latency_ms_p99"], time.time() - t0)
    if device == "cuda":
        res["host_profile"] = profile_frontend(frames, 2000, device)
        if args.per_frame > 0:
            from bench.frontend import attach_previous, bench_per_frame, markdown

            pf = attach_previous(bench_per_frame(frames, args.per_frame), PREVIOUS_PER_FRAME)
            res["per_frame"] = pf
            write_results(out, "frontend_per_frame", pf, markdown(pf), echo=False)
            log.info("per-frame table done (%.1f s)", time.time() - t0)
    res["verdicts"] = _verdicts(res)
    res["tracker"]["gpu"] = {str(k): v for k, v in res["tracker"]["gpu"].items()}
    res["tracker"]["opencv"] = {str(k): v for k, v in res["tracker"]["opencv"].items()}
    res_md = dict(res)
    res_md["tracker"] = {"gpu": {int(k): v for k, v in res["tracker"]["gpu"].items()},
                         "opencv": {int(k): v for k, v in res["tracker"]["opencv"].items()}}
    write_results(out, "tracker_bench", res, _md(res_md))
    return 0
