"""Landmark life cycle of :class:`vilib_ros.backend.VioEstimator` (see its module docstring):
pending observations of new tracks, creation by triangulation (DLT, chi2-gated, all of a keyframe's
candidates in one compiled call: :mod:`.triangulation`),
gated observations of existing landmarks, stereo / mono factors, and ending a landmark whose
track drifted (``retriangulate_outliers``) or outlived ``landmark_max_span_s``."""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from .triangulation import triangulate_candidates

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts
# gtsam.symbol("x", i) == _X0 | i (Symbol's key layout: the character in the top byte): keys without a pybind call
_X0, _V0, _B0, _L0 = (ord(c) << 56 for c in "xvbl")


def nan_median(v: np.ndarray) -> float:
    """``np.nanmedian`` of a short 1-D array (the same value; NaN where all are NaN) by one sort:
    it runs on every frame and keyframe, where np.nanmedian's overhead was ~13 us, this ~2 us."""
    v = np.sort(v[~np.isnan(v)])
    n = len(v)
    return float((v[(n - 1) // 2] + v[n // 2]) / 2) if n else math.nan


@dataclass
class _Landmark:
    key: int
    p: np.ndarray
    last_t: int
    n_obs: int = 0
    t0: int = 0                  # creation time (ns)
    t_first: int = 0             # earliest observation's keyframe time (ns)


class LandmarkMixin:
    """Landmarks and visual factors (a part of VioEstimator; uses its state)."""

    def _record_pending(self, fr, kf_idx: int):
        """Remember this keyframe's observation of every track without a landmark:
        (kf idx, xy, raw right xy | None, rectified right xy | None)."""
        xr = fr.xy_right
        xy_l = fr.xy.tolist()
        if xr is not None and len(fr):
            has = np.isfinite(xr).all(axis=1)
            xr_l = xr.tolist()
            if self._rectified and has.any():
                xrr = np.full((len(fr), 2), np.nan)
                xrr[has] = self._rectify_right(xr[has])
                xrr_l = xrr.tolist()
            else:
                xrr_l = [None] * len(fr)
            has_l = has.tolist()
        else:
            has_l = [False] * len(fr)
        lm, bl, pend = self._lm, self._blacklist, self._pending
        for j, i in enumerate(fr.ids.tolist()):
            if i in bl or i in lm:
                continue
            o = (kf_idx, xy_l[j], xr_l[j], xrr_l[j], None) if has_l[j] else (kf_idx, xy_l[j], None, None, None)
            p = pend.get(i)
            if p is None:
                pend[i] = [o]
            else:
                p.append(o)

    def _cam_T_cw(self, T_wb: np.ndarray, T_BS: np.ndarray):
        T_wc = T_wb @ T_BS
        R = T_wc[:3, :3].T
        return R, -R @ T_wc[:3, 3]

    def _add_visual(self, fr, k, X, T_pred, graph, vals, stamps, horizon) -> int:
        gtsam = self._g
        cfg = self.config
        stereo = self.mode == "stereo"
        ids_l = fr.ids.tolist()
        xy = fr.xy
        xr = fr.xy_right if stereo else None
        lmd = self._lm
        schur_lm = self.solver == "schur"
        R_cw, t_cw = self._cam_T_cw(T_pred, self._T_BS0)
        ts_now = self._ts(fr.stamp_ns)
        # --- observations of existing landmarks, gated
        if cfg.landmark_max_span_s > 0:
            # frame-to-frame tracks drift: a landmark older than the span is ended, its track starts anew
            old = fr.stamp_ns - int(cfg.landmark_max_span_s * 1e9)
            for i in ids_l:
                lm = lmd.get(i)
                if lm is not None and lm.t0 < old:
                    del lmd[i]
                    self.stats["landmarks_split"] += 1
        ex = [j for j, i in enumerate(ids_l) if i in lmd]
        ex.sort(key=lambda j: -lmd[ids_l[j]].n_obs)
        max_obs = self.max_obs_per_kf
        if self.landmark_grid > 0 and len(ex) > max_obs:
            ex = [ex[n] for n in self._spread(xy[ex])]
        ex = ex[:max_obs]
        n_added = 0
        if ex:
            P = np.array([lmd[ids_l[j]].p for j in ex])
            pc = P @ R_cw.T + t_cw
            z = pc[:, 2]
            xr_rect = None
            with np.errstate(divide="ignore", invalid="ignore"):
                pred = pc[:, :2] / z[:, None]
                r = (xy[ex] - pred) / self._sigma_n
                e2 = (r ** 2).sum(axis=1)
                has_r = np.zeros(len(ex), bool)
                if xr is not None and self._rectified:
                    xrr = self._rectify_right(xr[ex])
                    has_r = np.isfinite(xrr[:, 0])
                    pr = (pc[:, 0] - self._baseline) / z
                    er = np.where(has_r, ((xrr[:, 0] - pr) / self._sigma_n) ** 2, 0.0)
                    e2 = e2 + er
                    xr_rect = xrr[:, 0].tolist()
            chi = np.where(has_r, cfg.chi2_stereo, cfg.chi2_mono)
            med = nan_median(e2 / np.where(has_r, 2.37, 1.39)) if len(e2) else 1.0
            scale = max(1.0, float(med)) if np.isfinite(med) else 1.0
            good = (np.isfinite(e2) & (z > cfg.min_depth) & (e2 <= chi * scale)).tolist()
            has_l = has_r.tolist()
            xy_ex = xy[ex].tolist()
            xr_raw = xr[ex].tolist() if (xr is not None and not self._rectified) else None
            x_key = int(X)
            add_obs = self._obs_adder(graph)
            for n, j in enumerate(ex):
                tid = ids_l[j]
                lm = lmd[tid]
                if not good[n]:
                    self.stats["outliers_rejected"] += 1
                    c = self._outliers.get(tid, 0) + 1
                    self._outliers[tid] = c
                    if c >= cfg.max_outlier_count:
                        self._blacklist.add(tid)
                        self.stats["blacklisted"] += 1
                        del lmd[tid]
                    elif cfg.retriangulate_outliers:
                        # a drifting track (frame-to-frame LK accumulates error) no longer fits its
                        # landmark: end the landmark here; the track starts a new one from this keyframe
                        del lmd[tid]
                        self.stats["landmarks_split"] += 1
                    continue
                add_obs(x_key, lm.key, xy_ex[n], xr_rect[n] if has_l[n] else None,
                        xr_raw[n] if xr_raw is not None else None)
                lm.last_t = fr.stamp_ns
                lm.n_obs += 1
                if not schur_lm:            # the own smoother stamps the landmarks it gets observations of
                    stamps[lm.key] = ts_now
                n_added += 1
        # --- new tracks: record, then create landmarks from pending observations
        self._record_pending(fr, k)
        budget = max_obs - n_added
        if budget <= 0:
            return n_added
        pend = self._pending
        cands = [i for i in ids_l if i in pend]
        # prefer tracks with more keyframe observations
        cands.sort(key=lambda i: -len(pend[i]))
        # the keyframes still in the window: indices grow with time, so they are those from the oldest
        # one at or after the horizon on (and a track's pending observations are in keyframe order:
        # only its first can be too old)
        first_valid = min((i for i, f in self._kfs.items() if f.t_ns >= horizon), default=k)
        live = []
        for tid in cands:
            obs = pend[tid]
            if obs[0][0] < first_valid:
                obs = pend[tid] = [o for o in obs if o[0] >= first_valid]
            if len(obs) >= 2:
                live.append(tid)
        if self.landmark_grid > 0 and len(live) > budget:
            pos = {i: j for j, i in enumerate(ids_l)}
            live = [live[n] for n in self._spread(xy[[pos[t] for t in live]])]
        live = live[:2 * budget + 8]
        fast = self._triangulate_lazily([pend[t] for t in live], budget + 8, k, T_pred)
        created = 0
        use_raw = not self._rectified
        add_obs = self._obs_adder(graph)
        prior = cfg.landmark_prior_sigma > 0 and (not stereo or cfg.landmark_prior_stereo)
        schur = self._smoother if self.solver == "schur" else None
        for tid, (P, obs, dropped) in zip(live, fast):
            if created >= budget:
                break
            self.stats["outliers_rejected"] += dropped
            if P is None:
                continue
            key = _L0 | self.stats["landmarks_created"]
            self.stats["landmarks_created"] += 1
            if schur is not None:
                schur.add_landmark(key, P, cfg.landmark_prior_sigma if prior else 0.0)
            else:
                pt = gtsam.Point3(*P)
                vals.insert(key, pt)
                if prior:
                    # weak prior: keeps a landmark whose factors all drop out (behind a camera ->
                    # zero Jacobian) from making the system indeterminate
                    graph.add(gtsam.PriorFactorPoint3(key, pt, self._noise_lm_prior))
            for (ki, o_xy, o_xr, o_xrr, _) in obs:
                add_obs(_X0 | ki, key, o_xy, o_xrr[0] if o_xrr is not None else None, o_xr if use_raw else None)
                n_added += 1
            k0 = obs[0][0]                  # the pending observations are in keyframe order: the first is the earliest
            t_first = fr.stamp_ns if k0 == k else self._kfs[k0].t_ns
            lmd[tid] = _Landmark(key, P, fr.stamp_ns, len(obs), fr.stamp_ns, t_first)
            if schur is None:
                stamps[key] = ts_now
            del pend[tid]
            created += 1
        # prune pending tracks not seen in this keyframe
        seen = set(ids_l)
        for tid in [t for t in pend if t not in seen]:
            del pend[tid]
        return n_added

    def _spread(self, xy: np.ndarray) -> np.ndarray:
        """An order of ``xy`` (normalised cam0 coordinates, in order of preference) that takes the
        best of every cell of a ``landmark_grid`` x ``landmark_grid`` image grid first (mono:
        ``mono_landmark_grid``), then the second best of every cell, and so on (stable: preference
        decides within a rank)."""
        g, c = self.landmark_grid, self.cam0
        u = np.clip((xy[:, 0] * c.fx + c.cx) * (g / c.width), 0, g - 1).astype(np.int64)
        v = np.clip((xy[:, 1] * c.fy + c.cy) * (g / c.height), 0, g - 1).astype(np.int64)
        cell = np.where(np.isfinite(xy).all(axis=1), v * g + u, g * g)
        order = np.argsort(cell, kind="stable")
        cs = cell[order]
        start = np.searchsorted(cs, cs, side="left")
        rank = np.empty(len(cell), np.int64)
        rank[order] = np.arange(len(cs)) - start
        return np.lexsort((np.arange(len(cell)), rank))

    def _rectify_right(self, xr: np.ndarray) -> np.ndarray:
        """Right normalised coordinates re-expressed in a camera with cam0's orientation."""
        f = np.column_stack([xr, np.ones(len(xr))]) @ self._R_c0_c1.T
        with np.errstate(divide="ignore", invalid="ignore"):
            return f[:, :2] / f[:, 2:3]

    def _add_obs(self, graph, X: int, L: int, xy, xr_rect: float | None, xr_raw):
        """One observation of landmark L from keyframe pose X: a stereo factor where the rectified
        right x is known, else a projection factor (and one for the raw right ray if given)."""
        self._obs_adder(graph)(X, L, xy, xr_rect, xr_raw)

    def _obs_adder(self, graph):
        """:meth:`_add_obs` into ``graph`` with the gtsam constructors, noise models and
        calibrations bound once per keyframe (a keyframe adds ~90 observations; the lookups were a
        third of the cost of adding one)."""
        if self.solver == "schur":
            return self._smoother.obs_adder()
        g = self._g
        add, isfinite = graph.add, math.isfinite
        Stereo, SP2, Proj = g.GenericStereoFactor3D, g.StereoPoint2, g.GenericProjectionFactorCal3_S2
        n_s, K_s, n_m, K_m, bs0 = self._noise_stereo, getattr(self, "_K_stereo", None), self._noise_mono, \
            self._K_mono, self._pose_bs0
        bs1 = getattr(self, "_pose_bs1", None)

        def add_obs(X: int, L: int, xy, xr_rect, xr_raw) -> None:
            if xr_rect is not None and isfinite(xr_rect):
                add(Stereo(SP2(xy[0], xr_rect, xy[1]), n_s, X, L, K_s, bs0))
                return
            add(Proj((xy[0], xy[1]), n_m, X, L, K_m, bs0))
            if xr_raw is not None and isfinite(xr_raw[0]):
                add(Proj((xr_raw[0], xr_raw[1]), n_m, X, L, K_m, bs1))

        return add_obs

    def _kf_pose(self, ki, k, T_pred):
        return T_pred if ki == k else self._kfs[ki].T

    def _proj(self, ki, k, T_pred):
        """3x4 [R|t] world -> cam0 of keyframe ki (cached per keyframe update)."""
        P = self._proj_cache.get(ki)
        if P is None:
            R, t = self._cam_T_cw(self._kf_pose(ki, k, T_pred), self._T_BS0)
            P = self._proj_cache[ki] = np.hstack([R, t[:, None]])
        return P

    def _triangulate_lazily(self, cands, first: int, k, T_pred):
        """:meth:`_triangulate_batch` of the first ``first`` candidates, of the rest only when the
        caller iterates that far (most keyframes create their budget from the first ones)."""
        yield from self._triangulate_batch(cands[:first], k, T_pred)
        if len(cands) > first:
            yield from self._triangulate_batch(cands[first:], k, T_pred)

    def _triangulate_batch(self, cands, k, T_pred):
        """Triangulation of many candidate landmarks (lists of pending observations) in one
        compiled call (:func:`.triangulation.triangulate_candidates`: DLT over every left and
        right ray, the worst observation dropped while one fails the chi2 gate or the depth
        bounds). Returns, per candidate, (world point or None, its inlier observations,
        observations dropped); the caller counts the drops of the candidates it uses."""
        cfg = self.config
        if not cands:
            return []
        stereo = self.mode == "stereo"
        C = len(cands)
        flat = [o for c in cands for o in c]
        start = np.zeros(C + 1, np.int64)
        np.cumsum(np.fromiter(map(len, cands), np.int64, C), out=start[1:])
        kf_l = [o[0] for o in flat]
        uk = sorted(set(kf_l))                  # the keyframes seen (np.unique's order, without its ~20 us)
        pos = {u: n for n, u in enumerate(uk)}
        kfi = np.array(kf_l, np.int64)
        view = np.array([pos[x] for x in kf_l], np.int64)
        P_tab = np.array([self._proj(ki, k, T_pred) for ki in uk])
        xy = np.array([o[1] for o in flat], np.float64)
        if stereo:
            nan2 = (math.nan, math.nan)
            xr = np.array([o[2] if o[2] is not None else nan2 for o in flat], np.float64)
            m_r = ~np.isnan(xr[:, 0])
        else:
            xr, m_r = np.zeros_like(xy), np.zeros(len(flat), bool)
        gate = np.where(m_r, cfg.chi2_stereo, cfg.chi2_mono) * np.where(kfi == k, 4.0, 1.0) * self._sigma_n ** 2
        keep = np.ones(len(flat), bool)
        X = np.zeros((C, 3))
        drops = np.zeros(C, np.int64)
        ok = triangulate_candidates(P_tab, view, xy, xr, m_r, gate, start, stereo,
                                    getattr(self, "_T_c1c0", np.eye(4)), cfg.min_depth, cfg.max_depth,
                                    cfg.mono_min_parallax_deg, X, keep, drops)
        keep_l = keep.tolist()
        res = []
        for c, (good, d) in enumerate(zip(ok.tolist(), drops.tolist())):
            if not good:
                res.append((None, None, d))
            elif d:
                res.append((X[c], [o for o, kk in zip(cands[c], keep_l[start[c]:start[c + 1]]) if kk], d))
            else:
                res.append((X[c], cands[c], 0))
        return res
