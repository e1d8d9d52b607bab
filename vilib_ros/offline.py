"""``vilib-ros run --offline DATASET [DATASET ...]``: player, frontend and backend without ROS.

The researcher's batch path (many EuRoC sequences, no DDS): per dataset, in one process tree:

* decoders read the images ahead, in time order, a bounded number of frames: processes that write
  into shared memory where the images are files (an ASL folder), so that no decoder competes with
  the frontend for this process's interpreter lock; threads otherwise
  (:mod:`vilib_ros.datasets.decoders`). An unreadable frame is skipped and counted under its reason;
* the frontend (:class:`vilib_ros.frontend.FeatureTracker`, ``--device``) runs in this process;
* the backend (:class:`vilib_ros.backend.VioEstimator`) runs in a child process (``spawn``; one
  OpenBLAS thread, jemalloc where installed: :mod:`vilib_ros.allocator`) fed through a bounded
  queue in batches of frames, and ending as soon as its result is handed over, so frontend and
  backend overlap on two cores and whole-VIO throughput is set by the slower of the two, not
  their sum. The queues block when full: nothing is dropped.

The report says which stage limited the run: each stage's busy seconds against the wall
(:func:`stage_times`).

It opens each dataset with its calibration, writes each run into its own folder and compiles the
CPU kernels first as the ROS path does (:mod:`vilib_ros.run_setup`), and writes the same outputs
(:mod:`vilib_ros.pipeline`'s writer): ``report.md``, ``trajectory_tum.txt`` (the smoothed
trajectory, as ``backend_node`` writes it at shutdown), ``trajectory.png``, the tracks video (unless
``--no-video``), ``timing.json``, and ``recorded.jsonl`` in the recorder's format; in addition
``odometry_tum.txt``, the causal per-frame odometry. With several datasets, one batch folder
(``--out``, or a new ``vilib_ros_output/batch/<date>_<time>``) holds a folder per dataset and
``summary.md`` / ``summary.json`` with one row per sequence: ATE (SE3) of the causal and the
smoothed trajectory, RPE per metre, frames/s, the limiting stage, keyframes, resets, and the batch's aggregate
frames/s (all frames over the batch's wall time). ``--jobs N`` runs N datasets at a time in worker processes (each with its own backend
child): the aggregate is then the batch's throughput, and each row's frames/s that of a sequence
sharing the machine with the others; neither is the speed of one sequence alone. A dataset without IMU says so up front ("no IMU: the backend
cannot estimate; tracks only") and is tracked only.
"""
from __future__ import annotations

import json
import gc
import os
import queue
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from vilib_ros.allocator import with_jemalloc
from vilib_ros.datasets.decoders import KINDS, start_without_sigint

NO_IMU = "no IMU: the backend cannot estimate; tracks only"


def owned(fr):
    """A TrackFrame that owns its arrays: on the GPU path the frontend hands out views of reused
    result slots, and a frame kept (or queued: a multiprocessing queue pickles it later, in its
    feeder thread) must not see later frames' data."""
    import dataclasses

    if hasattr(fr, "copy"):
        return fr.copy()
    return dataclasses.replace(fr, **{f.name: getattr(fr, f.name).copy() for f in dataclasses.fields(fr)
                                      if isinstance(getattr(fr, f.name), np.ndarray)})


# ---------------------------------------------------------------------------------------------
# the backend process
# ---------------------------------------------------------------------------------------------
#: the parts of a keyframe's time the backend reports (``VioEstimator.kf_timings``): the iSAM2 update,
#: the gtsam calls (update + estimate and reads), the visual factors (gating, triangulation, factor
#: construction: Python), the bookkeeping after the update (Python)
KF_PARTS = ("update_s", "smoother_s", "visual_s", "bookkeeping_s")

class BackendFrame:
    """What the backend reads of a :class:`~vilib_ros.types.TrackFrame` (stamp, ids, xy, xy_right):
    the frame as it crosses the queue to the backend process (4 arrays pickled instead of 9 and
    two dicts)."""

    __slots__ = ("stamp_ns", "ids", "xy", "xy_right")

    def __init__(self, stamp_ns: int, ids: np.ndarray, xy: np.ndarray, xy_right: np.ndarray | None = None):
        self.stamp_ns, self.ids, self.xy, self.xy_right = int(stamp_ns), ids, xy, xy_right

    @classmethod
    def of(cls, fr) -> "BackendFrame":
        return cls(fr.stamp_ns, fr.ids, fr.xy, fr.xy_right)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getstate__(self):
        return self.stamp_ns, self.ids, self.xy, self.xy_right

    def __setstate__(self, st):
        self.stamp_ns, self.ids, self.xy, self.xy_right = st


def _backend_worker(inbox, outbox, cam0, cam1, imu_noise, config_kwargs) -> None:
    """Child process: IMU and tracks from ``inbox`` in time order; one result dict into ``outbox``."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        from vilib_ros.backend import BackendConfig, VioEstimator

        est = VioEstimator(BackendConfig(**config_kwargs), cam0, cam1, imu_noise)
        if os.environ.get("VILIB_ROS_GC_FREEZE", "1") != "0":
            # as in the nodes (run_node): the start-up objects out of the collector's reach
            gc.collect()
            gc.freeze()
        outbox.put({"ready": True})
        cpu0 = time.process_time()          # the child's CPU time from here: the work, not the imports
        frame_s, frame_kf, busy, wait = [], [], 0.0, 0.0
        while True:
            w = time.perf_counter()
            msg = inbox.get()
            a = time.perf_counter()
            wait += a - w
            if msg[0] == "imu":
                est.add_imu_batch(msg[1], msg[2])
            elif msg[0] == "frames":     # ("frames", [(BackendFrame, IMU stamps up to it, IMU samples), ...])
                for fr, imu_t, imu_d in msg[1]:
                    f0 = time.perf_counter()
                    if len(imu_t):
                        est.add_imu_batch(imu_t, imu_d)
                    s = est.add_frame(fr)
                    frame_s.append(time.perf_counter() - f0)
                    frame_kf.append(bool(s is not None and s.is_keyframe))
            else:
                break
            busy += time.perf_counter() - a
        kt = [k for k in est.kf_timings if "update_s" in k]
        outbox.put({"causal": est.trajectory(smoothed=False), "smoothed": est.trajectory(smoothed=True),
                    "stats": dict(est.stats), "mode": est.mode, "frame_s": frame_s, "frame_kf": frame_kf,
                    "busy_s": busy, "wait_s": wait, "cpu_s": time.process_time() - cpu0,
                    "kf_ms": [1e3 * k["total_s"] for k in est.kf_timings],
                    "kf_parts_ms": {p: [1e3 * k[p] for k in kt] for p in KF_PARTS},
                    "factors": [k["factors"] for k in kt]})
    except Exception:  # noqa: BLE001 - reported to the parent, which fails the run with it
        outbox.put({"error": traceback.format_exc()})
    # The result is the child's only output: once the queue has handed it over, end without the
    # interpreter's teardown (freeing the smoother, the landmarks, every module), which took
    # 0.17 s of the parent's wait in finish() on the 2-core machine, 13 % of a 60 s replay's wall.
    outbox.close()
    outbox.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _Backend:
    """The backend child process behind a bounded queue (``put`` blocks, never drops)."""

    def __init__(self, cam0, cam1, imu_noise, config_kwargs: dict, queue_size: int = 64, batch: int = 8):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.batch, self._pending = max(1, int(batch)), []
        # bounded in frames: queue_size frames in batches of `batch`
        self.inbox, self.outbox = ctx.Queue(maxsize=max(2, queue_size // self.batch)), ctx.Queue()
        self.proc = ctx.Process(target=_backend_worker, name="vilib_ros-backend", daemon=True,
                                args=(self.inbox, self.outbox, cam0, cam1, imu_noise, config_kwargs))
        # the child takes this environment at its start: one OpenBLAS thread, as in backend_node
        # (vilib_ros.nodes._single_blas; the user's value wins), and jemalloc where installed
        # (vilib_ros.allocator); this process's environment is put back afterwards
        saved = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "LD_PRELOAD")}
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        with_jemalloc(os.environ)
        try:
            # no SIGINT of its own: a Ctrl-C ends this process, which ends the child (kill())
            start_without_sigint(self.proc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        first = self._get(120.0)            # imports and construction, outside any timing
        if "error" in first:
            raise RuntimeError("the backend failed to start:\n" + first["error"])

    def _get(self, timeout: float) -> dict:
        t_end = time.monotonic() + timeout
        while True:
            try:
                return self.outbox.get(timeout=1.0)
            except queue.Empty:
                if not self.proc.is_alive() or time.monotonic() > t_end:
                    raise RuntimeError(f"the backend process gave no result (exit code {self.proc.exitcode})") \
                        from None

    def put_frame(self, frame: "BackendFrame", imu_t: np.ndarray, imu_d: np.ndarray) -> None:
        """One frame with the IMU samples since the previous one. Frames cross in batches of
        :attr:`batch` (one queue message each: every message cost the child ~65 us of locks, pipe
        and unpickling on the 2-core machine, 0.08 s of a 1,201-frame replay); :meth:`flush`
        sends a partial batch, and every other message (:meth:`put`) sends it first."""
        self._pending.append((frame, imu_t, imu_d))
        if len(self._pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            self._send(("frames", batch))

    def put(self, msg) -> None:
        """A message after the frames given so far (their partial batch goes first)."""
        self.flush()
        self._send(msg)

    def _send(self, msg) -> None:
        while True:
            try:
                self.inbox.put(msg, timeout=1.0)
                return
            except queue.Full:
                if not self.proc.is_alive():
                    raise RuntimeError(f"the backend process exited (code {self.proc.exitcode})") from None

    def finish(self, timeout: float = 600.0) -> dict:
        self.put(("done",))
        res = self._get(timeout)
        self.proc.join(timeout=30)
        if "error" in res:
            raise RuntimeError("the backend failed:\n" + res["error"])
        return res

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)


# ---------------------------------------------------------------------------------------------
# one dataset
# ---------------------------------------------------------------------------------------------
#: frames decoded ahead of the frontend (stereo 752x480: 16 slots of 0.7 MB in shared memory)
READ_AHEAD = 16
#: unreadable frames logged one by one per reason; the rest only counted
LOG_SKIPS_PER_REASON = 5


def _first_frame(ds, stereo: bool, n: int):
    """The first readable frame among the first 50 (the frontend's warm-up), or None."""
    from vilib_ros.datasets import FrameError

    for k in range(min(n, 50)):
        try:
            return ds.load_image(0, k), (ds.load_image(1, k) if stereo else None)
        except FrameError:
            continue
    return None


def process(ds, device: str = "auto", stereo: bool = True, max_frames: int = 0, backend: bool = True,
            backend_config: dict | None = None, progress=None, preload: bool = False,
            readers: int | None = None, decoders: str = "auto") -> dict:
    """Frontend and backend over ``ds`` (an opened dataset); returns tracks, trajectories, timing.

    Images are decoded ahead of the frontend (at most :data:`READ_AHEAD` frames) by ``readers``
    decoders (None: :func:`~vilib_ros.datasets.decoders.default_workers`) of the kind ``decoders``
    (:func:`~vilib_ros.datasets.decoders.open_decoders`: "auto", processes writing into shared
    memory where the images are files and the machine has CPUs for them, else threads;
    "processes"; "threads"); or all of them before the clock starts
    with ``preload`` (benchmarks: decoding is not part of the VIO). A frame that cannot be read
    (either camera's image) is skipped and counted under its reason (``skipped``); its IMU samples
    go with the next frame. The frontend's first frame (kernel compilation, graph capture) is run
    once on a throwaway tracker first. The result's ``stages`` says what each stage was busy with
    against the wall (:func:`stage_times`)."""
    import logging
    from collections import deque

    from vilib_ros.datasets import FrameError
    from vilib_ros.datasets.decoders import open_decoders
    from vilib_ros.datasets.replay import hand_gil_to_decoders
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    if decoders not in KINDS:
        raise ValueError(f"decoders must be one of {', '.join(KINDS)}; got {decoders!r}")
    log = logging.getLogger(__name__)
    stamps = np.asarray(ds.image_stamps(0), np.int64)
    n = len(stamps) if max_frames <= 0 else min(max_frames, len(stamps))
    stereo = stereo and len(ds.cameras) >= 2
    c0 = ds.cameras[0]
    c1 = ds.cameras[1] if stereo else None
    kw = {"camera_right": c1, "T_right_left": np.linalg.inv(c1.T_BS) @ c0.T_BS} if stereo else {}
    ft = FeatureTracker(c0, FrontendConfig(), device=device, **kw)
    first = _first_frame(ds, stereo, n) if n else None
    if first is not None:
        FeatureTracker(c0, FrontendConfig(), device=device, **kw).process(first[0], int(stamps[0]),
                                                                          image_right=first[1])
    ist, idata = np.asarray(ds.imu_stamps, np.int64), np.asarray(ds.imu_data, float)
    has_imu = len(ist) > 0
    cams = (0, 1) if stereo else (0,)
    reader = open_decoders(ds, cams, per_job=len(cams), workers=readers, capacity=READ_AHEAD, kind=decoders)
    be = None
    switch_before = None
    ahead: deque = deque()
    try:
        if backend and has_imu:
            cfg = dict(backend_config or {})
            cfg.setdefault("mode", "stereo" if stereo else "mono")
            be = _Backend(c0, c1, ds.imu_noise, cfg)
        reader.wait_ready()         # the decoders' start-up (imports) outside the clock
        pre = None
        if preload:
            pre = []
            for k in range(n):
                while len(ahead) < reader.capacity and k + len(ahead) < n:
                    ahead.append(reader.submit(tuple((c, k + len(ahead)) for c in cams)))
                pre.append(ahead.popleft().result())
        elif reader.kind == "threads" and reader.workers > 0:
            # decoded frames do not wait 5 ms for the frontend thread's GIL (restored at the end)
            switch_before = hand_gil_to_decoders()
        tracks, fe_s, skipped = [], [], {}
        wait_reader = wait_backend = 0.0
        j = 0
        nxt = 0
        t0 = time.perf_counter()
        for k in range(n):
            if pre is not None:
                images, pre[k] = pre[k], None
            else:
                while len(ahead) < reader.capacity and nxt < n:     # decode ahead, bounded, in order
                    ahead.append(reader.submit(tuple((c, nxt) for c in cams)))
                    nxt += 1
                a = time.perf_counter()
                images = ahead.popleft().result()
                wait_reader += time.perf_counter() - a
            bad = next((im for im in images if isinstance(im, FrameError)), None)
            if bad is not None:
                skipped[bad.reason] = skipped.get(bad.reason, 0) + 1
                if skipped[bad.reason] <= LOG_SKIPS_PER_REASON:
                    log.warning("frame %d skipped (%s): %s%s", k, bad.reason, bad,
                                " (further frames skipped for this reason are only counted)"
                                if skipped[bad.reason] == LOG_SKIPS_PER_REASON else "")
                if progress is not None:
                    progress(k + 1, n)
                continue
            left, right = images[0], (images[1] if stereo else None)
            t = int(stamps[k])
            j0, j = j, max(j, int(np.searchsorted(ist, t, side="right")))
            gyro = np.column_stack([ist[max(0, j0 - 1):j], idata[max(0, j0 - 1):j, :3]]) if has_imu else None
            a = time.perf_counter()
            fr = owned(ft.process(left, t, gyro=gyro, image_right=right))
            fe_s.append(time.perf_counter() - a)
            tracks.append(fr)
            if be is not None:      # its tracks and the IMU before it (sent in batches of frames)
                a = time.perf_counter()
                be.put_frame(BackendFrame.of(fr), ist[j0:j], idata[j0:j])
                wait_backend += time.perf_counter() - a
            if progress is not None:
                progress(k + 1, n)
        a = time.perf_counter()
        if be is not None and n:
            t_last = int(stamps[n - 1])
            rest = slice(j, int(np.searchsorted(ist, t_last + int(1e9), side="right")))
            if rest.stop > rest.start:
                be.put(("imu", ist[rest], idata[rest]))
        t_fe = time.perf_counter() - t0
        res = be.finish() if be is not None else None
        wait_backend += time.perf_counter() - a
    except BaseException:
        if be is not None:
            be.kill()
        raise
    finally:
        for f in ahead:
            f.cancel()
        reader.close()
        if switch_before is not None:
            sys.setswitchinterval(switch_before)
    wall = time.perf_counter() - t0
    out = {"tracks": tracks, "frontend_s": fe_s, "backend": res, "wall_s": wall, "frontend_wall_s": t_fe,
           "frames": n, "stereo": stereo, "has_imu": has_imu, "device": getattr(ft, "device", device),
           "skipped": skipped,
           "reader": {"kind": reader.kind, "workers": reader.workers, "describe": reader.describe(),
                      "preloaded": bool(preload),
                      "decode_s": 0.0 if preload else reader.decode_s, "busy_s": 0.0 if preload else reader.busy_s,
                      "wait_s": wait_reader},
           "backend_wait_s": wait_backend,
           "imu_sent": int(np.searchsorted(ist, int(stamps[n - 1]) + int(1e9), side="right")) if n and has_imu else 0}
    out["stages"] = stage_times(out)
    return out


#: below this share of the wall, no stage is said to have limited the run
LIMIT_SHARE = 0.5


def stage_times(r: dict) -> dict:
    """Each stage's busy seconds against the wall of a :func:`process` result, and the stage that
    limited the run.

    ``reader``: the decoders' busy time, per decoder (equal to the wall when every decoder decoded
    all the time; 0 when preloaded); ``frontend``: the frontend thread's time not spent waiting
    for decoded frames or for the backend's queue (``process()`` and the work around it: the IMU
    slice, the copy of the tracks, the queueing), with ``process_s`` the part in ``process()``;
    ``backend``: the backend's time on its messages. ``limit`` is the stage with the largest share
    of the wall, or None where none was busy :data:`LIMIT_SHARE` of it; ``share`` is its share."""
    wall = float(r["wall_s"])
    rd = r.get("reader") or {}
    be = r.get("backend") or {}
    busy = {"reader": float(rd.get("busy_s", 0.0)),
            "frontend": max(0.0, wall - float(rd.get("wait_s", 0.0)) - float(r.get("backend_wait_s", 0.0))),
            "backend": float(be.get("busy_s", 0.0))}
    name = max(busy, key=busy.get)
    share = busy[name] / wall if wall > 0 else 0.0
    return {"wall_s": wall, "busy_s": busy, "process_s": float(np.sum(r["frontend_s"])),
            "reader_wait_s": float(rd.get("wait_s", 0.0)), "backend_wait_s": float(r.get("backend_wait_s", 0.0)),
            "limit": name if share >= LIMIT_SHARE else None, "share": share}


def stages_line(r: dict) -> str:
    """The report's line on which stage limited the run (:func:`stage_times`)."""
    st = r["stages"]
    rd, b = r["reader"], st["busy_s"]
    if rd.get("preloaded"):
        reader = "reader: preloaded before the clock"
    else:
        reader = (f"reader {b['reader']:.1f} s per decoder ({rd['describe']}; the frontend waited "
                  f"{st['reader_wait_s']:.1f} s for decoded frames)")
    backend = (f"backend {b['backend']:.1f} s (the frontend waited {st['backend_wait_s']:.1f} s for it)"
               if r.get("backend") is not None else "no backend")
    verdict = (f"**limited by the {st['limit']}** (busy {100 * st['share']:.0f} % of the wall)" if st["limit"] else
               f"no stage was busy {100 * LIMIT_SHARE:.0f} % of the wall (the busiest: {max(b, key=b.get)}, "
               f"{100 * st['share']:.0f} %)")
    return (f"- stages, busy against the {st['wall_s']:.1f} s wall: {reader}, frontend {b['frontend']:.1f} s "
            f"(process() {st['process_s']:.1f} s), {backend}: {verdict}")


def replay_backend(ds, tracks, stereo: bool, backend_config: dict | None = None, batch: int = 8) -> dict:
    """The backend alone on the tracks of an earlier :func:`process` run of ``ds``: the same child
    process fed the same messages (each frame with the IMU samples since the previous one), with
    nothing else running in this process. Against the backend's figures of the run itself, this
    separates what the tracks cost from what sharing the machine with the frontend costs
    (``vilib-ros bench-vio``). Returns the backend's result dict with ``wall_s``."""
    ist, idata = np.asarray(ds.imu_stamps, np.int64), np.asarray(ds.imu_data, float)
    cfg = dict(backend_config or {})
    cfg.setdefault("mode", "stereo" if stereo else "mono")
    be = _Backend(ds.cameras[0], ds.cameras[1] if stereo else None, ds.imu_noise, cfg, batch=batch)
    t0 = time.perf_counter()
    try:
        j = 0
        for fr in tracks:
            j1 = max(j, int(np.searchsorted(ist, int(fr.stamp_ns), side="right")))
            be.put_frame(BackendFrame.of(fr), ist[j:j1], idata[j:j1])
            j = j1
        res = be.finish()
    except BaseException:
        be.kill()
        raise
    res["wall_s"] = time.perf_counter() - t0
    return res


# ---------------------------------------------------------------------------------------------
# outputs (the ROS path's files, written through its writer)
# ---------------------------------------------------------------------------------------------
def _stat(x_ms) -> dict:
    a = np.asarray(x_ms, float)
    if not a.size:
        return {"n": 0}
    return {"n": int(a.size), "mean": float(a.mean()), "median": float(np.median(a)),
            "p95": float(np.percentile(a, 95)), "max": float(a.max())}


def write_run_files(out: Path, r: dict) -> None:
    """recorded.jsonl, player/frontend/backend_stats.json, trajectory_tum.txt, odometry_tum.txt."""
    from vilib_ros.datasets import Groundtruth

    be = r["backend"]
    with open(out / "recorded.jsonl", "w") as f:
        for i, fr in enumerate(r["tracks"]):
            f.write(json.dumps({"topic": "tracks", "count": i + 1, "stamp_ns": int(fr.stamp_ns), "n": len(fr),
                                "ids": fr.ids.astype(np.int64).tolist(), "u": np.round(fr.uv[:, 0], 3).tolist(),
                                "v": np.round(fr.uv[:, 1], 3).tolist(),
                                "age": np.asarray(fr.age, np.int64).tolist()}) + "\n")
        if be is not None:
            t, p, q = be["causal"]
            for i, (ti, pi, qi) in enumerate(zip(t, p, q)):
                f.write(json.dumps({"topic": "odometry", "count": i + 1, "stamp_ns": int(ti), "p": pi.tolist(),
                                    "q_xyzw": qi.tolist()}) + "\n")
    (out / "player_stats.json").write_text(json.dumps({"images": [len(r["tracks"])], "imu": r["imu_sent"],
                                                       "skipped": r.get("skipped", {})}))
    fe = {"device": r["device"], "tracks_published": len(r["tracks"]), "images_received": r["frames"],
          "process_ms": _stat(1e3 * np.asarray(r["frontend_s"])), "skipped": {},
          "stages_ms": {"process() (offline)": _stat(1e3 * np.asarray(r["frontend_s"]))}}
    (out / "frontend_stats.json").write_text(json.dumps(fe, indent=2))
    bs = {"mode": (f"VioEstimator ({be['mode']})" if be is not None else
                   ("not run" if r["has_imu"] else NO_IMU)),
          "frames_received": len(r["tracks"]) if be is not None else 0,
          "imu_received": r["imu_sent"] if be is not None else None,
          "odometry_published": len(be["causal"][0]) if be is not None else 0,
          "estimator": be["stats"] if be is not None else {},
          "frame_ms": _stat(1e3 * np.asarray(be["frame_s"])) if be is not None else {"n": 0}}
    (out / "backend_stats.json").write_text(json.dumps(bs, indent=2, default=float))
    for name, key in (("trajectory_tum.txt", "smoothed"), ("odometry_tum.txt", "causal")):
        (out / name).unlink(missing_ok=True)
        if be is not None and len(be[key][0]):
            Groundtruth(*(np.asarray(a) for a in be[key])).write_tum(out / name)


def evaluate_run(out: Path, ds) -> dict:
    """ATE (causal, smoothed) and RPE per metre through evo, where there is ground truth."""
    from vilib_ros.evaluation import evaluate

    ev = {}
    gt = out / "groundtruth_tum.txt"
    if ds.groundtruth is None or not gt.is_file():
        return ev
    for key, name in (("causal", "odometry_tum.txt"), ("smoothed", "trajectory_tum.txt")):
        f = out / name
        if f.is_file() and f.stat().st_size:
            try:
                r = evaluate(f, gt, plot=False)
            except ValueError as exc:
                ev[key] = {"error": str(exc)}
                continue
            rpe = r.get("rpe_m_per_1m")
            ev[key] = {"ate_m": r["ape_m"]["rmse"], "rpe_m_per_m": rpe["rmse"] if rpe else None,
                       "length_m": r["path_length_m"]}
    return ev


def _write_report(out: Path, ds, n_images: int, wa, stereo: bool, wall: dict, name: str, cal=None) -> dict:
    """The ROS path's report writer (:func:`vilib_ros.pipeline_report.write_outputs`), from the
    files write_run_files left."""
    from vilib_ros.pipeline_report import write_outputs

    return write_outputs(out, ds, wa, stereo, wall, "none (offline, no ROS)", name, calibration=cal)


def run_one(ds_path, args, out: Path | None, name: str) -> dict:
    """One dataset: opened with its calibration, then its output folder (``out``, created here;
    None: :func:`vilib_ros.run_setup.run_folder` of ``--out``), the kernels, the replay, the outputs."""
    from types import SimpleNamespace

    from vilib_ros.run_setup import open_for_run, run_folder, say_calibration, warm_kernels

    who = "vilib-ros run --offline"
    t_start = time.monotonic()
    ds, cal = open_for_run(ds_path, args)
    try:
        out = (run_folder(args.out, name, getattr(args, "overwrite", False)) if out is None
               else out.mkdir(parents=True) or out).resolve()
    except BaseException:
        ds.close()
        raise
    n_images = len(ds.image_stamps(0)) if args.max_frames <= 0 else min(args.max_frames, len(ds.image_stamps(0)))
    stereo = len(cal.cameras) >= 2 and not args.mono
    has_imu = len(ds.imu_stamps) > 0
    print(f"{who}: {ds!r}\n  {n_images} frames, {'stereo' if stereo else 'mono'}, "
          f"frontend device {args.device}, output folder {out}", file=sys.stderr)
    say_calibration(who, cal)
    if not has_imu:
        print(f"{who}: {name}: {NO_IMU}", file=sys.stderr)
    wall = {"prepare": time.monotonic() - t_start}
    t0 = time.monotonic()
    kernels = warm_kernels(who, cal, stereo, args.device, backend=not args.no_backend and has_imu)
    wall["compile"], wall["kernels_compiled"] = time.monotonic() - t0, kernels["compiled"]
    from tqdm import tqdm

    # with --jobs N several runs share the console: one line per run at its end instead of bars;
    # the bar starts at the first frame (no rate or ETA from the time before it)
    bars = []
    t_replay0 = time.monotonic()

    def progress(k, n):
        if not bars:
            wall["first_frame"] = time.monotonic() - t_replay0
            wall["to_first_frame"] = time.monotonic() - t_start
            bars.append(tqdm(total=n, initial=k, unit="frame", desc=name, file=sys.stderr, mininterval=0.5,
                             disable=getattr(args, "jobs", 1) > 1))
        bars[0].update(k - bars[0].n)

    try:
        r = process(ds, args.device, stereo, args.max_frames, backend=not args.no_backend, progress=progress)
    finally:
        for bar in bars:
            bar.close()
    wall["replay"] = r["wall_s"]
    write_run_files(out, r)
    wa = SimpleNamespace(dataset=str(ds_path), rate=0.0, no_video=args.no_video, max_frames=args.max_frames, loops=1)
    summary = _write_report(out, ds, n_images, wa, stereo, wall, name, cal)
    ev = evaluate_run(out, ds)
    be = r["backend"]
    fps = r["frames"] / r["wall_s"] if r["wall_s"] > 0 else 0.0
    fe_ms = 1e3 * float(np.median(r["frontend_s"])) if r["frontend_s"] else float("nan")
    kf = np.asarray(be["kf_ms"]) if be is not None else np.zeros(0)
    lines = ["", "## Offline run (no ROS)", "",
             f"- whole VIO: **{fps:.1f} frames/s** ({r['frames']} frames in {r['wall_s']:.1f} s; frontend in this "
             f"process, backend in a child process, overlapping through a bounded queue, nothing dropped)",
             f"- frontend: median {fe_ms:.2f} ms per frame ({r['device']}); busy {sum(r['frontend_s']):.1f} s"]
    if be is not None:
        lines.append(f"- backend: busy {be['busy_s']:.1f} s; per keyframe median "
                     f"{float(np.median(kf)) if kf.size else float('nan'):.2f} ms; keyframes "
                     f"{be['stats'].get('keyframes')}, resets {be['stats'].get('resets')}")
    lines.append(stages_line(r))
    if r["skipped"]:
        lines.append("- frames skipped (unreadable): " + ", ".join(f"{k} {v}" for k, v in sorted(r["skipped"].items())))
    for key in ("causal", "smoothed"):
        e = ev.get(key)
        if e and "ate_m" in e:
            lines.append(f"- ATE (SE3, evo) of the {key} trajectory: **{e['ate_m']:.4f} m** over "
                         f"{e['length_m']:.1f} m; RPE {e['rpe_m_per_m'] if e['rpe_m_per_m'] is not None else float('nan'):.4f} m/m")
    if be is not None:
        lines.append("- `odometry_tum.txt`: the causal per-frame odometry (what `backend_node` publishes)")
    report = out / "report.md"
    # the ROS path's file list names node parameters and logs, which an offline run has not
    text = "\n".join(ln for ln in report.read_text().splitlines()
                     if not (ln.startswith("- ") and ln.endswith("`") and "`" in ln[:-1]
                             and not (out / ln[ln.index("`") + 1:-1]).exists())) + "\n"
    if not has_imu:
        head, _, rest = text.partition("\n")
        text = f"{head}\n\n**{NO_IMU}** (the dataset has no imu0)\n{rest}"
    report.write_text(text + "\n".join(lines) + "\n")
    timing = json.loads((out / "timing.json").read_text()) if (out / "timing.json").is_file() else {}
    timing.update({"offline": {"frames_per_s": fps, "wall_s": r["wall_s"], "frontend_busy_s": sum(r["frontend_s"]),
                               "backend_busy_s": be["busy_s"] if be is not None else None,
                               "keyframe_ms": _stat(kf), "stages": r["stages"], "reader": r["reader"],
                               "skipped": r["skipped"]}})
    (out / "timing.json").write_text(json.dumps(timing | {"wall_s": wall}, indent=2))
    st = r["stages"]
    limit = f"limited by the {st['limit']}" if st["limit"] else "no stage busy half the wall"
    skipped = ("; skipped (unreadable): " + ", ".join(f"{k} {v}" for k, v in sorted(r["skipped"].items()))
               if r["skipped"] else "")
    print(f"{who}: {name}: {len(r['tracks'])}/{n_images} frames tracked, {fps:.1f} frames/s ({limit}){skipped}; "
          f"outputs in {out}", file=sys.stderr)
    if "do not play" in (summary.get("video_kind") or ""):
        print(f"{who}: the tracks video is {summary['video_kind']}: see report.md for what plays it",
              file=sys.stderr)
    return {"name": name, "frames": r["frames"], "frames_per_s": fps, "stereo": stereo, "has_imu": has_imu,
            "ate_causal_m": (ev.get("causal") or {}).get("ate_m"), "ate_smoothed_m": (ev.get("smoothed") or {}).get("ate_m"),
            "rpe_m_per_m": (ev.get("causal") or {}).get("rpe_m_per_m"),
            "keyframes": be["stats"].get("keyframes") if be is not None else None,
            "resets": be["stats"].get("resets") if be is not None else None,
            "limit": st["limit"], "limit_share": st["share"], "busy_s": st["busy_s"], "wall_s": st["wall_s"],
            "skipped": r["skipped"], "out": str(out)}


def _limit_cell(row: dict) -> str:
    """The summary's "limited by" cell: the stage and each stage's busy seconds of the wall."""
    b = row.get("busy_s")
    if not b:
        return "-"
    who = row["limit"] or "none (no stage busy half the wall)"
    return f"{who} ({b['reader']:.1f} / {b['frontend']:.1f} / {b['backend']:.1f} of {row['wall_s']:.1f} s)"


def summary_markdown(rows: list[dict], batch: dict | None = None) -> str:
    """The summary table; ``batch`` (several sequences in parallel with ``--jobs``): the batch's
    aggregate throughput, labelled as such below the table."""
    def f(v, fmt):
        return "-" if v is None else fmt.format(v)

    jobs = (batch or {}).get("jobs", 1)
    fps_head = "frames/s" if jobs <= 1 else f"frames/s (while {jobs} ran in parallel)"
    L = ["# vilib_ros offline run: summary", "",
         f"| sequence | frames | mode | ATE causal [m] | ATE smoothed [m] | RPE [m/m] | {fps_head} | limited by "
         "(busy s: reader / frontend / backend of the wall) | keyframes | resets |",
         "|---|---:|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        if r.get("error"):
            L.append(f"| {r['name']} | - | failed: {r['error']} ||||||||")
            continue
        mode = ("stereo" if r["stereo"] else "mono") + ("" if r["has_imu"] else f" ({NO_IMU})")
        L.append(f"| {r['name']} | {r['frames']} | {mode} | {f(r['ate_causal_m'], '{:.4f}')} | "
                 f"{f(r['ate_smoothed_m'], '{:.4f}')} | {f(r['rpe_m_per_m'], '{:.4f}')} | {r['frames_per_s']:.1f} | "
                 f"{_limit_cell(r)} | {f(r['keyframes'], '{}')} | {f(r['resets'], '{}')} |")
    if batch:
        L += ["", f"Batch: {batch['frames']} frames of {batch['sequences']} sequences in {batch['wall_s']:.1f} s with "
              f"{jobs} parallel job(s) (start-up, evaluation and output files included): **aggregate {batch['aggregate_frames_per_s']:.1f} frames/s** over all sequences "
              "together; this is the batch's throughput, not the speed of one sequence (the per-sequence column "
              + ("is each sequence's own speed)." if jobs <= 1 else
                 f"is each sequence's own speed while it shared the machine with {jobs - 1} other(s))."), ]
    return "\n".join(L) + "\n"


def _run_one_job(ds_path, args, out: Path | None, name: str) -> dict:
    """:func:`run_one` in a worker process of ``--jobs``: a failure becomes a row."""
    try:
        return run_one(ds_path, args, out, name)
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as exc:
        print(f"vilib-ros run --offline: {name}: FAILED: {exc}", file=sys.stderr)
        return {"name": name, "error": str(exc).splitlines()[0]}


def _run_parallel(targets, args, jobs: int) -> list[dict]:
    """The datasets in ``jobs`` worker processes (each with its own backend child), rows in the
    order of ``targets``."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futs = [pool.submit(_run_one_job, ds_path, args, out, name) for ds_path, out, name in targets]
        return [f.result() for f in futs]


def run_offline(args) -> int:
    """Entry point of ``vilib-ros run --offline``."""
    from vilib_ros.run_setup import generated_sequence, run_folder

    paths = list(args.dataset or [])
    if getattr(args, "jobs", 1) < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    base = None
    if not paths:
        given = [f for f in ("calibration", "imu_calibration", "image_topic", "image_right_topic", "imu_topic")
                 if getattr(args, f, None)]
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} applies to a DATASET; the generated sequence "
                             "has its own calibration")
        targets = [(generated_sequence(args.duration, "vilib-ros run --offline"), None, "synthetic")]
    elif len(paths) == 1:
        pp = Path(paths[0])
        targets = [(pp, None, pp.stem if pp.suffix == ".bag" else pp.resolve().name)]
    else:
        # several datasets: one batch folder (summary.md) with a folder per dataset
        names = [Path(p).stem if Path(p).suffix == ".bag" else Path(p).resolve().name for p in paths]
        if len(set(names)) < len(names):
            raise ValueError(f"two datasets share a name ({', '.join(n for n in names if names.count(n) > 1)}): "
                             "their output folders would collide")
        base = run_folder(args.out, "batch", getattr(args, "overwrite", False)).resolve()
        print(f"vilib-ros run --offline: output folder {base}", file=sys.stderr)
        targets = [(Path(p), base / n, n) for p, n in zip(paths, names)]
    jobs = max(1, min(int(getattr(args, "jobs", 1) or 1), len(targets)))
    rows, rc = [], 0
    t0 = time.perf_counter()
    if jobs > 1:
        print(f"vilib-ros run --offline: {len(targets)} datasets in {jobs} parallel jobs", file=sys.stderr)
        try:
            rows = _run_parallel(targets, args, jobs)
        except KeyboardInterrupt:
            print("vilib-ros run --offline: interrupted", file=sys.stderr)
            return 130
        rc = 1 if any(r.get("error") for r in rows) else 0
    else:
        for ds_path, out, name in targets:
            try:
                rows.append(run_one(ds_path, args, out, name))
            except KeyboardInterrupt:
                print("vilib-ros run --offline: interrupted", file=sys.stderr)
                return 130
            except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as exc:
                if base is None and not isinstance(exc, RuntimeError):
                    raise       # one dataset: a user error is the command's (exit 2, nothing written)
                print(f"vilib-ros run --offline: {name}: FAILED: {exc}", file=sys.stderr)
                rows.append({"name": name, "error": str(exc).splitlines()[0]})
                rc = 1
    wall = time.perf_counter() - t0
    if base is not None:
        frames = sum(r.get("frames", 0) for r in rows if not r.get("error"))
        batch = {"jobs": jobs, "sequences": len(targets), "frames": frames, "wall_s": wall,
                 "aggregate_frames_per_s": frames / wall if wall > 0 else 0.0}
        md = summary_markdown(rows, batch)
        (base / "summary.md").write_text(md)
        (base / "summary.json").write_text(json.dumps({"sequences": rows, "batch": batch}, indent=2, default=float))
        print(md)
    return rc
