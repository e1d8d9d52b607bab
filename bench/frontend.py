"""The frontend per frame, the path users have: ``FeatureTracker.process()`` from a pageable
NumPy frame (what a ROS image message gives), called synchronously; part of
``python -m bench tracker``.

Measured in one run on the real EuRoC frames (looped):

* ``process()`` latency, mono and stereo (the right frame: the left one shifted by 8 px, a
  0.11 m baseline), median / p90 / p99; every upload variant (``'mapped'``: the pyramid kernel
  reads the frame from page-locked memory; ``'copy'``: a DMA copy from there; ``'pageable'``: a
  DMA copy straight from the frame), measured interleaved in chunks of 100 frames;
* host time per frame: instrumented (``submit`` + ``result`` without the wait for the GPU) and
  by cProfile (all profiled time minus the time in ``synchronize``; profiler overhead included);
* GPU time per frame: CUDA events around the frame's graph, with the graph queued behind a spin
  kernel (execution only) and as seen by ``process()``;
* submit-ahead throughput (frames/s with the next frame submitted before the result is taken);
* detection alone from a pageable frame (``GpuFastDetector.detect``);
* the cost of the always-launched, early-exiting redetection (CRF + NMS-C with the device flag
  at 0) that a conditional graph node could skip.

The reference quoted: the original implementation (uzh-rpg/vilib ``FeatureTrackerGPU::track``:
upload, pyramid, LK, redetection, results on the host; about 100 features, 5 levels) took 125 us
per frame, about 8,000 frames/s serially, measured 2026-11-22 on the same machine kind and frames.
"""
from __future__ import annotations

import cProfile
import datetime as _dt
import itertools
import platform
import pstats
import time
from pathlib import Path

import numpy as np

from vilib_ros.frontend.gpu.pipeline import STEPS, FrameTracer

REFERENCE = {"process_us": 125.0, "frames_per_s": 8000.0, "measured": "2026-11-22",
             "what": "uzh-rpg/vilib FeatureTrackerGPU::track (upload, pyramid, LK, redetection, results on the "
                     "host; ~100 features, 5 levels), same machine kind, same frames"}
TARGETS = {"process_p50_us": 80.0, "process_p99_us": 150.0, "stereo_process_p50_us": 120.0,
           "submit_ahead_fps": 20000.0, "host_python_us_per_frame": 30.0, "detect_pageable_us": 60.0}
STAMP0 = 1_000_000_000_000
DT_NS = 50_000_000
SPIN_CYCLES = 400_000
_TICKS = itertools.count()


def _stamp() -> int:
    """Frame stamps, increasing over the whole run (trackers are reused between measurements:
    a stamp that went back would make every frame a counted skip)."""
    return STAMP0 + next(_TICKS) * DT_NS


def _pct(v, q):
    return float(np.percentile(np.asarray(v, float), q)) * 1e6


def _stats(v) -> dict:
    return {"p50_us": _pct(v, 50), "p90_us": _pct(v, 90), "p99_us": _pct(v, 99), "n": len(v)}


class HostTracer(FrameTracer):
    """The pipeline's host steps (``marks``: perf_counter_ns after each; with ``steps`` only) and
    the streamed upload's host copy of the last frame (``copy_ns``; 0 when it did not stream)."""

    def __init__(self, steps: bool = True):
        self.steps = steps
        self.marks: list[int] = []
        self.copy_ns = 0

    def mark(self) -> None:
        if self.steps:
            self.marks.append(time.perf_counter_ns())

    def copied(self, ns: int) -> None:
        self.copy_ns = ns


class StageTracer(FrameTracer):
    """Every stage of the frame enqueued on its own, ``on_stage(name)`` after each."""

    stages = True

    def __init__(self, on_stage):
        self.stage = on_stage


def stereo_rig(frames, disparity_px: int = 8):
    """(camera_right, T_right_left, right frames): cam0 intrinsics, 0.11 m baseline along x, the
    right frame = the left one shifted by ``disparity_px`` (a scene about 6 m away)."""
    from vilib_ros.camera import euroc_cam0

    T = np.eye(4)
    T[0, 3] = -0.11
    right = []
    for f in frames:
        r = np.empty_like(f)
        r[:, :-disparity_px] = f[:, disparity_px:]
        r[:, -disparity_px:] = f[:, -disparity_px:]
        right.append(r)
    return euroc_cam0(), T, right


def _tracker(device, stereo=False, frames=None):
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    if not stereo:
        return FeatureTracker(euroc_cam0(), FrontendConfig(), device=device), None
    cam_r, T, right = stereo_rig(frames)
    return FeatureTracker(euroc_cam0(), FrontendConfig(), device=device, camera_right=cam_r, T_right_left=T), right


#: the work the original's FeatureTrackerGPU::track does per frame (REFERENCE): a reference template
#: per track, translation with gain and offset, no forward-backward check, no RANSAC, ~100 features
ORIGINAL_WORK = {"tracker": {"warp": "translation"}, "fb_check": False, "ransac": False, "max_features": 100}


def original_work_tracker(device="cuda"):
    """A FeatureTracker configured to do the original implementation's work (:data:`ORIGINAL_WORK`):
    the like-for-like comparison with its 125 us, beside our default's extra checks."""
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.frontend.config import TrackerConfig

    w = ORIGINAL_WORK
    cfg = FrontendConfig(tracker=TrackerConfig(**w["tracker"]), fb_check=w["fb_check"], ransac=w["ransac"],
                         max_features=w["max_features"])
    return FeatureTracker(euroc_cam0(), cfg.validate(), device=device)


def process_times(ft, frames, n, right=None, warm=0, fresh=False) -> tuple[list, list]:
    """Latencies of ``n`` synchronous process() calls from pageable frames, and track counts.

    ``fresh``: each frame is first copied into a new array (not timed), as a ROS image message is
    written by its deserialisation just before the callback hands a view of it to process();
    otherwise the frames are read where they lie (95 frames looped, 34 MB: beyond the host's
    caches, a colder source than a message just received)."""
    nf = len(frames)
    lat, ntr = [], []
    for k in range(n + warm):
        kw = {"image_right": right[k % nf]} if right is not None else {}
        img = frames[k % nf]
        if fresh:
            img = img.copy()
            if right is not None:
                kw["image_right"] = kw["image_right"].copy()
        t0 = time.perf_counter()
        fr = ft.process(img, _stamp(), **kw)
        t1 = time.perf_counter()
        if k >= warm:
            lat.append(t1 - t0)
            ntr.append(len(fr))
    return lat, ntr


def run_process(ft, frames, n, right=None, warm=50) -> dict:
    lat, ntr = process_times(ft, frames, n, right, warm)
    return {**_stats(lat), "tracks_per_frame": float(np.mean(ntr))}


def interleaved(runs: dict, rounds: int) -> dict:
    """Call every measurement in turn, round after round, and pool what each returns: the host's
    speed drifts on a shared machine (its frame copy took 18 to 53 us in runs of one day), so
    variants are compared in the same minutes."""
    out = {k: [] for k in runs}
    for _ in range(rounds):
        for k, fn in runs.items():
            out[k].extend(fn())
    return out


def run_host_split(ft, frames, n, warm=50) -> dict:
    """Host time per frame: submit() + result() without the wait for the GPU (the stream is
    synchronised between them, so result() finds the frame done); ``without_copy``: the same less
    the streamed upload's host copy of the frame (a memcpy timed inside submit(); 0 when the
    upload does not stream, whose copy then stays in ``host``)."""
    nf = len(frames)
    host, sub, bare = [], [], []
    tr = ft.pipeline.tracer = HostTracer(steps=False)
    try:
        for k in range(n + warm):
            tr.copy_ns = 0
            t0 = time.perf_counter()
            ft.submit(frames[k % nf], _stamp())
            t1 = time.perf_counter()
            ft.pipeline.stream.synchronize()
            t2 = time.perf_counter()
            ft.result()
            t3 = time.perf_counter()
            if k >= warm:
                host.append((t1 - t0) + (t3 - t2))
                sub.append(t1 - t0)
                bare.append(host[-1] - tr.copy_ns * 1e-9)
    finally:
        ft.pipeline.tracer = None
    return {"host": _stats(host), "submit": _stats(sub), "without_copy": _stats(bare)}


def run_gpu_exec(ft, frames, n, warm=20) -> dict:
    """GPU execution time of the frame's graph: the graph is queued behind a spin kernel, so the
    events around it time the GPU, not the host's launch."""
    from bench.kernels import bench_util

    spin = bench_util().get_function("gpu_spin")
    nf = len(frames)
    gpu, seen = [], []
    for k in range(n + warm):
        spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=ft.pipeline.stream)   # process(): the frame starts there
        fr = ft.process(frames[k % nf], _stamp())
        if k >= warm:
            gpu.append(fr.timings["gpu_s"])
    for k in range(200):
        fr = ft.process(frames[k % nf], _stamp())
        seen.append(fr.timings["gpu_s"])
    return {"exec": _stats(gpu), "as_seen_by_process": _stats(seen)}


def run_submit_ahead(ft, frames, n, warm=50) -> dict:
    """Frames/s with the next frame submitted before the result of the last one is taken."""
    nf = len(frames)
    ft.submit(frames[0], _stamp())
    t_start = None
    for k in range(1, n + warm + 1):
        if k == warm:
            t_start = time.perf_counter()
        if k < n + warm:
            ft.submit(frames[k % nf], _stamp())
        ft.result()
    wall = time.perf_counter() - t_start
    return {"frames": n, "fps": n / wall}


#: host_steps: the streamed upload's host copy, timed inside the "launch" step (0 when not streamed)
STREAMED_COPY = "of launch: streamed copy"


def host_steps(ft, frames, n, warm=50, fresh=False) -> dict:
    """Where the host time of a synchronous process() goes, step by step (perf_counter_ns marks
    of a :class:`HostTracer`; names in ``gpu.pipeline.STEPS``): the interface's checks, the frame
    source (the host copy), events + graph launch (streamed: and the host copy after it, also
    given alone as :data:`STREAMED_COPY`), submit's return to the wait, the wait for the GPU, the
    TrackFrame, the return. ``fresh``: as in :func:`process_times`."""
    p = ft.pipeline
    nf = len(frames)
    out = {k: [] for k in STEPS}
    out[STREAMED_COPY] = []
    tr = p.tracer = HostTracer()
    marks = tr.marks
    try:
        for k in range(n + warm):
            img = frames[k % nf].copy() if fresh else frames[k % nf]
            marks.clear()
            tr.copy_ns = 0
            t0 = time.perf_counter_ns()
            ft.process(img, _stamp())
            t1 = time.perf_counter_ns()
            if k >= warm and len(marks) == len(STEPS) - 1:
                ts = [t0, *marks, t1]
                for name, a, b in zip(STEPS, ts, ts[1:]):
                    out[name].append((b - a) * 1e-9)
                out[STREAMED_COPY].append(tr.copy_ns * 1e-9)
    finally:
        p.tracer = None
    return {k: _stats(v) for k, v in out.items()}


def run_profile(ft, frames, n) -> dict:
    """cProfile of process(): host time per frame = profiled time minus the waits (synchronize)."""
    nf = len(frames)
    for k in range(20):
        ft.process(frames[k % nf], _stamp())
    pr = cProfile.Profile()
    pr.enable()
    for k in range(20, 20 + n):
        ft.process(frames[k % nf], _stamp())
    pr.disable()
    st = pstats.Stats(pr)
    total = wait = 0.0
    rows = []
    for (fn, line, name), (cc, nc, tt, ct, _) in st.stats.items():
        total += tt
        if "synchronize" in name:
            wait += tt
        rows.append({"function": f"{Path(fn).name}:{line}:{name}", "calls_per_frame": nc / n,
                     "self_us_per_frame": 1e6 * tt / n, "cum_us_per_frame": 1e6 * ct / n})
    rows.sort(key=lambda r: -r["self_us_per_frame"])
    return {"host_us_per_frame": 1e6 * (total - wait) / n, "wait_us_per_frame": 1e6 * wait / n, "top": rows[:20]}


def gated_detection_cost(ft, repeats=500, block_rows=8) -> dict:
    """GPU time of the redetection kernels when the device flag says 'not needed' (they are
    launched every frame and return at once), as a 2-node graph queued behind a spin kernel;
    and of the same graph with the flag set (a detection frame)."""
    import cupy as cp

    p = ft.pipeline
    det = p.detector
    s = p.stream
    gate = cp.zeros(1, cp.int64)
    occ = cp.zeros(det.n_cells, cp.uint8)
    s.synchronize()
    s.begin_capture()
    det.enqueue(det.levels_desc(p.k.pyrs[0]), s, False, occupancy=occ, gate=gate, block_rows=block_rows)
    g = s.end_capture()
    out = {}
    for flag in (0, 1):
        gate.fill(flag)
        cp.cuda.Device().synchronize()
        out["flag_off" if flag == 0 else "flag_on"] = _stats(graph_times(g, s, repeats, warm=10))
    return out


def graph_times(g, stream, repeats, warm=10, spin_cycles=SPIN_CYCLES) -> list:
    """GPU execution times (s) of ``repeats`` launches of the CUDA graph ``g`` on ``stream``, each
    queued behind a spin kernel, so that the events around it time the GPU, not the host."""
    import cupy as cp

    from bench.kernels import bench_util

    spin = bench_util().get_function("gpu_spin")
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    ts = []
    for r in range(repeats + warm):
        spin((1, 1, 1), (1, 1, 1), (np.int64(spin_cycles),), stream=stream)
        e0.record(stream)
        g.launch(stream)
        e1.record(stream)
        e1.synchronize()
        if r >= warm:
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
    return ts


def stage_breakdown(ft, frames, n, right=None, warm=10) -> dict:
    """GPU time of every stage of the frame (kernels launched one by one with an event after
    each, all queued behind a spin kernel: execution time, no launch gaps)."""
    import collections

    import cupy as cp

    from bench.kernels import bench_util

    p = ft.pipeline
    spin = bench_util().get_function("gpu_spin")
    evs, order = {}, []

    def probe(name):
        if name not in evs:
            evs[name] = cp.cuda.Event()
        evs[name].record(p.stream)
        order.append(name)

    e0 = cp.cuda.Event()
    times = collections.defaultdict(list)
    nf = len(frames)
    p.tracer = StageTracer(probe)
    try:
        for k in range(n + warm):
            order.clear()
            spin((1, 1, 1), (1, 1, 1), (np.int64(SPIN_CYCLES),), stream=p.stream)
            e0.record(p.stream)
            kw = {"image_right": right[k % nf]} if right is not None else {}
            ft.process(frames[k % nf], _stamp(), **kw)
            prev = e0
            for name in order:
                if k >= warm:
                    times[name].append(cp.cuda.get_elapsed_time(prev, evs[name]) * 1e-3)
                prev = evs[name]
    finally:
        p.tracer = None
    return {name: _stats(v) for name, v in times.items()}


def host_copy(frames, n=500) -> dict:
    """The one host copy per frame (pageable frame -> page-locked slot): frames cycled (cold in
    the caches, as in the benchmark), one frame again and again (hot), a frame written just
    before (a ROS message just deserialised: ``fresh``); into a cached and a write-combined
    slot (``_wc``: what the pipeline stages into)."""
    import ctypes

    from vilib_ros._cuda import pinned_buffer

    keep = []
    dst = pinned_buffer(frames[0].size, keep).reshape(frames[0].shape)
    wc = pinned_buffer(frames[0].size, keep, write_combined=True).reshape(frames[0].shape)
    ring = [pinned_buffer(frames[0].size, keep).reshape(frames[0].shape) for _ in range(4)]
    msg = np.empty_like(frames[0])
    out = {}
    for name, d in (("copyto_fresh", dst), ("copyto_fresh_wc", wc), ("copyto_cold_wc", wc)):
        ts = []
        for k in range(n):
            src = frames[k % len(frames)]
            if "fresh" in name:
                np.copyto(msg, src)
                src = msg
            t0 = time.perf_counter()
            np.copyto(d, src)
            ts.append(time.perf_counter() - t0)
        out[name] = _stats(ts)
    ts = []
    for k in range(n):                  # into 4 page-locked slots in turn (the staging ring with frames in flight)
        src = frames[k % len(frames)]
        t0 = time.perf_counter()
        np.copyto(ring[k % 4], src)
        ts.append(time.perf_counter() - t0)
    out["copyto_cold_ring4"] = _stats(ts)
    for name, pick in (("copyto_cold", lambda k: frames[k % len(frames)]), ("copyto_hot", lambda k: frames[0])):
        ts = []
        for k in range(n):
            src = pick(k)
            t0 = time.perf_counter()
            np.copyto(dst, src)
            ts.append(time.perf_counter() - t0)
        out[name] = _stats(ts)
    ts = []
    for k in range(n):
        src = frames[k % len(frames)]
        t0 = time.perf_counter()
        ctypes.memmove(dst.ctypes.data, src.ctypes.data, src.size)
        ts.append(time.perf_counter() - t0)
    out["memmove_cold"] = _stats(ts)
    return out


def detect_times(det, frames, n, fresh=False) -> list:
    """``fresh``: as in :func:`process_times`."""
    ts = []
    for k in range(n):
        img = frames[k % len(frames)].copy() if fresh else frames[k % len(frames)]
        t0 = time.perf_counter()
        det.detect(img)
        ts.append(time.perf_counter() - t0)
    return ts


def bench_per_frame(frames, n: int = 2000) -> dict:
    from vilib_ros._cuda import device_name

    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {frames[0].shape[1]}x{frames[0].shape[0]}, looped",
           "host": f"{platform.node()} {platform.processor() or platform.machine()} python {platform.python_version()}",
           "reference": REFERENCE, "targets": TARGETS, "frames": n}
    from vilib_ros.frontend.config import DetectorConfig
    from vilib_ros.frontend.gpu.detector import GpuFastDetector
    from vilib_ros.frontend.gpu.streamed_upload import UPLOADS

    # the upload variants, interleaved: process() latency, submit-ahead frames/s, detection alone
    fts = {}
    for up in UPLOADS:
        ft, _ = _tracker("cuda")
        assert ft.device == "cuda", "the per-frame table needs the GPU path"
        ft.pipeline.upload = up
        process_times(ft, frames, 50)
        fts[up] = ft
    default = _tracker("cuda")[0].pipeline.upload
    res["upload_default"] = default
    chunk = 100
    rounds = max(1, n // chunk)
    runs = {up: (lambda ft=ft: process_times(ft, frames, chunk)[0]) for up, ft in fts.items()}
    runs["fresh"] = lambda: process_times(fts[default], frames, chunk, fresh=True)[0]
    orig = original_work_tracker()
    process_times(orig, frames, 50)
    runs["original_work"] = lambda: process_times(orig, frames, chunk)[0]
    runs["original_work_fresh"] = lambda: process_times(orig, frames, chunk, fresh=True)[0]
    lat = interleaved(runs, rounds)
    for up in UPLOADS:
        res["mono" if up == default else f"mono_{up}_upload"] = _stats(lat[up])
    res["mono_fresh_input"] = _stats(lat["fresh"])
    res["mono"]["tracks_per_frame"] = float(np.mean(process_times(fts[default], frames, 100)[1]))
    res["original_work_config"] = ORIGINAL_WORK
    res["mono_original_work"] = {**_stats(lat["original_work"]),
                                 "tracks_per_frame": float(np.mean(process_times(orig, frames, 100)[1]))}
    res["mono_original_work_fresh"] = _stats(lat["original_work_fresh"])
    res["stages_mono_original_work"] = stage_breakdown(orig, frames, min(n, 500))
    fps = interleaved({up: (lambda ft=ft: [run_submit_ahead(ft, frames, 5 * chunk, warm=20)["fps"]])
                       for up, ft in fts.items()}, rounds)
    for up in UPLOADS:
        res["submit_ahead" if up == default else f"submit_ahead_{up}_upload"] = {
            "frames": 5 * chunk * rounds, "fps": float(np.median(fps[up])), "fps_per_chunk": fps[up]}
    dets = {up: GpuFastDetector(frames[0].shape[1], frames[0].shape[0], DetectorConfig(), upload=up) for up in UPLOADS}
    for d in dets.values():
        detect_times(d, frames, 20)
    runs = {up: (lambda d=d: detect_times(d, frames, chunk)) for up, d in dets.items()}
    runs["fresh"] = lambda: detect_times(dets[default], frames, chunk, fresh=True)
    dt = interleaved(runs, rounds)
    res["detect_pageable"] = {up: _stats(dt[up]) for up in UPLOADS}
    res["detect_fresh_input"] = _stats(dt["fresh"])
    res["host_steps"] = {up: host_steps(ft, frames, min(n, 1000)) for up, ft in fts.items()}
    res["host_steps"][f"{default}, fresh frame"] = host_steps(fts[default], frames, min(n, 1000), fresh=True)
    ft = fts[default]
    res["host_split"] = run_host_split(ft, frames, n)
    res["gpu"] = run_gpu_exec(ft, frames, min(n, 1000))
    res["profile"] = run_profile(ft, frames, min(n, 1000))
    res["gated_detection"] = gated_detection_cost(ft)
    res["gated_detection_full_grid"] = gated_detection_cost(ft, block_rows=0)
    res["host_copy"] = host_copy(frames)
    for up, ft in fts.items():
        res["stages_mono" if up == default else f"stages_mono_{up}_upload"] = stage_breakdown(ft, frames, min(n, 500))
    # stereo, every upload variant interleaved
    sts = {}
    for up in UPLOADS:
        sts[up], right = _tracker("cuda", stereo=True, frames=frames)
        sts[up].pipeline.upload = up
        process_times(sts[up], frames, 50, right=right)
    runs = {up: (lambda ft=ft: process_times(ft, frames, chunk, right=right)[0]) for up, ft in sts.items()}
    runs["fresh"] = lambda: process_times(sts[default], frames, chunk, right=right, fresh=True)[0]
    lat = interleaved(runs, rounds)
    for up in UPLOADS:
        res["stereo" if up == default else f"stereo_{up}_upload"] = _stats(lat[up])
    res["stereo_fresh_input"] = _stats(lat["fresh"])
    ft = sts[default]
    res["stereo"]["tracks_per_frame"] = float(np.mean(process_times(ft, frames, 100, right=right)[1]))
    res["stages_stereo"] = stage_breakdown(ft, frames, min(n, 500), right=right)
    ft, _ = _tracker("cuda")
    pinned = ft.pinned_frames(len(frames))
    for p_, f in zip(pinned, frames):
        p_[...] = f
    res["mono_pinned_input"] = run_process(ft, pinned, n)
    # the frame already in device memory (a CuPy array: no host copy, no PCIe): what is left is the
    # compute and the result's way back; allocated once, before the timing
    import cupy as cp

    dev = [cp.asarray(f) for f in frames]
    cp.cuda.Device().synchronize()
    res["mono_device_input"] = run_process(ft, dev, n)
    res["mono_original_work_device_input"] = run_process(orig, dev, n)
    del dev
    res.update({
        "process_p50_us": res["mono"]["p50_us"], "process_p90_us": res["mono"]["p90_us"],
        "process_p99_us": res["mono"]["p99_us"], "stereo_process_p50_us": res["stereo"]["p50_us"],
        "stereo_process_p99_us": res["stereo"]["p99_us"], "submit_ahead_fps": res["submit_ahead"]["fps"],
        "process_fresh_p50_us": res["mono_fresh_input"]["p50_us"],
        "process_fresh_p99_us": res["mono_fresh_input"]["p99_us"],
        "stereo_process_fresh_p50_us": res["stereo_fresh_input"]["p50_us"],
        "host_python_us_per_frame": res["host_split"]["host"]["p50_us"],
        "host_python_us_per_frame_without_copy": res["host_split"]["without_copy"]["p50_us"],
        "host_python_us_per_frame_cprofile": res["profile"]["host_us_per_frame"],
        "gpu_us_per_frame": res["gpu"]["exec"]["p50_us"],
        "detect_pageable_p50_us": res["detect_pageable"][default]["p50_us"],
        "detect_fresh_p50_us": res["detect_fresh_input"]["p50_us"],
        "original_work_process_p50_us": res["mono_original_work"]["p50_us"],
        "original_work_process_fresh_p50_us": res["mono_original_work_fresh"]["p50_us"],
        "process_device_input_p50_us": res["mono_device_input"]["p50_us"],
        "original_work_process_device_input_p50_us": res["mono_original_work_device_input"]["p50_us"],
        "tracks_per_frame": res["mono"]["tracks_per_frame"]})
    res["verdicts"] = verdicts(res)
    return res


#: the figures compared with the previous run's frontend_per_frame.json (name, key path, unit)
COMPARED = (("mono process() p50", ("process_p50_us",), "us"), ("mono process() p99", ("process_p99_us",), "us"),
            ("mono process() p50, fresh frame", ("process_fresh_p50_us",), "us"),
            ("stereo process() p50", ("stereo_process_p50_us",), "us"),
            ("submit-ahead", ("submit_ahead_fps",), "frames/s"),
            ("host time per frame (submit + result)", ("host_python_us_per_frame",), "us"),
            ("  of which submit()", ("host_split", "submit", "p50_us"), "us"),
            ("GPU time per frame", ("gpu_us_per_frame",), "us"),
            ("detection alone, pageable frame", ("detect_pageable_p50_us",), "us"))


def _dig(d, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def attach_previous(res: dict, path) -> dict:
    """Keep, in ``res["previous"]``, the figures of the previous run (the committed
    ``frontend_per_frame.json`` at ``path``, if there is one) that :func:`markdown` sets beside this
    run's: the change, with the device and date of both."""
    import json

    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return res
    keep = {"device": old.get("device"), "date": old.get("date"), "stages_mono": old.get("stages_mono")}
    for _, key, _ in COMPARED:
        keep[".".join(key)] = _dig(old, key)
    res["previous"] = keep
    return res


def _previous_lines(res) -> list[str]:
    prev = res.get("previous")
    if not prev:
        return []
    L = ["", f"Against the previous run ({prev.get('device')}, {prev.get('date')}; this run {res['device']}, "
         f"{res['date']}):", "", "| measurement (p50) | previous | now | change |", "|---|---:|---:|---:|"]
    for name, key, unit in COMPARED:
        a, b = prev.get(".".join(key)), _dig(res, key)
        if a is None or b is None:
            continue
        L.append(f"| {name} | {a:.1f} {unit} | {b:.1f} {unit} | {b / a:.2f}x |")
    old, new = prev.get("stages_mono") or {}, res.get("stages_mono") or {}
    if old and new:
        L += ["", "| GPU stage, mono (median us) | previous | now |", "|---|---:|---:|"]
        for k in list(new) + [k for k in old if k not in new]:
            a = f"{old[k]['p50_us']:.1f}" if k in old else "-"
            b = f"{new[k]['p50_us']:.1f}" if k in new else "-"
            L.append(f"| {k} | {a} | {b} |")
    return L


def verdicts(res) -> list[str]:
    t, v = TARGETS, []

    def line(name, value, target, le=True, unit="us"):
        ok = value <= target if le else value >= target
        v.append(f"{name}: {value:.1f} {unit} (target {'<=' if le else '>='} {target:.0f}): {'met' if ok else 'MISSED'}")

    line("mono process() p50", res["process_p50_us"], t["process_p50_us"])
    line("mono process() p99", res["process_p99_us"], t["process_p99_us"])
    if "process_fresh_p50_us" in res:   # the frame written just before, as a ROS message is (absent in older results)
        line("mono process() p50, frame written just before (a fresh message)", res["process_fresh_p50_us"],
             t["process_p50_us"])
        line("mono process() p99, frame written just before", res["process_fresh_p99_us"], t["process_p99_us"])
    line("stereo process() p50", res["stereo_process_p50_us"], t["stereo_process_p50_us"])
    if "stereo_process_fresh_p50_us" in res:
        line("stereo process() p50, frames written just before", res["stereo_process_fresh_p50_us"],
             t["stereo_process_p50_us"])
    line("submit-ahead", res["submit_ahead_fps"], t["submit_ahead_fps"], le=False, unit="frames/s")
    line("host Python per frame (instrumented p50)", res["host_python_us_per_frame"], t["host_python_us_per_frame"])
    if "host_python_us_per_frame_without_copy" in res:   # absent in older results
        line("host per frame less the streamed upload's memcpy of the frame (instrumented p50)",
             res["host_python_us_per_frame_without_copy"], t["host_python_us_per_frame"])
    line(f"detection end to end from a pageable frame (upload='{res.get('upload_default')}')",
         res["detect_pageable_p50_us"], t["detect_pageable_us"])
    if "detect_fresh_p50_us" in res:
        line("detection end to end, frame written just before", res["detect_fresh_p50_us"], t["detect_pageable_us"])
    ref = REFERENCE["process_us"]
    v.append(f"against the original implementation ({ref:.0f} us per frame, measured {REFERENCE['measured']}): "
             f"{ref / res['process_p50_us']:.2f}x (mono p50), submit-ahead {res['submit_ahead_fps'] / REFERENCE['frames_per_s']:.2f}x "
             f"its ~{REFERENCE['frames_per_s']:.0f} frames/s")
    if "original_work_process_p50_us" in res:
        v.append(f"doing the original's work (translation, no FB check, no RANSAC, 100 features), same minutes: "
                 f"{res['original_work_process_p50_us']:.1f} us p50 ({ref / res['original_work_process_p50_us']:.2f}x "
                 f"its {ref:.0f} us), {res['original_work_process_fresh_p50_us']:.1f} us from a frame written just "
                 f"before ({ref / res['original_work_process_fresh_p50_us']:.2f}x)")
    if "process_device_input_p50_us" in res:
        line("mono process() p50 from a frame already on the device (no host copy, no PCIe: the compute's floor)",
             res["process_device_input_p50_us"], t["process_p50_us"])
    return v


def markdown(res) -> str:
    L = ["## Frontend per frame: process() from a pageable NumPy frame (the path users have)", "",
         f"- device: {res['device']}; date: {res['date']}; data: {res['data']}; host: {res['host']}",
         f"- reference (quoted, not run here): {REFERENCE['what']}: **{REFERENCE['process_us']:.0f} us** per frame, "
         f"~{REFERENCE['frames_per_s']:.0f} frames/s serially, measured {REFERENCE['measured']}", "",
         "| measurement | p50 us | p90 us | p99 us |", "|---|---:|---:|---:|"]
    d = res.get("upload_default", "pageable")
    from vilib_ros.frontend.gpu.streamed_upload import UPLOADS

    ups = [u for u in UPLOADS if u != d]
    for name, key in ((f"mono process(), upload='{d}' (default)", "mono"),
                      *((f"mono process(), upload='{u}'", f"mono_{u}_upload") for u in ups),
                      (f"mono process(), upload='{d}', each frame written just before (a fresh message)",
                       "mono_fresh_input"),
                      ("mono process(), the original's work (translation, no FB check, no RANSAC, 100 features)",
                       "mono_original_work"),
                      ("mono process(), the original's work, frame written just before", "mono_original_work_fresh"),
                      (f"stereo process(), upload='{d}' (default)", "stereo"),
                      (f"stereo process(), upload='{d}', frames written just before", "stereo_fresh_input"),
                      *((f"stereo process(), upload='{u}'", f"stereo_{u}_upload") for u in ups),
                      ("host time per frame (submit + result, no wait)", ("host_split", "host")),
                      ("  of which submit()", ("host_split", "submit")),
                      ("  less the streamed upload's memcpy of the frame", ("host_split", "without_copy")),
                      ("GPU time per frame (graph queued behind a spin kernel)", ("gpu", "exec")),
                      ("GPU time per frame as process() sees it", ("gpu", "as_seen_by_process")),
                      *((f"detection alone, pageable frame, upload='{u}'", ("detect_pageable", u))
                        for u in UPLOADS),
                      (f"detection alone, upload='{d}', frame written just before", "detect_fresh_input"),
                      ("redetection kernels, flag off (every frame)", ("gated_detection", "flag_off")),
                      ("redetection kernels, flag on (detection frames)", ("gated_detection", "flag_on"))):
        r = res.get(key) if isinstance(key, str) else res.get(key[0], {}).get(key[1])
        if r is None:
            continue
        L.append(f"| {name} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} |")
    for key in ("stages_mono", *(f"stages_mono_{u}_upload" for u in UPLOADS), "stages_mono_original_work",
                "stages_stereo"):
        if res.get(key):
            L += ["", f"GPU time per stage, {key[7:].replace('_', ' ')} (events between the stages, queued behind a spin "
                  "kernel; median / p90 us): " + ", ".join(f"{k} {v['p50_us']:.1f} / {v['p90_us']:.1f}"
                                                         for k, v in res[key].items())]
    if res.get("host_steps"):
        names = list(next(iter(res["host_steps"].values())))
        L += ["", "Host steps of a synchronous process(), median us (GpuPipeline.tracer marks; 'wait' is the GPU):", "",
              "| upload | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        for up, st in res["host_steps"].items():
            L.append(f"| {up} | " + " | ".join(f"{st[k]['p50_us']:.1f}" for k in names) + " |")
    if res.get("host_copy"):
        L += ["", "Host copy of the frame into the page-locked slot (median / p90 us): " +
              ", ".join(f"{k} {v['p50_us']:.1f} / {v['p90_us']:.1f}" for k, v in res["host_copy"].items())]
    if res.get("mono_pinned_input"):
        r = res["mono_pinned_input"]
        L += ["", f"mono process() from page-locked frames (FeatureTracker.pinned_frames, no host copy): "
              f"p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us"]
    if res.get("mono_device_input"):   # absent in older results
        r, o = res["mono_device_input"], res["mono_original_work_device_input"]
        L += ["", f"mono process() from CuPy frames already on the device (no host copy, no PCIe): p50 "
              f"{r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us; doing the original's work: p50 {o['p50_us']:.1f} us, "
              f"p99 {o['p99_us']:.1f} us"]
    if res.get("gated_detection_full_grid"):
        r = res["gated_detection_full_grid"]["flag_off"]
        L += ["", f"redetection kernels with the flag off and the CRF's full grid (one block per 32x8 pixels): "
              f"{r['p50_us']:.1f} us"]
    for up in UPLOADS:
        if res.get(f"submit_ahead_{up}_upload"):
            L += ["", f"submit-ahead with upload='{up}': {res[f'submit_ahead_{up}_upload']['fps']:.0f} frames/s"]
    L += ["", f"- submit-ahead: **{res['submit_ahead_fps']:.0f} frames/s** ({res['submit_ahead']['frames']} frames)",
          f"- host Python per frame by cProfile (profiled time minus waits, profiler overhead included): "
          f"{res['host_python_us_per_frame_cprofile']:.1f} us", f"- tracks per frame: {res['tracks_per_frame']:.0f}", "",
          "| function (cProfile, process()) | calls/frame | self us/frame | cumulative us/frame |", "|---|---:|---:|---:|"]
    for r in res["profile"]["top"][:15]:
        L.append(f"| `{r['function']}` | {r['calls_per_frame']:.2f} | {r['self_us_per_frame']:.1f} | {r['cum_us_per_frame']:.1f} |")
    L += _previous_lines(res)
    L += ["", f"Targets (the issue's, set for the H100 machine; this run: {res.get('device', '?')}):", ""] \
        + [f"- {x}" for x in res["verdicts"]]
    return "\n".join(L) + "\n"
