"""Ground-truth feature tracks for testing and benchmarking the backend without images.

Three sources, all producing :class:`vilib_ros.types.TrackFrame` objects as the frontend would:

* :class:`MiniSim` - a minimal simulation of its own: a room of random 3D points, an analytic
  smooth trajectory (optionally starting at rest), and a 200 Hz IMU with EuRoC-like white noise and
  bias random walk;
* :func:`synthetic_track_frames` - the points of a generated sequence's scene
  (:class:`~.sequence.SyntheticSequence`) seen along its trajectory, hidden ones left out;
* :func:`tracks_from_points` - projections of any set of world points through any pose function.

Tracks are ground-truth projections with Gaussian pixel noise (default 1 px), realistic
dropouts (each track is lost with a small per-frame probability and gets a new id when it
is re-acquired), a per-frame cap on the number of tracks and an optional fraction of gross
outliers, so that the estimator's gating and landmark lifecycle are exercised.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..camera import CameraModel, euroc_cam0
from ..datasets.common import EUROC_IMU_NOISE
from ..types import TrackFrame

GRAVITY = 9.81


def _skew(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0.0]])


def so3_exp(w: np.ndarray) -> np.ndarray:
    th = float(np.linalg.norm(w))
    K = _skew(w)
    if th < 1e-10:
        return np.eye(3) + K
    return np.eye(3) + np.sin(th) / th * K + (1 - np.cos(th)) / th**2 * K @ K


def so3_log(R: np.ndarray) -> np.ndarray:
    c = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    th = np.arccos(c)
    v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if th < 1e-8:
        return 0.5 * v
    return th / (2 * np.sin(th)) * v


def rpy_to_R(roll, pitch, yaw):
    cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    return Rz @ Ry @ Rx


def stereo_pair(cam0: CameraModel | None = None, baseline: float = 0.11) -> tuple[CameraModel, CameraModel]:
    """An undistorted EuRoC-like rectified stereo pair: cam1 sits ``baseline`` m along cam0's x."""
    c = cam0 or euroc_cam0()
    c0 = CameraModel(c.width, c.height, c.fx, c.fy, c.cx, c.cy, "none", np.zeros(4), c.T_BS.copy())
    T_c0_c1 = np.eye(4)
    T_c0_c1[0, 3] = baseline
    c1 = CameraModel(c.width, c.height, c.fx, c.fy, c.cx, c.cy, "none", np.zeros(4), c0.T_BS @ T_c0_c1)
    return c0, c1


@dataclass
class MiniSimConfig:
    duration_s: float = 60.0
    rate_hz: float = 20.0
    imu_rate_hz: float = 200.0
    static_s: float = 1.0          # at rest at the start (0 = starts moving)
    n_points: int = 3000
    room: tuple = (12.0, 12.0, 5.0)
    pixel_sigma: float = 1.0
    drop_prob: float = 0.03       # per-track, per-frame probability of losing a track
    max_tracks: int = 150
    outlier_fraction: float = 0.01
    max_depth: float = 15.0
    imu_noise: bool = True
    bias_g0: tuple = (0.003, -0.002, 0.004)
    bias_a0: tuple = (0.05, -0.04, 0.06)
    stereo: bool = True
    seed: int = 0


class MiniSim:
    """Analytic trajectory in a textured-room point cloud, with IMU and tracks."""

    def __init__(self, config: MiniSimConfig | None = None):
        self.config = cfg = config or MiniSimConfig()
        rng = np.random.default_rng(cfg.seed)
        self.cam0, self.cam1 = stereo_pair()
        if not cfg.stereo:
            self.cam1 = None
        # Points on the walls, floor and ceiling of a box centred on the origin.
        lx, ly, lz = cfg.room
        n = cfg.n_points
        face = rng.integers(0, 6, n)
        u, v = rng.uniform(-0.5, 0.5, n), rng.uniform(-0.5, 0.5, n)
        pts = np.zeros((n, 3))
        for f in range(6):
            m = face == f
            axis, sign = f // 2, (1 if f % 2 else -1)
            dims = [lx, ly, lz]
            others = [a for a in range(3) if a != axis]
            pts[m, axis] = sign * dims[axis] / 2 * (1 + rng.uniform(-0.05, 0.0, m.sum()))
            pts[m, others[0]] = u[m] * dims[others[0]]
            pts[m, others[1]] = v[m] * dims[others[1]]
        pts[:, 2] += lz / 2 - 1.0   # floor at z = -1, body flies around z ~ 0..1
        self.points = pts
        self.t0_ns = 1_000_000_000_000
        self.frame_stamps_ns = self.t0_ns + np.round(
            np.arange(0, cfg.duration_s, 1.0 / cfg.rate_hz) * 1e9).astype(np.int64)
        self._imu = None

    # ---- trajectory ----
    def _envelope(self, t):
        s = self.config.static_s
        if s <= 0:
            return 1.0
        x = np.clip((t - s) / 1.5, 0.0, 1.0)
        return x * x * x * (10 - 15 * x + 6 * x * x)   # smootherstep

    def _pose_t(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        e = self._envelope(t)
        s = self.config.static_s
        tm = t - s if s <= 0 else max(t - s, 0.0)   # moving start: motion defined before t=0 too
        p = e * np.array([2.5 * np.sin(0.31 * tm), 2.0 * np.sin(0.23 * tm + 0.4) - 2.0 * np.sin(0.4),
                          0.5 * np.sin(0.5 * tm)])
        yaw = e * (0.9 * np.sin(0.17 * tm) + 0.35 * tm * 0.3)
        roll = e * 0.12 * np.sin(0.7 * tm)
        pitch = e * 0.10 * np.sin(0.55 * tm + 1.0)
        return rpy_to_R(roll, pitch, yaw), p

    def pose_wb(self, t_ns: int) -> np.ndarray:
        R, p = self._pose_t((int(t_ns) - self.t0_ns) * 1e-9)
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = R, p
        return T

    def velocity(self, t: float) -> np.ndarray:
        h = 1e-4
        return (self._pose_t(t + h)[1] - self._pose_t(t - h)[1]) / (2 * h)

    # ---- IMU ----
    def imu(self):
        """(stamps_ns (M,), data (M,6) [wx wy wz ax ay az], true_bg (M,3), true_ba (M,3))."""
        if self._imu is not None:
            return self._imu
        cfg = self.config
        rng = np.random.default_rng(cfg.seed + 1)
        dt = 1.0 / cfg.imu_rate_hz
        ts = np.arange(-1.0, cfg.duration_s + 0.5, dt)   # IMU starts 1 s before the camera
        stamps = self.t0_ns + np.round(ts * 1e9).astype(np.int64)
        h = 1e-3
        data = np.zeros((len(ts), 6))
        g = np.array([0, 0, -GRAVITY])
        for i, t in enumerate(ts):
            R, p = self._pose_t(t)
            Rm, pm = self._pose_t(t - h)
            Rp, pp = self._pose_t(t + h)
            acc_w = (pp - 2 * p + pm) / h**2
            w = so3_log(Rm.T @ Rp) / (2 * h)
            data[i, :3] = w
            data[i, 3:] = R.T @ (acc_w - g)
        nz = EUROC_IMU_NOISE
        bg = np.tile(np.asarray(cfg.bias_g0, float), (len(ts), 1))
        ba = np.tile(np.asarray(cfg.bias_a0, float), (len(ts), 1))
        if cfg.imu_noise:
            bg += np.cumsum(rng.normal(0, nz["gyroscope_random_walk"] * np.sqrt(dt), (len(ts), 3)), axis=0)
            ba += np.cumsum(rng.normal(0, nz["accelerometer_random_walk"] * np.sqrt(dt), (len(ts), 3)), axis=0)
            data[:, :3] += bg + rng.normal(0, nz["gyroscope_noise_density"] / np.sqrt(dt), (len(ts), 3))
            data[:, 3:] += ba + rng.normal(0, nz["accelerometer_noise_density"] / np.sqrt(dt), (len(ts), 3))
        self._imu = (stamps, data, bg, ba)
        return self._imu

    def groundtruth(self):
        """(t_ns, p (K,3), q_xyzw (K,4)) at the frame stamps."""
        from scipy.spatial.transform import Rotation

        Ts = [self.pose_wb(t) for t in self.frame_stamps_ns]
        p = np.array([T[:3, 3] for T in Ts])
        q = Rotation.from_matrix(np.array([T[:3, :3] for T in Ts])).as_quat()
        return self.frame_stamps_ns.copy(), p, q

    def track_frames(self):
        cfg = self.config
        return tracks_from_points(self.points, self.pose_wb, self.frame_stamps_ns, self.cam0, self.cam1,
                                  pixel_sigma=cfg.pixel_sigma, drop_prob=cfg.drop_prob,
                                  max_tracks=cfg.max_tracks, outlier_fraction=cfg.outlier_fraction,
                                  max_depth=cfg.max_depth, seed=cfg.seed + 2)

    def events(self):
        """Time-ordered ("imu", t, gyro, acc) and ("frame", t, TrackFrame) tuples."""
        stamps, data, _, _ = self.imu()
        frames = list(self.track_frames())
        ev = [("imu", int(t), d[:3], d[3:]) for t, d in zip(stamps, data)]
        ev += [("frame", int(f.stamp_ns), f) for f in frames]
        ev.sort(key=lambda e: (e[1], 0 if e[0] == "imu" else 1))
        return ev


def tracks_from_points(points_w, pose_wb, stamps_ns, cam0: CameraModel, cam1: CameraModel | None = None,
                       pixel_sigma=1.0, drop_prob=0.03, max_tracks=150, outlier_fraction=0.0,
                       max_depth=15.0, min_depth=0.3, border=8, seed=0, occlusion=None):
    """Yield one TrackFrame per stamp: noisy projections of visible world points.

    ``pose_wb(t_ns) -> 4x4``. A point keeps its track id while it stays visible and is not
    dropped; a dropped point waits 5 frames before it can be re-acquired with a new id.
    ``occlusion(k, uv, depth) -> bool mask`` may reject points hidden in the rendered scene.
    """
    rng = np.random.default_rng(seed)
    pts = np.asarray(points_w, float)
    n = len(pts)
    track_id = -np.ones(n, np.int64)
    cooldown = np.zeros(n, np.int64)
    next_id = 0
    T_BS0 = cam0.T_BS
    T_BS1 = cam1.T_BS if cam1 is not None else None
    for k, t in enumerate(stamps_ns):
        T_wb = pose_wb(int(t))
        T_wc = T_wb @ T_BS0
        Rcw, tcw = T_wc[:3, :3].T, -T_wc[:3, :3].T @ T_wc[:3, 3]
        pc = pts @ Rcw.T + tcw
        z = pc[:, 2]
        ok = (z > min_depth) & (z < max_depth)
        uv = np.full((n, 2), np.nan)
        uv[ok] = cam0.project(pc[ok])
        ok &= (uv[:, 0] >= border) & (uv[:, 0] < cam0.width - border) & (uv[:, 1] >= border) & (uv[:, 1] < cam0.height - border)
        if occlusion is not None:
            ok &= occlusion(k, uv, z)
        # lose tracks: invisible or random dropout
        live = track_id >= 0
        lost = live & (~ok | (rng.random(n) < drop_prob))
        track_id[lost] = -1
        cooldown[lost] = 5
        cooldown[cooldown > 0] -= 1
        live = track_id >= 0
        n_live = int(live.sum())
        cand = np.flatnonzero(ok & ~live & (cooldown == 0))
        n_new = max(0, min(max_tracks - n_live, len(cand)))
        if n_live < 0.7 * max_tracks and n_new > 0:   # redetect like the frontend (below a fraction)
            new = rng.choice(cand, n_new, replace=False)
            track_id[new] = np.arange(next_id, next_id + n_new)
            next_id += n_new
        sel = np.flatnonzero(track_id >= 0)
        uvs = uv[sel] + rng.normal(0, pixel_sigma, (len(sel), 2))
        if outlier_fraction > 0 and len(sel):
            bad = rng.random(len(sel)) < outlier_fraction
            uvs[bad] += rng.uniform(-40, 40, (int(bad.sum()), 2))
        xy = cam0.undistort(uvs)
        uv_r = xy_r = None
        if cam1 is not None:
            T_wc1 = T_wb @ T_BS1
            R1, t1 = T_wc1[:3, :3].T, -T_wc1[:3, :3].T @ T_wc1[:3, 3]
            pc1 = pts[sel] @ R1.T + t1
            uv_r = np.full((len(sel), 2), np.nan)
            vis = pc1[:, 2] > min_depth
            uv_r[vis] = cam1.project(pc1[vis])
            vis &= (uv_r[:, 0] >= 0) & (uv_r[:, 0] < cam1.width) & (uv_r[:, 1] >= 0) & (uv_r[:, 1] < cam1.height)
            uv_r[~vis] = np.nan
            noise = rng.normal(0, pixel_sigma, (len(sel), 2))
            noise[:, 1] = uvs[:, 1] - uv[sel, 1]        # rectified: same row noise as the left image
            uv_r = uv_r + noise
            xy_r = np.full((len(sel), 2), np.nan)
            xy_r[vis] = cam1.undistort(uv_r[vis])
            uv_r = uv_r.astype(np.float32)
        m = len(sel)
        yield TrackFrame(stamp_ns=int(t), ids=track_id[sel].copy(), uv=uvs.astype(np.float32), xy=xy,
                         velocity=np.zeros((m, 2)), score=np.ones(m, np.float32), level=np.zeros(m, np.int32),
                         age=np.zeros(m, np.int32), uv_right=uv_r, xy_right=xy_r)


def scene_points(seq, density: float = 12.0, seed: int = 0) -> np.ndarray:
    """Points sampled uniformly (``density`` per m^2) on every textured quad of a
    :class:`~.sequence.SyntheticSequence` scene (walls, floor, ceiling, boxes)."""
    rng = np.random.default_rng(seed)
    pts = []
    for q in seq.scene.quads:
        U, V = np.asarray(q.U, float), np.asarray(q.V, float)
        area = float(np.linalg.norm(np.cross(U, V)))
        n = max(1, int(round(area * density)))
        s, t = rng.random(n), rng.random(n)
        P = np.asarray(q.origin, float) + s[:, None] * U + t[:, None] * V
        # lift off the surface by 1 mm towards the normal so the ray caster sees them
        P += 1e-3 * np.asarray(q.normal, float)
        pts.append(P)
    return np.concatenate(pts)


def synthetic_track_frames(seq, pixel_sigma: float = 1.0, drop_prob: float = 0.03, max_tracks: int = 150,
                           outlier_fraction: float = 0.01, density: float = 12.0, seed: int = 0):
    """Ground-truth projections of the synthetic scene's points (:func:`scene_points`) for every
    frame of ``seq`` with pixel noise, dropouts and outliers; points hidden behind other
    surfaces (ray cast against the scene) are not observed, nor any in a blank frame
    (``blank_intervals_s``). Returns a list of TrackFrames."""
    pts = scene_points(seq, density, seed)
    cam0 = seq.camera(0)
    cam1 = seq.camera(1) if seq.num_cameras > 1 else None

    def occlusion(k, uv, z):
        ok = np.isfinite(uv[:, 0])
        vis = np.zeros(len(uv), bool)
        if seq.is_blank(k):
            return vis
        idx = np.flatnonzero(ok)
        if len(idx):
            c = seq.pose_wc(k, 0)[:3, 3]
            lam, _ = seq.scene.raycast(c, pts[idx] - c)
            vis[idx] = lam >= 1 - 1e-4
        return vis

    return list(tracks_from_points(pts, seq.pose_wb, seq.frame_stamps_ns, cam0, cam1, pixel_sigma=pixel_sigma,
                                   drop_prob=drop_prob, max_tracks=max_tracks, outlier_fraction=outlier_fraction,
                                   seed=seed + 7, occlusion=occlusion))
