"""``python -m bench cpu``: the CPU frontend (compiled and NumPy) against an OpenCV-native one.

One run on the real EuRoC frames, each variant at 1 thread and at all threads:

* the whole frontend, ``FeatureTracker(device='cpu').process()`` called synchronously on
  pageable frames: our compiled path (numba), our NumPy reference path, and an OpenCV-native
  frontend doing the same job (:class:`OpenCvFrontend`: FAST threshold 10 + the strongest
  corner per 32x32 cell, ``calcOpticalFlowPyrLK`` 21x21 with 3 levels, redetection below 30%
  of the cells in the free cells, ids, undistorted coordinates): per-frame median / p90 and
  tracks per frame;
* per stage (pyramid, FAST, NMS-C, LK) of ours against OpenCV's FAST and LK on the same frames;
* where the compiled frontend's time goes (cProfile, per frame);
* JIT: first-call compile time (empty cache) and cached load time, each in a fresh process.

Writes ``cpu_bench.json`` and ``cpu_bench.md`` to ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.results import load as _load
from bench.results import machine as _machine
from bench.results import write_results
from bench.tracker import _pct, default_frames_dir, load_frames

log = logging.getLogger("bench.cpu")

STAMP0 = 1_000_000_000_000
DT_NS = 50_000_000
TARGET_RATIO = 1.5          # single thread: ours <= 1.5x the OpenCV-native frontend
REPO = Path(__file__).resolve().parents[1]


def configure_parser(p) -> None:
    p.add_argument("--out", default="bench/out", help="output folder for cpu_bench.{json,md}")
    p.add_argument("--frames-dir", default=default_frames_dir(),
                   help="EuRoC ASL folder; default $VILIB_ROS_EUROC or ../shared/data/euroc_v101_head")
    p.add_argument("--repeats", type=int, default=5, help="passes over the frames for compiled / OpenCV variants")
    p.add_argument("--numpy-repeats", type=int, default=1, help="passes for the (slow) NumPy variant; 0 = skip")
    p.add_argument("--no-jit", action="store_true", help="skip the compile / cache-load measurement")


# ------------------------------------------------------------------------------------ OpenCV-native frontend


class OpenCvFrontend:
    """The same job with OpenCV's own pieces: FAST (threshold 10, OpenCV's NMS) and the strongest
    corner per cell, pyramidal LK (21x21, 3 levels), redetection in free cells below 30%."""

    def __init__(self, camera, cell=32, threshold=10, fraction=0.3):
        import cv2

        self.cv2, self.camera, self.cell = cv2, camera, cell
        self.cols, self.rows = -(-camera.width // cell), -(-camera.height // cell)
        self.n_cells = self.rows * self.cols
        self.fraction = fraction
        self.fast = cv2.FastFeatureDetector_create(threshold=threshold, nonmaxSuppression=True)
        self.criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01)
        self.prev = None
        self.pts = np.zeros((0, 2), np.float32)
        self.ids = np.zeros(0, np.int64)
        self.next_id = 0

    def _cells(self, xy):
        c = np.clip((xy[:, 0] // self.cell).astype(np.int64), 0, self.cols - 1)
        r = np.clip((xy[:, 1] // self.cell).astype(np.int64), 0, self.rows - 1)
        return r * self.cols + c

    def process(self, img):
        cv2 = self.cv2
        if self.prev is not None and len(self.pts):
            p1, st, _ = cv2.calcOpticalFlowPyrLK(self.prev, img, self.pts.reshape(-1, 1, 2), None, winSize=(21, 21),
                                                 maxLevel=2, criteria=self.criteria)
            p1 = p1.reshape(-1, 2)
            h, w = img.shape
            ok = (st.ravel() == 1) & (p1[:, 0] >= 0) & (p1[:, 1] >= 0) & (p1[:, 0] < w) & (p1[:, 1] < h)
            self.pts, self.ids = p1[ok], self.ids[ok]
        if len(self.pts) < self.fraction * self.n_cells:
            kps = self.fast.detect(img)
            if kps:
                xy = np.array([k.pt for k in kps], np.float32)
                resp = np.array([k.response for k in kps], np.float32)
                cell = self._cells(xy)
                free = np.ones(self.n_cells, bool)
                free[self._cells(self.pts)] = False
                order = np.argsort(-resp, kind="stable")
                cell_o = cell[order]
                _, first = np.unique(cell_o, return_index=True)      # strongest corner of each cell
                pick = order[first]
                pick = pick[free[cell[pick]]]
                k = len(pick)
                self.pts = np.concatenate([self.pts, xy[pick]])
                self.ids = np.concatenate([self.ids, np.arange(self.next_id, self.next_id + k)])
                self.next_id += k
        self.prev = img
        return self.ids, self.pts, self.camera.undistort(self.pts)


# ------------------------------------------------------------------------------------ whole frontend


def _set_threads(n):
    """OpenCV's thread count, and ours for the detectors / trackers constructed after this."""
    import cv2

    cv2.setNumThreads(n)
    os.environ["VILIB_ROS_CPU_THREADS"] = str(n)


def _all_threads() -> int:
    try:
        import numba

        return int(numba.config.NUMBA_NUM_THREADS)
    except ImportError:
        return os.cpu_count() or 1


def same_job_config():
    """The configuration that does the OpenCV-native frontend's job: frame-to-frame templates, a
    translation warp (with gain / offset), no forward-backward check, no RANSAC."""
    from vilib_ros.frontend import FrontendConfig
    from vilib_ros.frontend.config import TrackerConfig

    return FrontendConfig(tracker=TrackerConfig(template="previous", warp="translation"), fb_check=False, ransac=False)


def bench_frontend(frames, kind, repeats):
    """Per-frame wall time of ``process()`` over ``repeats`` passes (a fresh frontend each pass).
    ``kind``: opencv, numba, numpy (the same job as OpenCV's), numba-default (today's defaults:
    reference templates, affine warp, forward-backward check, RANSAC)."""
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    times, ntr, impl = [], [], kind
    for _ in range(repeats):
        if kind == "opencv":
            fe = OpenCvFrontend(euroc_cam0())
            step = fe.process
        else:
            os.environ["VILIB_ROS_CPU_IMPL"] = kind.split("-")[0]
            cfg = FrontendConfig() if kind.endswith("-default") else same_job_config()
            fe = FeatureTracker(euroc_cam0(), cfg, device="cpu")
            impl = f"{type(fe._pipe.detector).__name__} + {type(fe._pipe.tracker).__name__}"

            def step(img, k, fe=fe):
                return fe.process(img, STAMP0 + k * DT_NS).ids
        for k, img in enumerate(frames):
            t0 = time.perf_counter()
            out = step(img) if kind == "opencv" else step(img, k)
            times.append(time.perf_counter() - t0)
            ntr.append(len(out[0]) if kind == "opencv" else len(out))
    os.environ.pop("VILIB_ROS_CPU_IMPL", None)
    return {"impl": impl, "frames": len(times), "median_ms": 1e3 * _pct(times, 50), "p90_ms": 1e3 * _pct(times, 90),
            "mean_ms": 1e3 * float(np.mean(times)), "tracks_per_frame": float(np.mean(ntr))}


def profile_compiled(frames, top=14):
    """cProfile of one compiled-frontend pass: self / cumulative microseconds per frame."""
    import cProfile
    import pstats

    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker

    os.environ["VILIB_ROS_CPU_IMPL"] = "numba"
    ft = FeatureTracker(euroc_cam0(), same_job_config(), device="cpu")
    os.environ.pop("VILIB_ROS_CPU_IMPL", None)
    pr = cProfile.Profile()
    pr.enable()
    for k, img in enumerate(frames):
        ft.process(img, STAMP0 + k * DT_NS)
    pr.disable()
    n = len(frames)
    rows = [{"function": f"{Path(fn).name}:{line}:{name}", "calls_per_frame": nc / n, "self_us": 1e6 * tt / n,
             "cum_us": 1e6 * ct / n} for (fn, line, name), (cc, nc, tt, ct, _) in pstats.Stats(pr).stats.items()]
    rows.sort(key=lambda r: -r["self_us"])
    return rows[:top]


# ------------------------------------------------------------------------------------ stages


def _time(fn, items, repeats=1):
    ts = []
    for _ in range(repeats):
        for it in items:
            t0 = time.perf_counter()
            fn(it)
            ts.append(time.perf_counter() - t0)
    return {"median_us": 1e6 * _pct(ts, 50), "p90_us": 1e6 * _pct(ts, 90)}


def bench_stages(frames, numpy_frames):
    """Per-stage times of ours (compiled; NumPy on ``numpy_frames`` frames) and OpenCV's."""
    import cv2

    from vilib_ros.frontend.config import DetectorConfig, TrackerConfig
    from vilib_ros.frontend.reference.detector import CpuFastDetector, fast_score_cpu
    from vilib_ros.frontend.reference.lk import track_cpu
    from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu

    cfg, tcfg = DetectorConfig(), TrackerConfig()
    res = {}
    pairs = list(range(len(frames) - 1))
    npairs = pairs[:numpy_frames]
    fast = cv2.FastFeatureDetector_create(threshold=10, nonmaxSuppression=True)
    fast_raw = cv2.FastFeatureDetector_create(threshold=10, nonmaxSuppression=False)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01)
    try:
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector
        from vilib_ros.frontend.compiled.nms import nms_cells
        from vilib_ros.frontend.compiled.pyramid import CpuPyramid
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker
    except ImportError as exc:
        log.warning("compiled stages not measured: %s", exc)
        NumbaFastDetector = None
    det_np = CpuFastDetector(752, 480, cfg)
    pts = det_np.detect(frames[0]).points()      # the frontend's first-frame features (~240)
    pyr5 = [build_pyramid_cpu(f, 5) for f in frames]
    res["features"] = int(len(pts))
    if NumbaFastDetector is not None:
        det = NumbaFastDetector(752, 480, cfg)
        trk = NumbaLKTracker(752, 480, tcfg, max_features=1024)
        pyr = CpuPyramid(752, 480, 5)
        res["ours_pyramid_5_levels"] = _time(pyr.build, frames)
        lv2 = [[lv.copy() for lv in CpuPyramid(752, 480, 2).build(f)] for f in frames]

        def crf(levels):
            det._score(levels)
        res["ours_fast_crf_2_levels"] = _time(crf, lv2)
        rows, cols = det.grid_shape

        def nmsc(levels):
            det._score(levels)
            x, y, s, lv = det._out
            nms_cells(det._maps, 2, 32, 32, rows, cols, 1, det._occ, False, x, y, s, lv)
        res["ours_crf_plus_nms_c"] = _time(nmsc, lv2)
        res["ours_detect_total"] = _time(det.detect, frames)
        res["ours_lk_gain_offset"] = _time(lambda i: trk.track(pyr5[i], pyr5[i + 1], pts), pairs)
        trk_t = NumbaLKTracker(752, 480, TrackerConfig(mode="translation"))
        res["ours_lk_translation"] = _time(lambda i: trk_t.track(pyr5[i], pyr5[i + 1], pts), pairs)
    res["numpy_pyramid_5_levels"] = _time(lambda f: build_pyramid_cpu(f, 5), frames)
    res["numpy_fast_crf_2_levels"] = _time(lambda f: [fast_score_cpu(lv, 10, 10, "sad_arc", 8)
                                                     for lv in build_pyramid_cpu(f, 2)], frames[:numpy_frames])
    res["numpy_detect_total"] = _time(det_np.detect, frames[:numpy_frames])
    res["numpy_lk_gain_offset"] = _time(lambda i: track_cpu(pyr5[i], pyr5[i + 1], pts, None, tcfg), npairs)
    res["opencv_pyramid_3_levels"] = _time(lambda f: cv2.buildOpticalFlowPyramid(f, (21, 21), 2, withDerivatives=False),
                                           frames)
    res["opencv_fast_no_nms"] = _time(fast_raw.detect, frames)
    res["opencv_fast_nms"] = _time(fast.detect, frames)
    res["opencv_lk_21x21_3_levels_images"] = _time(
        lambda i: cv2.calcOpticalFlowPyrLK(frames[i], frames[i + 1], pts.reshape(-1, 1, 2), None, winSize=(21, 21),
                                           maxLevel=2, criteria=crit), pairs)
    return res


# ------------------------------------------------------------------------------------ JIT


_JIT_PROBE = """
import json, time
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
from vilib_ros.frontend.compiled.detector import NumbaFastDetector
from vilib_ros.frontend.compiled.tracker import NumbaLKTracker
NumbaFastDetector(752, 480)
NumbaLKTracker(752, 480)
t2 = time.perf_counter()
print(json.dumps({"import_numba_s": t1 - t0, "compile_or_load_s": t2 - t1}))
"""


def bench_jit():
    """First call with an empty cache (compile), then again with the filled cache (load)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NUMBA_CACHE_DIR=d, PYTHONPATH=str(REPO))
        out = {}
        for key in ("first_call", "cached"):
            r = subprocess.run([sys.executable, "-c", _JIT_PROBE], env=env, capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                return {"error": r.stderr[-500:]}
            out[key] = json.loads(r.stdout.strip().splitlines()[-1])
        return out


# ------------------------------------------------------------------------------------ report


def _machine_line():
    m = _machine()
    return f"{m['cpu']}, {m['cores']} logical CPUs, {m['platform']}"


def _versions():
    import cv2

    v = {"python": platform.python_version(), "numpy": np.__version__, "opencv": cv2.__version__}
    try:
        import numba

        v["numba"] = numba.__version__
        v["numba_threading_layer"] = numba.config.THREADING_LAYER
    except ImportError:
        v["numba"] = "not installed"
    return v


def _md(res) -> str:
    L = ["# CPU frontend benchmark", "", f"- machine: {res['machine']}", f"- date: {res['date']}",
         f"- data: {res['data']}", f"- versions: {res['versions']}",
         f"- load average at start / end: {res['load_start']} / {res['load_end']} (a shared machine is noisy)", "",
         "## Whole frontend, `process()` per frame (synchronous, pageable frames)", "",
         "threads: OpenCV's `setNumThreads` and ours (`VILIB_ROS_CPU_THREADS`, default 1) for the run; "
         "frames: all passes pooled (a fresh frontend per pass).", "",
         "| threads | frontend | implementation | frames | median ms | p90 ms | mean ms | tracks/frame | vs OpenCV-native (median) |",
         "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for th, rows in res["frontend"].items():
        ocv = rows.get("opencv", {}).get("median_ms", float("nan"))
        for name, r in rows.items():
            L.append(f"| {th} | {name} | {r['impl']} | {r['frames']} | {r['median_ms']:.2f} | {r['p90_ms']:.2f} | "
                     f"{r['mean_ms']:.2f} | {r['tracks_per_frame']:.0f} | {r['median_ms'] / ocv:.2f}x |")
    L += ["", "## Stages (per frame, 752x480; LK on the first frame's features between consecutive frames)", "",
          "| threads | stage | median us | p90 us |", "|---:|---|---:|---:|"]
    for th, st in res["stages"].items():
        for name, r in st.items():
            if isinstance(r, dict):
                L.append(f"| {th} | {name} | {r['median_us']:.0f} | {r['p90_us']:.0f} |")
    L += ["", f"LK features: {res['stages'][next(iter(res['stages']))].get('features')}"]
    if res.get("profile"):
        L += ["", "## Where the compiled frontend's time goes (cProfile, 1 thread, per frame; profiling adds overhead)",
              "", "| function | calls/frame | self us | cumulative us |", "|---|---:|---:|---:|"]
        for r in res["profile"]:
            L.append(f"| `{r['function']}` | {r['calls_per_frame']:.1f} | {r['self_us']:.0f} | {r['cum_us']:.0f} |")
    if res.get("jit"):
        L += ["", "## JIT (fresh process each, 752x480 detector + tracker constructed)", "", "```", json.dumps(res["jit"], indent=1), "```"]
    L += ["", "## Verdict", ""] + [f"- {v}" for v in res["verdicts"]]
    return "\n".join(L) + "\n"


def _verdicts(res):
    v = []
    one = res["frontend"].get("1", {})
    if "numba" in one and "opencv" in one:
        r = one["numba"]["median_ms"] / one["opencv"]["median_ms"]
        v.append(f"single thread, compiled frontend / OpenCV-native frontend (median): {r:.2f}x "
                 f"(target <= {TARGET_RATIO}x): {'met' if r <= TARGET_RATIO else 'MISSED'}")
    if "numba-default" in one and "opencv" in one:
        v.append(f"single thread, today's default configuration (reference templates + affine warp + FB + RANSAC, "
                 f"more work than OpenCV's job) / OpenCV-native: "
                 f"{one['numba-default']['median_ms'] / one['opencv']['median_ms']:.2f}x")
    if "numba" in one and "numpy" in one:
        v.append(f"single thread, NumPy / compiled: {one['numpy']['median_ms'] / one['numba']['median_ms']:.1f}x")
    return v


def run_command(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames = load_frames(args.frames_dir)
    res = {"machine": _machine_line(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{args.frames_dir} ({len(frames)} frames {frames[0].shape[1]}x{frames[0].shape[0]})",
           "versions": _versions(), "load_start": _load(), "frontend": {}, "stages": {}}
    t0 = time.time()
    if not args.no_jit:
        res["jit"] = bench_jit()
        log.info("JIT measured (%.0f s): %s", time.time() - t0, res["jit"])
    kinds = ["numba", "opencv", "numba-default"] + (["numpy"] if args.numpy_repeats > 0 else [])
    for th in sorted({1, _all_threads()}):
        _set_threads(th)
        rows = {}
        for kind in kinds:
            rows[kind] = bench_frontend(frames, kind, args.numpy_repeats if kind == "numpy" else args.repeats)
            log.info("%d thread(s) %s: median %.2f ms (%.0f s)", th, kind, rows[kind]["median_ms"], time.time() - t0)
        res["frontend"][str(th)] = rows
        res["stages"][str(th)] = bench_stages(frames, numpy_frames=10 if args.numpy_repeats > 0 else 0)
        log.info("%d thread(s) stages done (%.0f s)", th, time.time() - t0)
    _set_threads(1)
    res["profile"] = profile_compiled(frames)
    res["load_end"] = _load()
    try:
        import numba

        res["versions"]["numba_threading_layer"] = numba.threading_layer()   # the one the parallel loops used
    except (ImportError, ValueError):
        pass
    res["verdicts"] = _verdicts(res)
    write_results(out, "cpu_bench", res, _md(res))
    return 0
