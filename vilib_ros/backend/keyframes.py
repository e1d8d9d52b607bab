"""Keyframe selection and the keyframe update of :class:`vilib_ros.backend.VioEstimator`:
IMU prediction, the keyframe criteria (time, tracks, rotation-compensated parallax), rest
detection, the smoother update with its failure handling, tracking-loss accounting."""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numba
import numpy as np

from .config import VioState
from .imu import integrate_steps, predict_nav
from .initialisation import is_static
from .landmarks import _B0, _V0, _X0

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts


@numba.njit(cache=True, nogil=True, error_model="numpy")
def parallax_px(srt_ids, order, kf_xy, ids, xy, R_cc):
    """(tracks shared with a keyframe, the median distance between their keyframe bearings and the
    current ones rotated by ``R_cc`` into the keyframe camera; normalised coordinates). The keyframe's
    track ids come sorted (``srt_ids``, their rows ``order`` in ``kf_xy``). Compiled: it runs on every
    frame (the NumPy version, ``test_backend_compiled.TestParallax``'s reference, took ~45 us)."""
    m, n = srt_ids.shape[0], ids.shape[0]
    d = np.empty(n)
    k = 0
    if m == 0:
        return 0, np.nan
    for j in range(n):
        p = np.searchsorted(srt_ids, ids[j])
        if p >= m:
            p = 0
        if srt_ids[p] != ids[j]:
            continue
        i = order[p]
        bx, by = xy[j, 0], xy[j, 1]
        f0 = bx * R_cc[0, 0] + by * R_cc[0, 1] + R_cc[0, 2]
        f1 = bx * R_cc[1, 0] + by * R_cc[1, 1] + R_cc[1, 2]
        f2 = bx * R_cc[2, 0] + by * R_cc[2, 1] + R_cc[2, 2]
        ux, uy = f0 / f2 - kf_xy[i, 0], f1 / f2 - kf_xy[i, 1]
        d[k] = np.sqrt(ux * ux + uy * uy)
        k += 1
    if k == 0:
        return 0, np.nan
    v = d[:k]
    v = np.sort(v[~np.isnan(v)])
    c = v.shape[0]
    return k, ((v[(c - 1) // 2] + v[c // 2]) / 2 if c else np.nan)


def warm_up() -> None:
    """Compile (or load from numba's cache) :func:`parallax_px` now (at the estimator's construction)."""
    ids = np.arange(3, dtype=np.int64)
    parallax_px(ids, ids, np.zeros((3, 2)), ids, np.zeros((3, 2)), np.eye(3))


@dataclass
class _Keyframe:
    idx: int
    t_ns: int
    T: np.ndarray                 # 4x4 body->world, latest estimate
    v: np.ndarray
    bias: np.ndarray              # (6,) [ba, bg] like gtsam ConstantBias.vector()
    obs: tuple = (np.zeros(0, np.int64), np.zeros((0, 2)))   # (track ids, xy) for keyframe selection
    _lookup: tuple | None = None  # (sorted ids, their order in obs), built on first use
    _cache: dict | None = None    # per-frame helpers of this estimate (see nav, T_inv)

    def _cached(self, name: str, src: tuple, make):
        """``make()`` once per state of the fields in ``src`` (compared by identity: the estimator
        replaces T, v and bias, never writes into them)."""
        c = self._cache if self._cache is not None else {}
        self._cache = c
        hit = c.get(name)
        if hit is None or any(a is not b for a, b in zip(hit[0], src)):
            hit = c[name] = (src, make())
        return hit[1]

    def nav(self, gtsam):
        """(NavState, ConstantBias) of this estimate: what every frame's IMU prediction starts from."""
        return self._cached("nav", (self.T, self.v, self.bias), lambda: (
            gtsam.NavState(gtsam.Pose3(self.T), self.v), gtsam.imuBias.ConstantBias(self.bias[:3], self.bias[3:])))

    def T_inv(self) -> np.ndarray:
        """inv(T), for every frame's pose relative to this keyframe."""
        return self._cached("T_inv", (self.T,), lambda: np.linalg.inv(self.T))

    def sorted_ids(self):
        """(this keyframe's track ids sorted, their order in obs), built once per ``obs``."""
        if self._lookup is None or self._lookup[2] is not self.obs:
            order = np.argsort(self.obs[0], kind="stable")
            self._lookup = (self.obs[0][order], order, self.obs)
        return self._lookup[0], self._lookup[1]


class KeyframeMixin:
    """Keyframes (a part of VioEstimator; uses its state)."""

    def _predict(self):
        """(pose 4x4, velocity) at the end of the current preintegration from the last keyframe estimate, by
        gtsam: the steps kept since the last keyframe are integrated into its preintegration first (what the
        keyframe's ``CombinedImuFactor`` takes)."""
        gtsam = self._g
        for a, w, dt in self._pim_steps:
            integrate_steps(self._pim, a, w, dt)
        self._pim_steps = []
        nav, bias = self._last_kf.nav(gtsam)
        ns = self._pim.predict(nav, bias)
        T = ns.pose().matrix()
        return T, np.asarray(ns.velocity())

    def _predict_frame(self):
        """:meth:`_predict`'s pose and velocity from the compiled preintegration (:func:`.imu.predict_nav`:
        gtsam's arithmetic, equal to rounding), without gtsam: every frame's prediction."""
        kf = self._last_kf
        T, v = np.empty((4, 4)), np.empty(3)
        predict_nav(self._pim_delta, kf.T, kf.v, float(self.config.gravity), T, v)
        return T, v

    def _is_keyframe(self, fr, T_pred) -> bool:
        cfg = self.config
        kf = self._last_kf
        dt = (fr.stamp_ns - kf.t_ns) * 1e-9
        if dt < cfg.kf_min_interval_s:
            return False
        if dt >= cfg.kf_max_interval_s:
            self.stats["kf_time"] += 1
            return True
        if len(fr) < cfg.kf_min_tracks:
            self.stats["kf_tracks"] += 1
            return True
        n_common, par = self._parallax(fr, T_pred)
        if n_common == 0 or n_common < cfg.kf_track_fraction * max(len(kf.obs[0]), 1):
            self.stats["kf_tracks"] += 1
            return True
        if par >= cfg.kf_parallax_px:
            self.stats["kf_parallax"] += 1
            return True
        return False

    def _parallax(self, fr, T_pred):
        """(tracks shared with the last keyframe, their rotation-compensated median parallax, px)."""
        kf = self._last_kf
        ck = (fr.stamp_ns, kf.idx)
        if self._parallax_cache[0] == ck:
            return self._parallax_cache[1]
        res = self._parallax_uncached(fr, T_pred, kf)
        self._parallax_cache = (ck, res)
        return res

    def _parallax_uncached(self, fr, T_pred, kf):
        srt, order = kf.sorted_ids()
        # the current bearings are rotated into the keyframe camera
        R_bb = kf.T[:3, :3].T @ T_pred[:3, :3]
        R_cc = self._T_BS0[:3, :3].T @ R_bb @ self._T_BS0[:3, :3]
        n, med = parallax_px(srt, order, kf.obs[1], fr.ids, fr.xy, R_cc)
        return n, (med * self.cam0.fx if n else np.inf)

    def _is_still(self, fr, T_pred) -> bool:
        """No motion since the last keyframe: the tracks show no parallax and the IMU window
        passes the rest test (both needed: parallax alone is blind to motion along the rays)."""
        cfg = self.config
        if not cfg.zero_velocity_updates:
            return False
        n, par = self._parallax(fr, T_pred)
        if n < cfg.kf_min_tracks or par > cfg.still_parallax_px:
            return False
        _, win = self._imu.window(self._last_kf.t_ns, fr.stamp_ns)
        return is_static(win, cfg, cfg.gravity, tolerance=1.5)

    def _add_keyframe(self, fr, T_pred, v_pred) -> VioState:
        gtsam = self._g
        cfg = self.config
        t_start = time.perf_counter()
        prev = self._last_kf
        k = self._kf_idx + 1
        X, V, B = _X0 | k, _V0 | k, _B0 | k
        Xp, Vp, Bp = _X0 | prev.idx, _V0 | prev.idx, _B0 | prev.idx
        ts = self._ts(fr.stamp_ns)
        graph = gtsam.NonlinearFactorGraph()
        vals = gtsam.Values()
        stamps = {X: ts, V: ts, B: ts}
        graph.add(gtsam.CombinedImuFactor(Xp, Vp, X, V, Bp, B, self._pim))
        vals.insert(X, gtsam.Pose3(T_pred))
        vals.insert(V, v_pred)
        vals.insert(B, gtsam.imuBias.ConstantBias(prev.bias[:3], prev.bias[3:]))

        # ---- zero-velocity update at rest (no parallax and a static IMU window)
        if self._is_still(fr, T_pred):
            dt = (fr.stamp_ns - prev.t_ns) * 1e-9
            graph.add(gtsam.PriorFactorVector(V, np.zeros(3),
                                              gtsam.noiseModel.Isotropic.Sigma(3, cfg.still_velocity_sigma)))
            graph.add(gtsam.BetweenFactorPose3(Xp, X, gtsam.Pose3(), gtsam.noiseModel.Diagonal.Sigmas(
                np.array([1e-3] * 3 + [cfg.still_velocity_sigma * dt + 1e-4] * 3))))
            self.stats["zero_velocity_updates"] += 1

        # ---- visual factors
        t_vis = time.perf_counter()
        self._proj_cache = {}
        horizon = fr.stamp_ns - int(0.85 * self.window_s * 1e9)
        if self.solver == "schur" and cfg.schur_keep_landmarks == 0 and (
                self.marginalise_every_s <= 0 or ts - self._marg_ts >= self.marginalise_every_s):
            # this update marginalises: a landmark first seen by a state that leaves leaves with it
            # (SchurSmoother); its track, seen on, starts a new landmark from this keyframe
            lim = fr.stamp_ns - int(self.window_s * 1e9)
            for tid, lm in list(self._lm.items()):
                if lm.t_first < lim:
                    del self._lm[tid]
                    self.stats["landmarks_split"] += 1
        n_added = self._add_visual(fr, k, X, T_pred, graph, vals, stamps, horizon)
        self._note_tracking(fr.stamp_ns, n_added)

        # ---- smoother update
        t_py = time.perf_counter()
        self._set_lag(ts)
        try:
            self._smoother_update(graph, vals, stamps, (X, V, B))
            for _ in range(cfg.extra_updates):
                self._smoother.update()
            t_upd = time.perf_counter()
            est = self._smoother.estimate() if self.config.rooted_smoother else self._smoother.calculateEstimate()
            T_new = est.atPose3(X).matrix()
            v_new = np.asarray(est.atVector(V))
            b_new = np.asarray(est.atConstantBias(B).vector())
        except Exception as exc:  # IndeterminantLinearSystemException, ValueError, RuntimeError...
            log.debug("smoother exception", exc_info=True)
            t_sm = time.perf_counter() - t_py
            msg = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip())[:200]
            self._reset(f"smoother failed: {type(exc).__name__}: {msg}",
                        fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)
        t_sm = time.perf_counter() - t_py
        bad = self._diverged(T_new, v_new, b_new)
        if bad:
            self._reset(bad, fr.stamp_ns, T_pred, v_pred, prev.bias)
            return self._after_reset(fr, t_start, t_sm)

        # ---- book-keeping from the new estimate
        t_py2 = time.perf_counter()
        self._kf_idx = k
        kf = _Keyframe(k, fr.stamp_ns, T_new, v_new, b_new, (fr.ids.copy(), fr.xy.copy()))
        self._kfs[k] = kf
        self._last_kf = kf
        old = [i for i, f in self._kfs.items() if f.t_ns < horizon and i != k]
        for i in old:
            del self._kfs[i]
        for i, f in self._kfs.items():
            xi = _X0 | i
            if i != k and est.exists(xi):
                f.T = est.atPose3(xi).matrix()
            self._kf_final[i] = f.T
        gone = getattr(self._smoother, "removed_landmarks", ())
        seen = []
        for tid, lm in list(self._lm.items()):
            if lm.last_t < horizon or lm.key in gone:
                del self._lm[tid]
            elif lm.last_t == fr.stamp_ns:
                seen.append(lm)
        if hasattr(est, "points"):          # the own smoother: every point in one read
            for lm, p in zip(seen, est.points([lm.key for lm in seen])):
                lm.p = p
        else:
            for lm in seen:
                lm.p = np.asarray(est.atPoint3(lm.key))
        self._new_pim(fr.stamp_ns, gtsam.imuBias.ConstantBias(b_new[:3], b_new[3:]))
        self.stats["keyframes"] += 1
        self.stats["landmarks_active"] = len(self._lm)
        state = self._state_of(kf, True)
        self._emit(fr.stamp_ns, k, np.eye(4), kf.T, state)
        t_end = time.perf_counter()
        self.kf_timings.append({"total_s": t_end - t_start, "smoother_s": t_sm,
                                "python_s": (t_py - t_start) + (t_end - t_py2), "factors": n_added,
                                "update_s": t_upd - t_py, "visual_s": t_py - t_vis, "bookkeeping_s": t_end - t_py2})
        return state

    def _set_lag(self, ts: float) -> None:
        """Batch marginalisation (``marginalise_every_s``, mono: ``mono_marginalise_every_s``): the smoother's lag is window_s + the
        batch period, except on the update where a batch is due. An update that marginalises
        re-eliminates the cliques of the leaving states (1-1.5 ms of a 2-3 ms stereo update), so
        doing it for several keyframes at once makes most updates cheaper."""
        every = self.marginalise_every_s
        if every <= 0:
            return
        due = ts - self._marg_ts >= every
        self._smoother.setSmootherLag(self.window_s if due else self.window_s + every)
        if due:
            self._marg_ts = ts

    def _note_tracking(self, t_ns: int, n_visual: int) -> None:
        """Count and log a tracking loss (a keyframe without visual observations: the state is then
        propagated by the IMU alone, continuously, without a jump) and its recovery."""
        if n_visual == 0 and self._lost_since is None:
            self._lost_since = t_ns
            self.stats["tracking_lost"] += 1
            log.warning("tracking lost at %d (#%d): no visual observation on this keyframe, IMU only until tracks "
                        "return", t_ns, self.stats["tracking_lost"])
        elif n_visual > 0 and self._lost_since is not None:
            log.info("tracking recovered at %d after %.2f s", t_ns, (t_ns - self._lost_since) * 1e-9)
            self._lost_since = None

    def _after_reset(self, fr, t_start, t_sm) -> VioState:
        kf = self._last_kf
        kf.obs = (fr.ids.copy(), fr.xy.copy())
        self._record_pending(fr, kf.idx)
        state = self._state_of(kf, True)
        self._emit(fr.stamp_ns, kf.idx, np.eye(4), kf.T, state)
        t = time.perf_counter() - t_start
        self.kf_timings.append({"total_s": t, "smoother_s": t_sm, "python_s": t - t_sm, "factors": 0,
                                "reset": True})
        return state

    def _diverged(self, T, v, b) -> str:
        """Why the new estimate is unusable ('' if it is not); on plain floats (once per keyframe,
        NumPy's per-call overhead was 50 us here)."""
        cfg = self.config
        vl, bl = v.tolist(), b.tolist()
        if not (math.isfinite(float(T.sum())) and math.isfinite(sum(vl)) and math.isfinite(sum(bl))):
            return "non-finite state"
        speed = math.sqrt(vl[0] * vl[0] + vl[1] * vl[1] + vl[2] * vl[2])
        if speed > cfg.max_speed:
            return f"speed {speed:.1f} m/s > {cfg.max_speed}"
        bg, ba = max(map(abs, bl[3:])), max(map(abs, bl[:3]))
        if bg > cfg.max_gyro_bias:
            return f"gyro bias {bg:.3f} rad/s > {cfg.max_gyro_bias}"
        if ba > cfg.max_acc_bias:
            return f"accelerometer bias {ba:.3f} m/s^2 > {cfg.max_acc_bias}"
        return ""
