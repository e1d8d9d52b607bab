"""Initial gravity direction, velocity and gyro bias.

* From rest (:func:`static_init`): the IMU window around the first frame is tested for rest
  (gyro and accelerometer standard deviations and the gyro mean below thresholds). At rest the
  accelerometer measures the reaction to gravity, so roll and pitch follow from the averaged
  specific force; yaw is set to 0 (unobservable); the gyro bias is the averaged gyro; the
  velocity is zero. The accelerometer bias cannot be separated from a tilt at rest and starts
  at zero (the smoother estimates it once the body moves).
* Moving start, stereo (:func:`dynamic_init_stereo`): over the first frames (default 20, 1 s)
  the body positions p_k relative to the first body frame come from multi-view structure from
  motion over the window (as for mono, below) scaled to metres by the median ratio of the first
  frame's stereo depths to the triangulated depths; where that fails (little parallax), from PnP
  of the first frame's stereo-triangulated points. The IMU, preintegrated from the first frame, gives the
  gravity-free double integral alpha_k (``deltaPij``) in the first body frame. With the unknown
  initial velocity v0 and gravity g0 (both in the first body frame):
  ``p_k - alpha_k = v0 t_k + 0.5 g0 t_k^2`` - linear least squares for (v0, g0); then |g0| is fixed
  to 9.81 (Gauss-Newton on the gravity sphere) and v0 re-solved. Before that the gyro bias is
  estimated from the PnP rotations vs the preintegrated gyro rotations (Gauss-Newton, numerical
  Jacobian), and alpha_k is preintegrated with it. Roll/pitch come from g0 (yaw 0).
* Moving start, mono (:func:`dynamic_init_mono`): up-to-scale poses over ~1 s (essential
  matrix first/last frame, triangulation, PnP in between) and the same linear system with the
  scale s as a seventh unknown (VINS-Mono-style visual-inertial alignment, without the gyro
  bias refinement).
* Fallback when the alignment keeps failing (too little parallax/points for 4 windows):
  gravity from the averaged accelerometer (biased by the mean linear acceleration), zero
  velocity with a loose prior (``dynamic_accel``).

:class:`Initialiser`, the estimator's member, keeps the frames until one of these succeeds and gives
the state to start the smoother from. After a hole in the IMU (:meth:`Initialiser.restart`) it
initialises again on the IMU and frames after the hole only, anchored at the last keyframe's position
and heading (gravity direction, velocity and gyro bias are estimated afresh): the vehicle moved by an
unknown amount during the hole, so the trajectory continues from where it was last known, with a
fresh velocity, instead of from an integration of nothing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ._gtsam import load as load_gtsam
from .config import BackendConfig
from .imu import ImuBuffer
from .rig import CameraRig

log = logging.getLogger(__name__)
est_log = logging.getLogger("vilib_ros.backend.estimator")   # the estimator's parts say what they do there
RANSAC_SEED = 20201025


@dataclass
class InitResult:
    R_wb: np.ndarray
    v_w: np.ndarray
    bg: np.ndarray
    ba: np.ndarray
    kind: str           # 'static' | 'dynamic_stereo' | 'dynamic_mono' | 'dynamic_accel'
    v_sigma: float      # prior sigma on the velocity (m/s)
    rot_sigma: float = 0.02   # prior sigma on roll and pitch (rad)


def gravity_aligned_rotation(f_body: np.ndarray) -> np.ndarray:
    """R_wb with yaw 0 such that R_wb @ f_body points along +z (f_body: specific force at rest,
    i.e. minus gravity, in body coordinates)."""
    ax, ay, az = f_body / np.linalg.norm(f_body)
    roll = np.arctan2(ay, az)
    pitch = np.arctan2(-ax, np.hypot(ay, az))
    cr, sr, cp, sp = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch)
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    return Ry @ Rx


def is_static(imu: np.ndarray, cfg, gravity=9.81, tolerance=1.0) -> bool:
    """Rest test on an IMU window: the window is cut into 10 blocks whose means remove the
    rotor vibration of a multicopter standing on the ground (EuRoC: 0.8 m/s^2 accelerometer std);
    at rest the block means barely vary, |mean specific force| = g and |mean gyro| is a
    plausible bias."""
    if len(imu) < 20:
        return False
    n = len(imu) // 10
    blocks = imu[:n * 10].reshape(10, n, 6).mean(axis=1)
    g, a = blocks[:, :3], blocks[:, 3:]
    return bool(np.all(g.std(axis=0) < tolerance * cfg.static_gyro_std)
                and np.all(a.std(axis=0) < tolerance * cfg.static_acc_std)
                and np.linalg.norm(g.mean(axis=0)) < cfg.static_gyro_mean
                and abs(np.linalg.norm(a.mean(axis=0)) - gravity) < 0.5)


def static_init(imu: np.ndarray) -> InitResult:
    f = imu[:, 3:].mean(axis=0)
    return InitResult(gravity_aligned_rotation(f), np.zeros(3), imu[:, :3].mean(axis=0), np.zeros(3),
                      "static", 0.01, 0.02)


def accel_init(imu: np.ndarray) -> InitResult:
    f = imu[:, 3:].mean(axis=0)
    return InitResult(gravity_aligned_rotation(f), np.zeros(3), np.zeros(3), np.zeros(3), "dynamic_accel", 1.0, 0.1)


def stereo_triangulate(xy_l: np.ndarray, xy_r: np.ndarray, T_c0_c1: np.ndarray):
    """Midpoint triangulation of left/right normalised rays -> (points in cam0 (N,3), ok (N,))."""
    n = len(xy_l)
    f0 = np.column_stack([xy_l, np.ones(n)])
    f1 = np.column_stack([xy_r, np.ones(n)]) @ T_c0_c1[:3, :3].T
    t = T_c0_c1[:3, 3]
    # solve s f0 - u f1 = t in the least-squares sense for each ray pair
    a = np.einsum("ij,ij->i", f0, f0)
    b = np.einsum("ij,ij->i", f0, f1)
    c = np.einsum("ij,ij->i", f1, f1)
    d = f0 @ t
    e = f1 @ t
    den = a * c - b * b
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (c * d - b * e) / den
        u = (b * d - a * e) / den
    P = 0.5 * (s[:, None] * f0 + (u[:, None] * f1 + t))
    ok = np.isfinite(P).all(axis=1) & (s > 0) & (u > 0) & (np.abs(den) > 1e-12)
    return P, ok


def dynamic_init_stereo(frames, imu_buffer, cam0, cam1, params, gravity=9.81, min_points=12):
    """Solve (v0, g0) from the first frames (see module docstring). Returns InitResult or None."""
    import cv2

    cv2.setRNGSeed(RANSAC_SEED)
    if len(frames) < 3:
        return None
    T_BS0 = cam0.T_BS
    T_c0_c1 = np.linalg.inv(T_BS0) @ cam1.T_BS
    f0 = frames[0]
    if f0.xy_right is None:
        return None
    ok_r = np.isfinite(f0.xy_right).all(axis=1)
    P, ok = stereo_triangulate(f0.xy[ok_r], f0.xy_right[ok_r], T_c0_c1)
    ok &= (P[:, 2] > 0.3) & (P[:, 2] < 25)
    ids0 = f0.ids[ok_r][ok]
    P = P[ok]
    if len(ids0) < min_points:
        return None
    sfm = _sfm_window(frames, cam0) if len(frames) >= 5 else None
    if sfm is not None:
        # metric scale of the multi-view structure from the first frame's stereo depths
        common, ia, ib = np.intersect1d(ids0, sfm["ids"], return_indices=True)
        if len(common) >= min_points:
            ratio = P[ia, 2] / sfm["X"][ib, 2]
            scale = float(np.median(ratio))
            if scale > 0 and np.isfinite(scale):
                stamps, R_vis = sfm["stamps"], sfm["R_vis"]
                pos = [scale * a + c for a, c in zip(sfm["a"], sfm["c"])]
                return _finish_stereo(imu_buffer, params, f0.stamp_ns, stamps, pos, R_vis, gravity, "sfm")
    lut = {int(i): k for k, i in enumerate(ids0)}
    stamps, pos, R_vis = [], [], []
    for fr in frames[1:]:
        idx = [(lut[int(i)], j) for j, i in enumerate(fr.ids) if int(i) in lut]
        if len(idx) < min_points:
            continue
        obj = P[[a for a, _ in idx]]
        img = fr.xy[[b for _, b in idx]]
        okp, rvec, tvec, inl = cv2.solvePnPRansac(obj, img, np.eye(3), None, reprojectionError=2.0 / cam0.fx,
                                                  iterationsCount=100, flags=cv2.SOLVEPNP_ITERATIVE)
        if not okp or inl is None or len(inl) < min_points:
            continue
        R, _ = cv2.Rodrigues(rvec)
        T_ck_c0 = np.eye(4)
        T_ck_c0[:3, :3], T_ck_c0[:3, 3] = R, tvec.ravel()
        T_b0_bk = T_BS0 @ np.linalg.inv(T_ck_c0) @ np.linalg.inv(T_BS0)
        stamps.append(fr.stamp_ns)
        pos.append(T_b0_bk[:3, 3])
        R_vis.append(T_b0_bk[:3, :3])
    if len(stamps) < 3:
        return None
    return _finish_stereo(imu_buffer, params, f0.stamp_ns, stamps, pos, R_vis, gravity, "pnp")


def _finish_stereo(imu_buffer, params, t0, stamps, pos, R_vis, gravity, how):
    bg = estimate_gyro_bias(imu_buffer, params, t0, stamps, R_vis)
    snaps = preintegrate_snapshots(imu_buffer, params, t0, stamps, bg)
    sol = _lsq_gravity_velocity(None, pos, [a for _, a, _ in snaps], [t for _, _, t in snaps], gravity)
    if sol is None:
        return None
    _, v0, g0 = sol
    log.debug("stereo alignment (%s): v0 %s g0 %s bg %s", how, v0, g0, bg)
    R_wb = gravity_aligned_rotation(-g0)
    return InitResult(R_wb, R_wb @ v0, bg, np.zeros(3), "dynamic_stereo", 0.1, 0.03)


def _lsq_gravity_velocity(A_s, c, alpha, tk, gravity, iterations=5, extra=None, extra_prior=None,
                          min_scale_snr=5.0):
    """Solve ``s*A_s + c - alpha = v0 t + 0.5 g0 t^2`` for (s, v0, g0) (s omitted if A_s is None):
    first unconstrained, then with |g0| = gravity by Gauss-Newton on the 2-D tangent space of
    the gravity sphere (VINS-Mono's RefineGravity). Rows are stacked per frame (3 each)."""
    ns = 0 if A_s is None else 1

    def system(g_fixed=None, basis=None):
        rows, rhs = [], []
        for k in range(len(tk)):
            t = tk[k]
            blk = [t * np.eye(3)]
            r = c[k] - alpha[k]
            if g_fixed is None:
                blk.append(0.5 * t * t * np.eye(3))
            else:
                blk.append(0.5 * t * t * basis)
                r = r - 0.5 * t * t * g_fixed
            if ns:
                blk.insert(0, -np.asarray(A_s[k])[:, None])
            if extra is not None:
                blk.append(extra[k])
            rows.append(np.hstack(blk))
            rhs.append(r)
        A, b = np.vstack(rows), np.concatenate(rhs)
        if extra is not None:
            m = extra[0].shape[1]
            P = np.zeros((m, A.shape[1]))
            P[:, -m:] = np.eye(m) / extra_prior
            A, b = np.vstack([A, P]), np.concatenate([b, np.zeros(m)])
        return A, b

    A, b = system()
    x, *_ = np.linalg.lstsq(A, b, rcond=None)
    g0 = x[ns + 3:ns + 6]
    gn = np.linalg.norm(g0)
    if not (0.5 * gravity < gn < 1.5 * gravity):
        return None
    g0 = g0 / gn * gravity
    y = x
    for _ in range(iterations):
        n = g0 / gravity
        tmp = np.array([1.0, 0, 0]) if abs(n[0]) < 0.9 else np.array([0, 1.0, 0])
        b1 = np.cross(n, tmp)
        b1 /= np.linalg.norm(b1)
        b2 = np.cross(n, b1)
        B = np.column_stack([b1, b2])
        A, b = system(g0, B)
        y, *_ = np.linalg.lstsq(A, b, rcond=None)
        g0 = g0 + B @ y[ns + 3:ns + 5]
        g0 = g0 / np.linalg.norm(g0) * gravity
    s = float(y[0]) if ns else 1.0
    if ns:
        # reject a poorly determined scale (constant acceleration is indistinguishable from a
        # gravity tilt over short windows): require s > min_scale_snr * sigma_s
        r = A @ y - b
        dof = max(A.shape[0] - A.shape[1], 1)
        try:
            cov = np.linalg.inv(A.T @ A) * float(r @ r) / dof
            sig = float(np.sqrt(max(cov[0, 0], 0.0)))
        except np.linalg.LinAlgError:
            return None
        log.debug("alignment scale %.4f +- %.4f", s, sig)
        if s <= 0 or s < min_scale_snr * sig:
            return None
    return s, y[ns:ns + 3], g0


def _sfm_window(frames, cam0, min_points=16):
    """Up-to-scale structure and motion over the window (see dynamic_init_mono) ->
    dict(X (N,3) in first-camera coordinates, ids (N,), a, c, stamps, R_vis) or None."""
    import cv2

    cv2.setRNGSeed(RANSAC_SEED)      # RANSAC results must not depend on earlier cv2 users

    if len(frames) < 5:
        return None
    f0 = frames[0]
    # the last frame of the window that still shares enough tracks with the first one
    for last in range(len(frames) - 1, 3, -1):
        common, i0, il = np.intersect1d(f0.ids, frames[last].ids, return_indices=True)
        if len(common) >= 2 * min_points:
            break
    else:
        return None
    frames = frames[:last + 1]
    fl = frames[-1]
    x0, xl = f0.xy[i0], fl.xy[il]
    par = np.median(np.linalg.norm(x0 - xl, axis=1)) * cam0.fx
    if par < 15:
        return None
    thr = 1.5 / cam0.fx
    E, mask = cv2.findEssentialMat(x0, xl, np.eye(3), method=cv2.RANSAC, prob=0.999, threshold=thr)
    if E is None or E.shape != (3, 3):
        return None
    n_in, R, t, mask2 = cv2.recoverPose(E, x0, xl, np.eye(3), mask=mask)
    if n_in < min_points:
        return None
    P0 = np.hstack([np.eye(3), np.zeros((3, 1))])
    P1 = np.hstack([R, t.reshape(3, 1)])
    good = mask2.ravel() > 0
    Xh = cv2.triangulatePoints(P0, P1, x0[good].T, xl[good].T)
    X = (Xh[:3] / Xh[3]).T
    zc1 = (X @ R.T + t.ravel())[:, 2]
    ok = (X[:, 2] > 0) & (zc1 > 0) & np.isfinite(X).all(axis=1)
    X, ids3 = X[ok], common[good][ok]
    if len(ids3) < min_points:
        return None
    lut = {int(i): k for k, i in enumerate(ids3)}
    R_BS, t_BS = cam0.T_BS[:3, :3], cam0.T_BS[:3, 3]
    A_s, c, stamps, R_vis = [], [], [], []
    for fr in frames[1:]:
        idx = [(lut[int(i)], j) for j, i in enumerate(fr.ids) if int(i) in lut]
        if len(idx) < min_points // 2:
            continue
        okp, rvec, tvec, inl = cv2.solvePnPRansac(X[[a for a, _ in idx]], fr.xy[[b for _, b in idx]], np.eye(3), None,
                                                  reprojectionError=3.0 / cam0.fx, iterationsCount=100)
        if not okp or inl is None or len(inl) < min_points // 2:
            continue
        Rk, _ = cv2.Rodrigues(rvec)
        R_c0ck = Rk.T
        t_c0ck = -Rk.T @ tvec.ravel()
        R_b0bk = R_BS @ R_c0ck @ R_BS.T
        A_s.append(R_BS @ t_c0ck)
        c.append(t_BS - R_b0bk @ t_BS)
        stamps.append(fr.stamp_ns)
        R_vis.append(R_b0bk)
    if len(stamps) < 4:
        return None
    return {"X": X, "ids": ids3, "a": A_s, "c": c, "stamps": stamps, "R_vis": R_vis}


def dynamic_init_mono(frames, imu_buffer, cam0, params, gravity=9.81, min_points=16, ba_prior=0.1):
    """Visual-inertial alignment for a moving monocular start (VINS-Mono style, simplified).

    Up-to-scale camera poses over the window: essential matrix between the first and the last
    frame (RANSAC), triangulation, PnP for the frames in between. With the extrinsics
    T_BS = (R_BS, t_BS), body positions in the first body frame are ``s * a_k + c_k`` with
    ``a_k = R_BS t_c0ck`` and ``c_k = t_BS - R_b0bk t_BS``. Together with the preintegrated
    ``alpha_k``: ``s a_k + c_k - alpha_k = v0 t_k + 0.5 g0 t_k^2`` - linear in (s, v0, g0).
    Returns InitResult or None (too little parallax / too few points)."""
    sfm = _sfm_window(frames, cam0, min_points)
    if sfm is None:
        return None
    f0 = frames[0]
    A_s, c, stamps, R_vis = sfm["a"], sfm["c"], sfm["stamps"], sfm["R_vis"]
    bg = estimate_gyro_bias(imu_buffer, params, f0.stamp_ns, stamps, R_vis)
    snaps = preintegrate_snapshots(imu_buffer, params, f0.stamp_ns, stamps, bg)
    alpha = [a for _, a, _ in snaps]
    tk = [t for _, _, t in snaps]
    # d alpha / d ba (numerically): lets the alignment absorb the accelerometer bias (ridge prior)
    eps = 0.01
    J = [np.zeros((3, 3)) for _ in stamps]
    for i in range(3):
        sn = preintegrate_snapshots(imu_buffer, params, f0.stamp_ns, stamps, bg, ba=eps * np.eye(3)[i])
        for k in range(len(stamps)):
            J[k][:, i] = (sn[k][1] - alpha[k]) / eps
    sol = _lsq_gravity_velocity(A_s, c, alpha, tk, gravity, extra=J, extra_prior=ba_prior)
    if sol is None:
        return None
    s, v0, g0 = sol
    log.debug("mono alignment: scale %.4f v0 %s g0 %s bg %s", s, v0, g0, bg)
    R_wb = gravity_aligned_rotation(-g0)
    return InitResult(R_wb, R_wb @ v0, bg, np.zeros(3), "dynamic_mono", 0.5, 0.05)


def preintegrate_snapshots(imu_buffer, params, t0, stamps, bg, ba=None):
    """[(deltaR (3x3), alpha (3,), dt)] from t0 to each stamp, preintegrated with gyro bias bg."""
    gtsam = load_gtsam()

    ba = np.zeros(3) if ba is None else np.asarray(ba, float)
    pim = gtsam.PreintegratedCombinedMeasurements(params, gtsam.imuBias.ConstantBias(ba, np.asarray(bg, float)))
    out = []
    t_prev = t0
    for t in stamps:
        imu_buffer.integrate(pim, t_prev, t)
        t_prev = t
        out.append((pim.deltaRij().matrix(), np.asarray(pim.deltaPij()), pim.deltaTij()))
    return out


def estimate_gyro_bias(imu_buffer, params, t0, stamps, R_vis, eps=1e-3):
    """Gyro bias from visual relative rotations R_b0bk: Gauss-Newton on
    sum_k |Log(dR_k(bg)^T R_vis_k)|^2 with a numerical Jacobian (two iterations)."""
    from scipy.spatial.transform import Rotation

    def residuals(bg):
        sn = preintegrate_snapshots(imu_buffer, params, t0, stamps, bg)
        return np.concatenate([Rotation.from_matrix(dR.T @ Rv).as_rotvec() for (dR, _, _), Rv in zip(sn, R_vis)])

    bg = np.zeros(3)
    for _ in range(2):
        r0 = residuals(bg)
        J = np.column_stack([(residuals(bg + eps * e) - r0) / eps for e in np.eye(3)])
        d, *_ = np.linalg.lstsq(J, -r0, rcond=None)
        bg = bg + d
    if not np.all(np.isfinite(bg)) or np.linalg.norm(bg) > 0.2:
        return np.zeros(3)
    return bg


@dataclass
class Start:
    """What the smoother starts from: the first frame's stamp and state (pose ``T``, velocity ``v``, bias
    ``bias6`` [acc, gyro]) with the priors' sigmas; ``first``: the first initialisation (else after an
    IMU hole); ``frames``: the frames kept until now, to be processed in order."""

    t_ns: int
    T: np.ndarray
    v: np.ndarray
    bias6: np.ndarray
    rot_sigma: float
    v_sigma: float
    bg_sigma: float
    first: bool
    frames: list


class Initialiser:
    """See the module docstring. ``mode``: 'stereo' | 'mono'; ``imu``: the estimator's IMU buffer;
    ``params``: gtsam's preintegration parameters; counts ``init_attempts``, ``frames_skipped`` and
    ``init_kind`` in ``stats``; says a start that keeps failing through ``warn`` (throttled)."""

    #: failed initialisation attempts before it says so (a normal start takes a few)
    ATTEMPTS_BEFORE_WARNING = 20

    def __init__(self, config: BackendConfig, mode: str, rig: CameraRig, imu: ImuBuffer, params, stats: dict,
                 warn):
        self.config = config
        self.mode = mode
        self.rig = rig
        self.imu = imu
        self.params = params
        self.stats = stats
        self._warn = warn
        self.frames: list = []                      # the frames since the (re)start, oldest first
        self.anchor: np.ndarray | None = None       # last known pose before an IMU hole

    def restart(self, frame, anchor: np.ndarray) -> None:
        """Initialise again from ``frame`` on, anchored at the pose ``anchor`` (after an IMU hole)."""
        self.anchor = anchor
        self.frames = [frame]

    def add(self, frame) -> Start | None:
        """Keep ``frame``; the start once an initialisation succeeds (None until then)."""
        self.frames.append(frame)
        res = self._try()
        if res is None:
            return None
        t0 = self.frames[0].stamp_ns
        self.stats["init_kind"] = res.kind
        est_log.info("initialised (%s) at %d: v=%s bg=%s", res.kind, t0, np.round(res.v_w, 3), np.round(res.bg, 4))
        T = np.eye(4)
        T[:3, :3] = res.R_wb
        v_w = res.v_w
        anchor, self.anchor = self.anchor, None
        if anchor is not None:      # after an IMU hole: continue from the last known position and heading
            M = anchor[:3, :3] @ res.R_wb.T
            psi = np.arctan2(M[1, 0] - M[0, 1], M[0, 0] + M[1, 1])
            Rz = np.array([[np.cos(psi), -np.sin(psi), 0], [np.sin(psi), np.cos(psi), 0], [0, 0, 1.0]])
            T[:3, :3] = Rz @ res.R_wb
            T[:3, 3] = anchor[:3, 3]
            v_w = Rz @ v_w
        frames, self.frames = self.frames, []
        return Start(t0, T, v_w, np.concatenate([res.ba, res.bg]), res.rot_sigma, res.v_sigma,
                     0.003 if res.kind == "static" else 0.01, anchor is None, frames)

    def _try(self) -> InitResult | None:
        cfg = self.config
        frames, imu = self.frames, self.imu
        t0 = frames[0].stamp_ns
        W = int(cfg.init_window_s * 1e9)
        first_imu = imu.t[0]
        last_imu = imu.last_t
        before_ok = first_imu <= t0 - W and imu.max_gap(t0 - W, t0) <= cfg.imu_max_gap_s * 1e9
        if before_ok:
            _, win = imu.window(t0 - W, t0)
        elif last_imu >= t0 + W or frames[-1].stamp_ns >= t0 + W:
            _, win = imu.window(first_imu if self.anchor is None else t0, t0 + W)
        else:
            return None
        if is_static(win, cfg, cfg.gravity):
            return static_init(win)
        if self.mode == "stereo":
            if len(frames) < cfg.dynamic_init_frames:
                return None
            self.stats["init_attempts"] += 1
            res = dynamic_init_stereo(frames, imu, self.rig.cam0, self.rig.cam1, self.params, cfg.gravity)
            if res is None and len(frames) > 4 * cfg.dynamic_init_frames:
                res = accel_init(win)
        else:
            span = (frames[-1].stamp_ns - t0) * 1e-9
            if span < cfg.mono_init_window_s:
                return None
            self.stats["init_attempts"] += 1
            res = dynamic_init_mono(frames, imu, self.rig.cam0, self.params, cfg.gravity)
            if res is None and span > 4 * cfg.mono_init_window_s:
                res = accel_init(win)
        if res is None:
            frames.pop(0)      # slide the window and try again
            self.stats["frames_skipped"] += 1
            self._not_yet(win)
        return res

    def _not_yet(self, win: np.ndarray) -> None:
        """Say (throttled) that the initialisation keeps failing, and where the accelerometer's mean
        disagrees with the configured gravity, that too."""
        n = self.stats["init_attempts"]
        if n < self.ATTEMPTS_BEFORE_WARNING:
            return
        g = self.config.gravity
        a = float(np.linalg.norm(win[:, 3:].mean(axis=0))) if len(win) else float("nan")
        hint = ""
        if np.isfinite(a) and abs(a - g) > 0.2 * max(g, 1.0):
            hint = (f"; the accelerometer's mean |a| over the window is {a:.2f} m/s^2 against gravity = {g:g}: "
                    "check the gravity parameter and the IMU's units")
        self._warn("init", "not initialised yet after %d attempts (%s): no solution from the first frames%s",
                   n, self.mode, hint)
