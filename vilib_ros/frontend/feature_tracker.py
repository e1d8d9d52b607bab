"""The visual frontend: detect, track, keep persistent ids, redetect in free cells.

:class:`FeatureTracker` turns frames (+ optional gyro samples and a right image) into
:class:`vilib_ros.types.TrackFrame` s:

1. pyramid of the new frame;
2. LK tracking (:mod:`vilib_ros.frontend.tracker`) of every live track from the previous frame, started at
   the IMU-predicted position (rotation-only homography, :mod:`vilib_ros.frontend.imu_prediction`) or at
   the old position; optional forward-backward check and RANSAC (fundamental matrix on
   undistorted points);
3. lost tracks dropped; when live tracks fall below ``min_track_fraction`` of the target (the
   number of detector cells, or ``max_features``), FAST detection in the cells without a live track;
4. keypoints undistorted to normalised coordinates; velocities; optional stereo matching of the
   left features into the right image with the same LK kernel.

GPU path: a ring of 3 device pyramids and pinned host buffers; frame k+1 is uploaded on an
upload stream while frame k computes on the compute stream (events order them); per-frame
parameters go up and all results come down in one pinned copy each; nothing is allocated after
warm-up; optionally the per-frame sequence (pyramid, prediction, LK, FB, undistortion, stereo,
download) is one CUDA graph launch. :meth:`FeatureTracker.submit` / :meth:`FeatureTracker.result`
is the asynchronous API, :meth:`FeatureTracker.process` = submit + result.
"""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from vilib_ros._cuda import launch
from vilib_ros.frontend.detector import DetectorConfig, make_detector
from vilib_ros.frontend.imu_prediction import ImuGapError, camera_rotation, integrate_gyro, predict_points
from vilib_ros.frontend.pyramid import build_pyramid_cpu
from vilib_ros.frontend.tracker import Layout as _Layout
from vilib_ros.frontend.tracker import TrackerConfig, TrackStatus, make_tracker, output_fields
from vilib_ros.types import TrackFrame

log = logging.getLogger("vilib_ros.frontend")

RING = 3
_CAM_MODEL_CODE = {"none": 0, "radial-tangential": 1, "equidistant": 2}


@dataclass
class FrontendConfig:
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    max_features: int = 0              # target track count; 0 = number of detector cells
    min_track_fraction: float = 0.3    # redetect when live tracks < fraction * target
    fb_check: bool = False             # forward-backward check
    fb_threshold: float = 0.5          # px
    ransac: bool = False               # fundamental-matrix RANSAC on undistorted points
    ransac_threshold: float = 1.0      # px (converted with fx)
    ransac_confidence: float = 0.99
    imu_prediction: bool = True        # use gyro samples when given
    imu_max_gap_ms: float = 50.0
    stereo: bool = True                # track into image_right when given
    stereo_epipolar_threshold: float = 2.0  # px; 0 = off
    use_graph: bool = True             # GPU: CUDA-graph the per-frame sequence

    def validate(self) -> "FrontendConfig":
        if not isinstance(self.detector, DetectorConfig) or not isinstance(self.tracker, TrackerConfig):
            raise ValueError("FrontendConfig.detector / .tracker must be DetectorConfig / TrackerConfig")
        self.detector.validate()
        self.tracker.validate()
        if int(self.max_features) != self.max_features or self.max_features < 0:
            raise ValueError(f"FrontendConfig.max_features must be an integer >= 0, got {self.max_features!r}")
        if not 0.0 <= self.min_track_fraction <= 1.0:
            raise ValueError(f"FrontendConfig.min_track_fraction must be in [0, 1], got {self.min_track_fraction!r}")
        for f in ("fb_threshold", "ransac_threshold", "imu_max_gap_ms"):
            if not getattr(self, f) > 0:
                raise ValueError(f"FrontendConfig.{f} must be > 0, got {getattr(self, f)!r}")
        if not 0.5 < self.ransac_confidence < 1.0:
            raise ValueError(f"FrontendConfig.ransac_confidence must be in (0.5, 1), got {self.ransac_confidence!r}")
        if not self.stereo_epipolar_threshold >= 0:
            raise ValueError("FrontendConfig.stereo_epipolar_threshold must be >= 0")
        return self


def _cam_params(cam) -> np.ndarray:
    d = np.zeros(4)
    d[: min(4, cam.distortion.size)] = cam.distortion[:4]
    model = cam.distortion_model if np.any(d) else "none"
    return np.array([cam.fx, cam.fy, cam.cx, cam.cy, *d, _CAM_MODEL_CODE[model], 0], np.float32)


_OUT_SETS = ("fwd", "fb", "st")


def _out_fields(S):
    f = []
    for p in _OUT_SETS:
        f += output_fields(S, f"{p}_") + [(f"{p}_xy", np.float32, (S, 2))]
    f += [("pred", np.float32, (S, 2)), ("pred_r", np.float32, (S, 2))]
    return f


def _param_fields(S):
    return [("uv", np.float32, (S, 2)), ("xy", np.float32, (S, 2)), ("M", np.float32, (12,)), ("active", np.int8, (S,))]


class _Entry:
    __slots__ = ("stamp", "state", "frame", "slot", "R", "stereo", "image", "image_right", "t_submit", "skip_reason")

    def __init__(self, stamp):
        self.stamp = stamp
        self.state = "new"
        self.frame = None
        self.slot = -1
        self.R = None
        self.stereo = False
        self.image = None
        self.image_right = None
        self.t_submit = time.perf_counter()
        self.skip_reason = ""


class FeatureTracker:
    """Feature tracks with persistent ids from mono (+ optional stereo) frames.

    ``camera``: cam0 model (size, intrinsics, distortion, ``T_BS``). ``camera_right`` and
    ``T_right_left`` (4x4, X_right = T X_left; default from the two ``T_BS``) enable stereo.
    """

    def __init__(self, camera, config: FrontendConfig | None = None, device: str = "auto",
                 camera_right=None, T_right_left=None):
        from vilib_ros._cuda import CudaUnavailable, resolve_device

        self.config = (config or FrontendConfig()).validate()
        self.camera = camera
        self.width, self.height = int(camera.width), int(camera.height)
        self.camera_right = camera_right
        if camera_right is not None:
            if (camera_right.width, camera_right.height) != (self.width, self.height):
                raise ValueError("camera_right must have the same size as camera")
            if T_right_left is None:
                T_right_left = np.linalg.inv(camera_right.T_BS) @ camera.T_BS
            T_right_left = np.asarray(T_right_left, np.float64).reshape(4, 4)
        self.T_right_left = T_right_left
        dev = resolve_device(device)
        c = self.config
        self.detector = make_detector(self.width, self.height, c.detector, device=dev)
        self.grid_shape = tuple(self.detector.grid_shape)
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.target = int(c.max_features) if c.max_features > 0 else self.n_cells
        self.S = self.target
        self.levels = max(int(c.tracker.levels), int(c.detector.levels))
        self.tracker = make_tracker(self.width, self.height, c.tracker, device=dev, max_features=self.S)
        self.device = "cuda" if getattr(self.tracker, "device", "cpu") == "cuda" and \
            getattr(self.detector, "device", "cpu") == "cuda" else "cpu"
        if self.device == "cpu" and dev == "cuda":
            if device == "cuda":
                raise CudaUnavailable("GPU tracker or detector unavailable")
            self.tracker = make_tracker(self.width, self.height, c.tracker, device="cpu", max_features=self.S)
            self.detector = make_detector(self.width, self.height, c.detector, device="cpu")
        if c.stereo and camera_right is not None:
            R = self.T_right_left[:3, :3]
            t = self.T_right_left[:3, 3]
            tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
            self._E_rl = tx @ R  # x_r^T E x_l = 0
        self.stats: dict[str, int] = collections.defaultdict(int)
        self._queue: collections.deque[_Entry] = collections.deque()
        self._uploaded: collections.deque[_Entry] = collections.deque()
        self._computing: _Entry | None = None
        self._last_stamp: int | None = None
        self._init_state()
        if self.device == "cuda":
            self._init_gpu()

    # ------------------------------------------------------------------ state
    def _init_state(self):
        S = self.S
        self._active = np.zeros(S, bool)
        self._ids = np.full(S, -1, np.int64)
        self._uv = np.zeros((S, 2), np.float32)
        self._xy = np.zeros((S, 2), np.float64)
        self._vel = np.zeros((S, 2), np.float64)
        self._score = np.zeros(S, np.float32)
        self._level = np.zeros(S, np.int32)
        self._age = np.zeros(S, np.int32)
        self._next_id = getattr(self, "_next_id", 0)
        self._prev_stamp: int | None = None   # stamp of the frame the state belongs to
        self._prev_pyr = None                 # CPU: previous pyramid; GPU: previous ring slot
        self._prev_slot = -1
        self._n_live = 0

    def reset(self) -> None:
        """Drop every track and the previous frame (pending results are discarded)."""
        if self.device == "cuda":
            self._cs.synchronize()
            self._us.synchronize()
        self._queue.clear()
        self._uploaded.clear()
        self._computing = None
        self._last_stamp = None
        self._init_state()
        self.stats["resets"] += 1

    @property
    def num_tracks(self) -> int:
        return int(self._active.sum())

    # ------------------------------------------------------------------ public API
    def process(self, image, stamp_ns: int, gyro=None, image_right=None) -> TrackFrame:
        """Submit one frame and return its TrackFrame (synchronous)."""
        self.submit(image, stamp_ns, gyro, image_right)
        return self.result()

    def submit(self, image, stamp_ns: int, gyro=None, image_right=None) -> None:
        """Queue a frame; on the GPU its upload starts at once (overlapping the previous frame's
        compute). Bad sizes/dtypes raise ValueError before any state changes; non-monotonic
        stamps and empty frames are counted skips (their result is an empty TrackFrame)."""
        stamp_ns = int(stamp_ns)
        e = _Entry(stamp_ns)
        image = self._check_image(image, "image")
        if image is None:
            self.stats["skipped_empty"] += 1
            log.warning("empty frame at %d skipped", stamp_ns)
            return self._push_skip(e, "empty")
        want_stereo = image_right is not None and self.config.stereo and self.camera_right is not None
        if image_right is not None:
            image_right = self._check_image(image_right, "image_right")
            if image_right is None:
                self.stats["skipped_empty"] += 1
                log.warning("empty right frame at %d skipped", stamp_ns)
                return self._push_skip(e, "empty")
        gyro_arr = None
        if gyro is not None:
            gyro_arr = np.asarray(gyro, np.float64)
            if gyro_arr.ndim != 2 or gyro_arr.shape[1] != 4:
                raise ValueError(f"gyro must be (K, 4) rows of t_ns, wx, wy, wz; got shape {gyro_arr.shape}")
        if self._last_stamp is not None and stamp_ns <= self._last_stamp:
            self.stats["skipped_nonmonotonic"] += 1
            log.warning("frame stamp %d is not after the previous %d: skipped", stamp_ns, self._last_stamp)
            return self._push_skip(e, "nonmonotonic")
        prev_stamp = self._last_stamp
        self._last_stamp = stamp_ns
        self.stats["frames"] += 1
        # IMU rotation prediction between the previous accepted frame and this one
        if self.config.imu_prediction and gyro_arr is not None and prev_stamp is not None:
            try:
                R_b = integrate_gyro(gyro_arr, prev_stamp, stamp_ns, int(self.config.imu_max_gap_ms * 1e6))
                e.R = camera_rotation(R_b, self.camera.T_BS)
                self.stats["imu_predicted"] += 1
            except ImuGapError as exc:
                key = "imu_nan" if "NaN" in str(exc) else "imu_gaps"
                self.stats[key] += 1
                log.warning("no IMU prediction for frame %d: %s", stamp_ns, exc)
        e.stereo = want_stereo
        if self.device == "cuda":
            while (self._computing is not None) + len(self._uploaded) >= 2:
                self._pump(block=True)
            self._upload(e, image, image_right if want_stereo else None)
            self._queue.append(e)
            self._uploaded.append(e)
            self._pump(block=False)
        else:
            e.image, e.image_right = image, (image_right if want_stereo else None)
            self._queue.append(e)
            self._cpu_frame(e)

    def result(self) -> TrackFrame:
        """The oldest submitted frame's TrackFrame (waits for it)."""
        if not self._queue:
            raise RuntimeError("result() called with no submitted frame")
        while self._queue[0].state != "done":
            self._pump(block=True)
        e = self._queue.popleft()
        if self.device == "cuda":
            self._pump(block=False)  # start the next frame's compute before returning
        e.frame.timings["total_s"] = time.perf_counter() - e.t_submit
        return e.frame

    # ------------------------------------------------------------------ helpers
    def _check_image(self, image, what):
        if not isinstance(image, np.ndarray):
            raise ValueError(f"{what} must be a numpy array, got {type(image).__name__}")
        if image.size == 0:
            return None
        if image.dtype != np.uint8 or image.ndim != 2:
            raise ValueError(f"{what} must be a 2D uint8 (mono8) image, got {image.dtype} with shape {image.shape}")
        if image.shape != (self.height, self.width):
            raise ValueError(f"{what} is {image.shape[1]}x{image.shape[0]}, the frontend was built for "
                             f"{self.width}x{self.height}")
        return image

    def _push_skip(self, e: _Entry, reason: str) -> None:
        e.state = "done"
        e.skip_reason = reason
        e.frame = self._empty_frame(e.stamp)
        self._queue.append(e)

    def _empty_frame(self, stamp) -> TrackFrame:
        z2 = np.zeros((0, 2))
        return TrackFrame(stamp_ns=int(stamp), ids=np.zeros(0, np.int64), uv=np.zeros((0, 2), np.float32), xy=z2,
                          velocity=z2.copy(), score=np.zeros(0, np.float32), level=np.zeros(0, np.int32),
                          age=np.zeros(0, np.int32), stats=dict(self.stats))

    def _occupancy(self) -> np.ndarray:
        rows, cols = self.grid_shape
        occ = np.zeros((rows, cols), bool)
        uv = self._uv[self._active]
        if uv.shape[0]:
            r = np.clip((uv[:, 1] // self.config.detector.cell_height).astype(np.int64), 0, rows - 1)
            c = np.clip((uv[:, 0] // self.config.detector.cell_width).astype(np.int64), 0, cols - 1)
            occ[r, c] = True
        return occ

    def _add_detections(self, x, y, score, level) -> np.ndarray:
        """New tracks from detector cells; returns their slot indices."""
        valid = (level >= 0) & np.isfinite(x) & np.isfinite(y)
        cand = np.flatnonzero(valid)
        free = np.flatnonzero(~self._active)
        if cand.size == 0 or free.size == 0:
            return np.zeros(0, np.int64)
        cand = cand[np.argsort(-score[cand], kind="stable")][: free.size]
        slots = free[: cand.size]
        k = cand.size
        self._active[slots] = True
        self._ids[slots] = np.arange(self._next_id, self._next_id + k)
        self._next_id += k
        self._uv[slots, 0] = x[cand]
        self._uv[slots, 1] = y[cand]
        self._xy[slots] = self.camera.undistort(self._uv[slots])
        self._vel[slots] = 0.0
        self._score[slots] = score[cand]
        self._level[slots] = level[cand]
        self._age[slots] = 0
        self.stats["tracks_new"] += k
        self._n_live += k
        self.stats["redetections"] += 1
        return slots

    def _need_detection(self) -> bool:
        n = self._n_live
        return n == 0 or n < self.config.min_track_fraction * self.target

    def _finalize(self, e: _Entry, raw: dict | None) -> np.ndarray:
        """Apply one frame's tracking results (slot arrays) to the track state (common to both
        paths). Returns the mask of slots tracked in this frame."""
        c = self.config
        act = self._active
        n_act = int(np.count_nonzero(act))
        if raw is not None and n_act:
            st = raw["status"]
            ok = act & (st == TrackStatus.TRACKED)
            cnt = np.bincount(st[act].astype(np.int64), minlength=5)
            self.stats["lost_left_image"] += int(cnt[TrackStatus.LEFT_IMAGE])
            self.stats["lost_diverged"] += int(cnt[TrackStatus.DIVERGED])
            self.stats["lost_not_converged"] += int(cnt[TrackStatus.NOT_CONVERGED])
            if c.fb_check:
                d = np.linalg.norm(raw["fb_pos"] - self._uv, axis=1)
                good = (raw["fb_status"] == TrackStatus.TRACKED) & (d < c.fb_threshold)
                self.stats["fb_rejected"] += int(np.count_nonzero(ok & ~good))
                ok &= good
            idx = np.flatnonzero(ok)
            xy_new = np.asarray(raw["xy"][idx], np.float64)
            if c.ransac and idx.size >= 8:
                import cv2

                thr = c.ransac_threshold / float(self.camera.fx)
                F, mask = cv2.findFundamentalMat(self._xy[idx], xy_new, cv2.FM_RANSAC, thr, c.ransac_confidence)
                if F is not None and mask is not None:
                    inl = mask.ravel() != 0
                    self.stats["ransac_rejected"] += int(idx.size - np.count_nonzero(inl))
                    ok[idx[~inl]] = False
                    idx, xy_new = idx[inl], xy_new[inl]
            self.stats["tracked_total"] += int(cnt[TrackStatus.TRACKED])
            self.stats["iterations_total"] += int(raw["iterations"][act & (st == TrackStatus.TRACKED)].sum())
            self.stats["tracks_lost"] += n_act - int(idx.size)
            dt = (e.stamp - self._prev_stamp) * 1e-9 if self._prev_stamp is not None else 0.0
            if dt > 0:
                self._vel[idx] = (xy_new - self._xy[idx]) / dt
            self._uv[idx] = raw["pos"][idx]
            self._xy[idx] = xy_new
            self._age[idx] += 1
            self._active = ok
            self._n_live = int(idx.size)
        else:
            ok = np.zeros(self.S, bool)
            self.stats["tracks_lost"] += n_act
            self._active = ok
            self._n_live = 0
        self._prev_stamp = e.stamp
        return ok

    def _make_frame(self, e: _Entry, uv_r=None, xy_r=None, timings=None) -> TrackFrame:
        a = np.flatnonzero(self._active)
        fr = TrackFrame(stamp_ns=e.stamp, ids=self._ids[a].copy(), uv=self._uv[a].copy(), xy=self._xy[a].copy(),
                        velocity=self._vel[a].copy(), score=self._score[a].copy(), level=self._level[a].copy(),
                        age=self._age[a].copy(), timings=dict(timings or {}))
        if e.stereo:
            fr.uv_right = uv_r[a].astype(np.float32)
            fr.xy_right = xy_r[a].astype(np.float64)
        fr.stats = dict(self.stats)
        return fr

    def _stereo_check(self, xy_l, xy_r, uv_r_ok):
        """Epipolar consistency of stereo matches (returns bool mask)."""
        thr = self.config.stereo_epipolar_threshold
        if thr <= 0 or xy_l.shape[0] == 0:
            return uv_r_ok
        xl = np.concatenate([xy_l, np.ones((xy_l.shape[0], 1))], 1)
        xr = np.concatenate([xy_r, np.ones((xy_r.shape[0], 1))], 1)
        El = xl @ self._E_rl.T            # epipolar lines in the right image (normalised)
        num = np.abs(np.sum(xr * El, 1))
        den = np.hypot(El[:, 0], El[:, 1]) + 1e-12
        dist_px = num / den * float(self.camera_right.fx)
        good = uv_r_ok & (np.nan_to_num(dist_px, nan=np.inf) < thr)
        return good

    def _stereo_merge(self, uv_r, xy_r, pos, status, xy, slots):
        """Write stereo results for ``slots`` into uv_r / xy_r (NaN where not matched)."""
        ok = status[slots] == TrackStatus.TRACKED
        good = self._stereo_check(self._xy[slots], np.nan_to_num(xy[slots]), ok & np.isfinite(xy[slots]).all(1))
        self.stats["stereo_rejected"] += int(np.count_nonzero(ok & ~good))
        self.stats["stereo_matched"] += int(np.count_nonzero(good))
        uv_r[slots] = np.where(good[:, None], pos[slots], np.nan)
        xy_r[slots] = np.where(good[:, None], xy[slots], np.nan)

    # ------------------------------------------------------------------ CPU path
    def _cpu_frame(self, e: _Entry) -> None:
        t0 = time.perf_counter()
        pyr = build_pyramid_cpu(e.image, self.levels)
        raw = None
        idx = np.flatnonzero(self._active)
        if self._prev_pyr is not None and idx.size:
            uv0 = self._uv[idx]
            pred = predict_points(self.camera, e.R, uv0, self._xy[idx]) if e.R is not None else uv0
            res = self.tracker.track(self._prev_pyr, pyr, uv0, pred)
            S = self.S
            raw = {"status": np.full(S, TrackStatus.INACTIVE, np.int8), "pos": self._uv.copy(),
                   "iterations": np.zeros(S, np.int32), "xy": np.full((S, 2), np.nan)}
            raw["status"][idx] = res.status
            raw["pos"][idx] = res.pos
            raw["iterations"][idx] = res.iterations
            okm = res.status == TrackStatus.TRACKED
            raw["xy"][idx[okm]] = self.camera.undistort(res.pos[okm])
            if self.config.fb_check:
                raw["fb_status"] = np.full(S, TrackStatus.INACTIVE, np.int8)
                raw["fb_pos"] = np.full((S, 2), np.nan, np.float32)
                if okm.any():
                    back = self.tracker.track(pyr, self._prev_pyr, res.pos[okm], uv0[okm])
                    raw["fb_status"][idx[okm]] = back.status
                    raw["fb_pos"][idx[okm]] = back.pos
        self._finalize(e, raw)
        if self._need_detection():
            self.stats["detection_runs"] += 1
            feats = self.detector.detect(e.image, occupancy=self._occupancy())
            self._add_detections(feats.x, feats.y, feats.score, feats.level)
        uv_r = xy_r = None
        if e.stereo:
            S = self.S
            uv_r = np.full((S, 2), np.nan, np.float32)
            xy_r = np.full((S, 2), np.nan)
            a = np.flatnonzero(self._active)
            if a.size:
                pyr_r = build_pyramid_cpu(e.image_right, self.levels)
                R_rl = self.T_right_left[:3, :3]
                pred = predict_points(self.camera_right, R_rl.T, self._uv[a], self._xy[a])
                res = self.tracker.track(pyr, pyr_r, self._uv[a], pred)
                pos = np.full((S, 2), np.nan, np.float32)
                st = np.full(S, TrackStatus.INACTIVE, np.int8)
                xy = np.full((S, 2), np.nan)
                pos[a], st[a] = res.pos, res.status
                okr = res.status == TrackStatus.TRACKED
                xy[a[okr]] = self.camera_right.undistort(res.pos[okr])
                self._stereo_merge(uv_r, xy_r, pos, st, xy, a)
        self._prev_pyr = pyr
        e.frame = self._make_frame(e, uv_r, xy_r, {"cpu_s": time.perf_counter() - t0})
        e.image = e.image_right = None
        e.state = "done"

    # ------------------------------------------------------------------ GPU path
    def _init_gpu(self):
        import cupy as cp

        from vilib_ros._cuda import get_module
        from vilib_ros.frontend.pyramid import GpuPyramid

        S, W, H = self.S, self.width, self.height
        self._cp = cp
        mod = get_module("frontend")
        self._k_predict = mod.get_function("predict_rotation")
        self._k_undistort = mod.get_function("undistort_points")
        self._us = cp.cuda.Stream(non_blocking=True)
        self._cs = cp.cuda.Stream(non_blocking=True)
        self._pyrs = [GpuPyramid(W, H, self.levels) for _ in range(RING)]
        self._stereo_on = self.config.stereo and self.camera_right is not None
        self._pyrs_r = [GpuPyramid(W, H, self.levels) for _ in range(RING)] if self._stereo_on else []
        for p in self._pyrs + self._pyrs_r:
            self.tracker.level_table(p)

        def pinned(nbytes):
            mem = cp.cuda.alloc_pinned_memory(nbytes)
            return mem, np.frombuffer(mem, np.uint8, nbytes)

        self._pinned_keep = []
        self._img_host, self._img_host_r = [], []
        for _ in range(RING):
            m, a = pinned(W * H)
            self._pinned_keep.append(m)
            self._img_host.append(a.reshape(H, W))
            if self._stereo_on:
                m, a = pinned(W * H)
                self._pinned_keep.append(m)
                self._img_host_r.append(a.reshape(H, W))
        self._plx = _Layout(_param_fields(S))
        self._olx = _Layout(_out_fields(S))
        self._prm_host, self._out_host = [], []
        for _ in range(RING):
            m, a = pinned(self._plx.nbytes)
            self._pinned_keep.append(m)
            self._prm_host.append((a, self._plx.views(a)))
            m, a = pinned(self._olx.nbytes)
            self._pinned_keep.append(m)
            self._out_host.append((a, self._olx.views(a)))
        self._d_prm_buf = cp.zeros(self._plx.nbytes, cp.uint8)
        self._d_prm = self._plx.views(self._d_prm_buf)
        self._d_out_buf = cp.zeros(self._olx.nbytes, cp.uint8)
        self._d_out = self._olx.views(self._d_out_buf)
        self._d_cam = cp.asarray(_cam_params(self.camera))
        if self._stereo_on:
            self._d_cam_r = cp.asarray(_cam_params(self.camera_right))
            M = np.zeros(12, np.float32)
            M[:9] = self.T_right_left[:3, :3].ravel()
            M[9] = 1
            self._d_M_rl = cp.asarray(M)
        # detection buffers
        n = self.n_cells
        det = self.detector
        self._det_contig = (det.out_y.data.ptr == det.out_x.data.ptr + 4 * n and
                            det.out_score.data.ptr == det.out_x.data.ptr + 8 * n and
                            det.out_level.data.ptr == det.out_x.data.ptr + 12 * n)
        m, a = pinned(16 * n)
        self._pinned_keep.append(m)
        self._det_host = a
        m, a = pinned(n)
        self._pinned_keep.append(m)
        self._occ_host = a
        self._d_occ = cp.zeros(self.grid_shape, cp.uint8)
        self._ev_upload = [cp.cuda.Event() for _ in range(RING)]
        self._ev_start = [cp.cuda.Event() for _ in range(RING)]
        self._ev_done = [cp.cuda.Event() for _ in range(RING)]
        self._slot_last_use: list = [None] * RING
        self._frame_counter = 0
        self._graphs: dict = {}
        self.graph_error: str | None = None
        self._use_graph = bool(self.config.use_graph)

    def set_use_graph(self, on: bool) -> None:
        self._use_graph = bool(on)

    def memory_pool_used_bytes(self) -> int:
        return int(self._cp.get_default_memory_pool().used_bytes()) if self.device == "cuda" else 0

    def _memcpy(self, dst, src, nbytes, kind, stream):
        self._cp.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)

    def _upload(self, e: _Entry, image, image_right):
        cp = self._cp
        s = self._frame_counter % RING
        self._frame_counter += 1
        e.slot = s
        np.copyto(self._img_host[s], image)
        if image_right is not None:
            np.copyto(self._img_host_r[s], image_right)
        if self._slot_last_use[s] is not None:
            self._us.wait_event(self._slot_last_use[s])
        H2D = cp.cuda.runtime.memcpyHostToDevice
        self._memcpy(self._pyrs[s].levels[0].data.ptr, self._img_host[s].ctypes.data, self.width * self.height, H2D, self._us)
        if image_right is not None:
            self._memcpy(self._pyrs_r[s].levels[0].data.ptr, self._img_host_r[s].ctypes.data,
                         self.width * self.height, H2D, self._us)
        self._ev_upload[s].record(self._us)
        e.state = "uploaded"

    def _launch(self, kern, n, args, checked):
        launch(kern, ((n + 127) // 128, 1, 1), (128, 1, 1), args, stream=self._cs, checked=checked)

    def _enqueue_stereo(self, s, tmpl_pos, xy, active, active_value, build, checked):
        d, S = self._d_out, self.S
        pr = self._pyrs_r[s]
        if build:
            pr.launches(stream=self._cs, checked=checked)
        self._launch(self._k_predict, S, (tmpl_pos, xy, active, np.int32(active_value), self._d_M_rl, self._d_cam_r,
                                          np.int32(S), d["pred_r"]), checked)
        out = {k: d[f"st_{k}"] for k in ("pos", "status", "residual", "gain", "offset", "iterations")}
        self.tracker.track_device(self._pyrs[s], pr, tmpl_pos, d["pred_r"], active, S, out=out, stream=self._cs,
                                  active_value=active_value, checked=checked)
        self._launch(self._k_undistort, S, (d["st_pos"], d["st_status"], np.int32(0), self._d_cam_r, np.int32(S),
                                            d["st_xy"]), checked)

    def _enqueue_body(self, s, sp, stereo, checked):
        cp = self._cp
        S, d, p = self.S, self._d_out, self._d_prm
        cs = self._cs
        self._pyrs[s].launches(stream=cs, checked=checked)
        self._memcpy(self._d_prm_buf.data.ptr, self._prm_host[s][0].ctypes.data, self._plx.nbytes,
                     cp.cuda.runtime.memcpyHostToDevice, cs)
        self._launch(self._k_predict, S, (p["uv"], p["xy"], p["active"], np.int32(1), p["M"], self._d_cam,
                                          np.int32(S), d["pred"]), checked)
        fwd = {k: d[f"fwd_{k}"] for k in ("pos", "status", "residual", "gain", "offset", "iterations")}
        self.tracker.track_device(self._pyrs[sp], self._pyrs[s], p["uv"], d["pred"], p["active"], S, out=fwd,
                                  stream=cs, active_value=1, checked=checked)
        if self.config.fb_check:
            fb = {k: d[f"fb_{k}"] for k in ("pos", "status", "residual", "gain", "offset", "iterations")}
            self.tracker.track_device(self._pyrs[s], self._pyrs[sp], d["fwd_pos"], p["uv"], d["fwd_status"], S,
                                      out=fb, stream=cs, active_value=0, checked=checked)
        self._launch(self._k_undistort, S, (d["fwd_pos"], d["fwd_status"], np.int32(0), self._d_cam, np.int32(S),
                                            d["fwd_xy"]), checked)
        if stereo:
            self._enqueue_stereo(s, d["fwd_pos"], d["fwd_xy"], d["fwd_status"], 0, True, checked)
        self._memcpy(self._out_host[s][0].ctypes.data, self._d_out_buf.data.ptr, self._olx.nbytes,
                     cp.cuda.runtime.memcpyDeviceToHost, cs)

    def _graph_for(self, s, sp, stereo):
        key = (s, sp, stereo)
        g = self._graphs.get(key)
        if g is not None or not self._use_graph or self.graph_error is not None:
            return g
        cs = self._cs
        try:
            cs.synchronize()
            cs.begin_capture()
            try:
                self._enqueue_body(s, sp, stereo, checked=False)
            finally:
                g = cs.end_capture()
        except Exception as exc:
            self.graph_error = f"{exc.__class__.__name__}: {exc}"
            log.warning("CUDA graph capture failed, launching kernels directly: %s", self.graph_error)
            try:
                self._cp.cuda.runtime.getLastError()
            except Exception:
                pass
            return None
        self._graphs[key] = g
        return g

    def _enqueue_compute(self, e: _Entry):
        s = e.slot
        sp = self._prev_slot if self._prev_slot >= 0 else (s - 1) % RING
        # per-frame parameters into this slot's pinned buffer
        _, pv = self._prm_host[s]
        pv["uv"][:] = self._uv
        pv["xy"][:] = self._xy
        pv["active"][:] = self._active if self._prev_slot >= 0 else False
        if e.R is not None:
            pv["M"][:9] = e.R.T.ravel()
            pv["M"][9] = 1.0
        else:
            pv["M"][9] = 0.0
        cs = self._cs
        cs.wait_event(self._ev_upload[s])
        self._ev_start[s].record(cs)
        g = self._graph_for(s, sp, e.stereo)
        if g is not None:
            g.launch(cs)
            self.stats["graph_launches"] += 1
        else:
            self._enqueue_body(s, sp, e.stereo, checked=True)
        self._ev_done[s].record(cs)
        self._slot_last_use[s] = self._ev_done[s]
        self._slot_last_use[sp] = self._ev_done[s]
        e.state = "computing"
        e.image = (s, sp)
        self._computing = e

    def _pump(self, block: bool) -> None:
        if self.device != "cuda":
            return
        if self._computing is not None:
            if not block:
                return
            comp, self._computing = self._computing, None
            self._gpu_finalize(comp)
        if self._uploaded:
            self._enqueue_compute(self._uploaded.popleft())

    def _gpu_finalize(self, e: _Entry):
        s, sp = e.image
        self._ev_done[s].synchronize()
        gpu_s = self._cp.cuda.get_elapsed_time(self._ev_start[s], self._ev_done[s]) * 1e-3
        _, o = self._out_host[s]
        had_prev = self._prev_slot >= 0
        raw = None
        if had_prev:
            raw = {"status": o["fwd_status"], "pos": o["fwd_pos"], "iterations": o["fwd_iterations"],
                   "xy": o["fwd_xy"]}
            if self.config.fb_check:
                raw["fb_status"], raw["fb_pos"] = o["fb_status"], o["fb_pos"]
        self._finalize(e, raw)
        uv_r = xy_r = None
        if e.stereo:
            uv_r = np.full((self.S, 2), np.nan, np.float32)
            xy_r = np.full((self.S, 2), np.nan)
            tracked = np.flatnonzero(self._active)
            if tracked.size and had_prev:
                self._stereo_merge(uv_r, xy_r, o["st_pos"], o["st_status"], o["st_xy"].astype(np.float64), tracked)
        t_det = 0.0
        if self._need_detection():
            self.stats["detection_runs"] += 1
            t0 = time.perf_counter()
            new = self._gpu_detect(s)
            if e.stereo and new.size:
                self._gpu_stereo_new(s, new, uv_r, xy_r)
            t_det = time.perf_counter() - t0
        self._prev_slot = s
        e.frame = self._make_frame(e, uv_r, xy_r, {"gpu_s": gpu_s, "detect_s": t_det})
        e.image = None
        e.state = "done"

    def _gpu_detect(self, s) -> np.ndarray:
        cp = self._cp
        cs = self._cs
        n = self.n_cells
        self._occ_host[:] = self._occupancy().reshape(-1)
        self._memcpy(self._d_occ.data.ptr, self._occ_host.ctypes.data, n, cp.cuda.runtime.memcpyHostToDevice, cs)
        x, y, sc, lv = self.detector.detect_device(self._pyrs[s], self._d_occ, stream=cs)
        D2H = cp.cuda.runtime.memcpyDeviceToHost
        if self._det_contig:
            self._memcpy(self._det_host.ctypes.data, x.data.ptr, 16 * n, D2H, cs)
        else:
            for i, a in enumerate((x, y, sc, lv)):
                self._memcpy(self._det_host.ctypes.data + 4 * n * i, a.data.ptr, 4 * n, D2H, cs)
        cs.synchronize()
        h = self._det_host.view(np.float32)
        return self._add_detections(h[:n].copy(), h[n:2 * n].copy(), h[2 * n:3 * n].copy(),
                                    h[3 * n:].view(np.int32).copy())

    def _gpu_stereo_new(self, s, slots, uv_r, xy_r):
        """Stereo for tracks born in this frame (synchronous, detection frames only)."""
        cp = self._cp
        cs = self._cs
        _, pv = self._prm_host[s]
        pv["uv"][:] = self._uv
        pv["xy"][:] = self._xy
        pv["active"][:] = 0
        pv["active"][slots] = 1
        self._memcpy(self._d_prm_buf.data.ptr, self._prm_host[s][0].ctypes.data, self._plx.nbytes,
                     cp.cuda.runtime.memcpyHostToDevice, cs)
        p, d = self._d_prm, self._d_out
        self._enqueue_stereo(s, p["uv"], p["xy"], p["active"], 1, False, True)
        _, o = self._out_host[s]
        st_names = [f"st_{k}" for k in ("pos", "xy", "status")]
        D2H = cp.cuda.runtime.memcpyDeviceToHost
        for nm in st_names:
            self._memcpy(o[nm].ctypes.data, d[nm].data.ptr, o[nm].nbytes, D2H, cs)
        cs.synchronize()
        self._stereo_merge(uv_r, xy_r, o["st_pos"], o["st_status"], o["st_xy"].astype(np.float64), slots)

    # ------------------------------------------------------------------ live configuration
    # (the node's contract: ``apply_config`` applies scalar changes live, ``first_id`` / ``next_id``
    # keep track ids unique across a rebuild)
    _LIVE_FIELDS = {
        "detector": ("threshold",),
        "tracker": ("max_iterations", "eps", "min_eigen", "max_residual", "osc_eps", "osc_growth"),
        "": ("min_track_fraction", "fb_threshold", "ransac", "ransac_threshold", "ransac_confidence",
             "imu_prediction", "imu_max_gap_ms", "stereo_epipolar_threshold", "use_graph"),
    }
    _init_without_first_id = __init__

    def __init__(self, camera, config: FrontendConfig | None = None, device: str = "auto",
                 camera_right=None, T_right_left=None, first_id: int = 0):
        self._next_id = int(first_id)
        FeatureTracker._init_without_first_id(self, camera, config, device, camera_right, T_right_left)

    @property
    def next_id(self) -> int:
        """The id the next new track gets (pass it as ``first_id`` to a rebuilt tracker)."""
        return int(self._next_id)

    def apply_config(self, config: FrontendConfig) -> bool:
        """Apply ``config`` live when it differs from the current one only in scalars the
        kernels take per frame (True); False when a structural field differs (nothing is
        changed then: the caller rebuilds the tracker with ``first_id=next_id``)."""
        import dataclasses

        config = config.validate()
        old = self.config

        def changed(a, b):
            return {f.name for f in dataclasses.fields(a)
                    if not dataclasses.is_dataclass(getattr(a, f.name)) and getattr(a, f.name) != getattr(b, f.name)}

        diffs = {"detector": changed(old.detector, config.detector), "tracker": changed(old.tracker, config.tracker),
                 "": changed(old, config)}
        if any(not d <= set(self._LIVE_FIELDS[k]) for k, d in diffs.items()):
            return False
        self.config = config
        self.detector.config = config.detector
        self.tracker.config = config.tracker
        if self.device == "cuda":
            self._graphs.clear()              # kernel arguments are baked into captured graphs
            getattr(self.detector, "_graphs", {}).clear()
            self._use_graph = bool(config.use_graph)
        return True
