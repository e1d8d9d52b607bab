"""The estimator's landmark map (:class:`LandmarkMap`): which track is a landmark, where it is, and the
visual observations a keyframe gives the smoother.

A track becomes a landmark on its second keyframe observation (stereo: at least one with a right
match; mono: once the ray angle exceeds ``mono_min_parallax_deg``), triangulated by linear DLT over all
its left (and right) rays in the window, observations failing the chi2 gate dropped one by one (all of
a keyframe's candidates in one compiled call: :mod:`.triangulation`). Until then its keyframe
observations wait (pending). Per keyframe at most ``max_landmarks_per_kf`` (mono:
``mono_max_landmarks_per_kf``) observations are added: of existing landmarks (longest tracks first),
then of new ones (tracks with the most keyframe observations first); with ``landmark_grid`` (mono:
``mono_landmark_grid``) > 0 the preference is dealt out over a grid of image cells, each cell's best
first, so that the observations spread over the image. In mono mode each new landmark gets a weak
prior (``landmark_prior_sigma``) so that a landmark whose factors all lose their Jacobian (point behind
a camera) cannot make the system indeterminate; in stereo mode a stereo observation fixes the point by
itself and the prior (``landmark_prior_stereo``) would only cost update time.

Outliers: before an observation is added, its whitened residual at the predicted pose is gated against
chi2 (99 %), with the threshold scaled up by the median residual of the keyframe (so that an IMU
prediction error does not reject every track). A rejected observation ends its landmark
(``retriangulate_outliers``): the track, whose frame-to-frame error has drifted away from where it was
triangulated, starts a new landmark from this keyframe; a track rejected ``max_outlier_count`` times is
blacklisted. Optionally (``landmark_max_span_s``) landmarks are ended by age. A landmark is dropped
once it has not been observed for a window, or when the smoother has marginalised it; a re-observed
track gets a new landmark key (never a factor on a marginalised key).

The map gives its landmarks and observations to the smoother (``add_landmark``, ``obs_adder``: the
interface both smoothers share, :mod:`.smoother`) and reads the keyframes' poses from the shared
:class:`~.window.KeyframeWindow`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import BackendConfig, ModeSettings
from .rig import CameraRig
from .triangulation import triangulate_candidates
from .window import L0, X0, KeyframeWindow


def nan_median(v: np.ndarray) -> float:
    """``np.nanmedian`` of a short 1-D array (the same value; NaN where all are NaN) by one sort:
    it runs on every frame and keyframe, where np.nanmedian's overhead would dominate."""
    v = np.sort(v[~np.isnan(v)])
    n = len(v)
    return float((v[(n - 1) // 2] + v[n // 2]) / 2) if n else math.nan


def grid_order(xy: np.ndarray, cam, g: int) -> np.ndarray:
    """An order of ``xy`` (normalised ``cam`` coordinates, in order of preference) that takes the best of
    every cell of a ``g`` x ``g`` image grid first (``landmark_grid``; mono: ``mono_landmark_grid``), then
    the second best of every cell, and so on (stable: preference decides within a rank)."""
    finite = np.isfinite(xy).all(axis=1)
    xy = np.where(finite[:, None], xy, 0.0)          # non-finite rows go to the last cell below
    u = np.clip((xy[:, 0] * cam.fx + cam.cx) * (g / cam.width), 0, g - 1).astype(np.int64)
    v = np.clip((xy[:, 1] * cam.fy + cam.cy) * (g / cam.height), 0, g - 1).astype(np.int64)
    cell = np.where(finite, v * g + u, g * g)
    order = np.argsort(cell, kind="stable")
    cs = cell[order]
    start = np.searchsorted(cs, cs, side="left")
    rank = np.empty(len(cell), np.int64)
    rank[order] = np.arange(len(cs)) - start
    return np.lexsort((np.arange(len(cell)), rank))


@dataclass
class Landmark:
    key: int
    p: np.ndarray
    last_t: int
    n_obs: int = 0
    t0: int = 0                  # creation time (ns)
    t_first: int = 0             # earliest observation's keyframe time (ns)


class LandmarkMap:
    """See the module docstring. Owns the landmarks (track id -> :class:`Landmark`), the pending
    keyframe observations of tracks without one (track id -> [(kf idx, xy, raw right xy | None,
    rectified right xy | None, None)]), the tracks' outlier counts and the blacklist; counts in
    ``stats`` (``landmarks_created``, ``landmarks_active``, ``landmarks_split``, ``outliers_rejected``,
    ``blacklisted``)."""

    def __init__(self, config: BackendConfig, settings: ModeSettings, rig: CameraRig, window: KeyframeWindow,
                 stats: dict):
        self.config = config
        self.settings = settings
        self.rig = rig
        self.window = window
        self.stats = stats
        self._proj_cache: dict = {}         # keyframe index -> 3x4 world -> cam0, per keyframe update
        self.reset()

    def reset(self) -> None:
        """No landmark, nothing pending (the smoother restarts)."""
        self._lm: dict[int, Landmark] = {}
        self._pending: dict[int, list] = {}
        self._outliers: dict[int, int] = {}
        self._blacklist: set[int] = set()

    # ------------------------------------------------------------------ outputs
    def positions(self) -> np.ndarray:
        """(M, 3) world positions of the landmarks."""
        if not self._lm:
            return np.zeros((0, 3))
        return np.array([lm.p for lm in self._lm.values()])

    def keys(self) -> dict:
        """{track id: smoother key} of the landmarks."""
        return {tid: lm.key for tid, lm in self._lm.items()}

    def ids(self) -> np.ndarray:
        """Track ids in the order of :meth:`positions`."""
        return np.array(list(self._lm.keys()), np.int64)

    # ------------------------------------------------------------------ per keyframe
    def record_pending(self, fr, kf_idx: int):
        """Remember this keyframe's observation of every track without a landmark:
        (kf idx, xy, raw right xy | None, rectified right xy | None)."""
        xr = fr.xy_right
        xy_l = fr.xy.tolist()
        if xr is not None and len(fr):
            has = np.isfinite(xr).all(axis=1)
            xr_l = xr.tolist()
            if self.rig.rectified and has.any():
                xrr = np.full((len(fr), 2), np.nan)
                xrr[has] = self.rig.rectify_right(xr[has])
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

    def end_first_seen_before(self, t_ns: int) -> None:
        """End every landmark first observed before ``t_ns`` (the own smoother marginalises such a landmark
        with that state on this update); its track, seen on, starts a new landmark."""
        for tid, lm in list(self._lm.items()):
            if lm.t_first < t_ns:
                del self._lm[tid]
                self.stats["landmarks_split"] += 1

    def add_observations(self, fr, k: int, T_pred: np.ndarray, horizon: int, smoother) -> int:
        """The keyframe ``k`` (frame ``fr``, predicted pose ``T_pred``): its gated observations of existing
        landmarks and the new landmarks with their observations, into ``smoother`` (``add_landmark``,
        ``obs_adder``). Observations older than ``horizon`` (ns) are left out. Returns how many were added."""
        self._proj_cache = {}
        ids_l = fr.ids.tolist()
        if self.config.landmark_max_span_s > 0:
            # frame-to-frame tracks drift: a landmark older than the span is ended, its track starts anew
            old = fr.stamp_ns - int(self.config.landmark_max_span_s * 1e9)
            for i in ids_l:
                lm = self._lm.get(i)
                if lm is not None and lm.t0 < old:
                    del self._lm[i]
                    self.stats["landmarks_split"] += 1
        n_added = self._observe_existing(fr, ids_l, k, T_pred, smoother.obs_adder())
        self.record_pending(fr, k)
        budget = self.settings.max_obs_per_kf - n_added
        if budget <= 0:
            return n_added
        n_added += self._create(fr, ids_l, k, T_pred, horizon, budget, smoother)
        # prune pending tracks not seen in this keyframe
        seen = set(ids_l)
        pend = self._pending
        for tid in [t for t in pend if t not in seen]:
            del pend[tid]
        return n_added

    def _observe_existing(self, fr, ids_l: list, k: int, T_pred: np.ndarray, add_obs) -> int:
        """The gated observations of existing landmarks (see the module docstring)."""
        cfg, rig = self.config, self.rig
        xy = fr.xy
        xr = fr.xy_right if self.settings.mode == "stereo" else None
        lmd = self._lm
        ex = [j for j, i in enumerate(ids_l) if i in lmd]
        ex.sort(key=lambda j: -lmd[ids_l[j]].n_obs)
        max_obs = self.settings.max_obs_per_kf
        if self.settings.landmark_grid > 0 and len(ex) > max_obs:
            ex = [ex[n] for n in self._spread(xy[ex])]
        ex = ex[:max_obs]
        if not ex:
            return 0
        R_cw, t_cw = rig.cam_T_cw(T_pred)
        P = np.array([lmd[ids_l[j]].p for j in ex])
        pc = P @ R_cw.T + t_cw
        z = pc[:, 2]
        xr_rect = None
        with np.errstate(divide="ignore", invalid="ignore"):
            pred = pc[:, :2] / z[:, None]
            r = (xy[ex] - pred) / rig.sigma
            e2 = (r ** 2).sum(axis=1)
            has_r = np.zeros(len(ex), bool)
            if xr is not None and rig.rectified:
                xrr = rig.rectify_right(xr[ex])
                has_r = np.isfinite(xrr[:, 0])
                pr = (pc[:, 0] - rig.baseline) / z
                er = np.where(has_r, ((xrr[:, 0] - pr) / rig.sigma) ** 2, 0.0)
                e2 = e2 + er
                xr_rect = xrr[:, 0].tolist()
        chi = np.where(has_r, cfg.chi2_stereo, cfg.chi2_mono)
        med = nan_median(e2 / np.where(has_r, 2.37, 1.39)) if len(e2) else 1.0
        scale = max(1.0, float(med)) if np.isfinite(med) else 1.0
        good = (np.isfinite(e2) & (z > cfg.min_depth) & (e2 <= chi * scale)).tolist()
        has_l = has_r.tolist()
        xy_ex = xy[ex].tolist()
        xr_raw = xr[ex].tolist() if (xr is not None and not rig.rectified) else None
        x_key = X0 | k
        n_added = 0
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
            n_added += 1
        return n_added

    def _create(self, fr, ids_l: list, k: int, T_pred: np.ndarray, horizon: int, budget: int, smoother) -> int:
        """New landmarks from the pending observations of this keyframe's tracks (at most ``budget``
        observations' worth of landmarks); returns the observations added."""
        cfg = self.config
        pend = self._pending
        cands = [i for i in ids_l if i in pend]
        # prefer tracks with more keyframe observations
        cands.sort(key=lambda i: -len(pend[i]))
        # the keyframes still in the window: indices grow with time, so they are those from the oldest
        # one at or after the horizon on (and a track's pending observations are in keyframe order:
        # only its first can be too old)
        first_valid = self.window.first_index_from(horizon, k)
        live = []
        for tid in cands:
            obs = pend[tid]
            if obs[0][0] < first_valid:
                obs = pend[tid] = [o for o in obs if o[0] >= first_valid]
            if len(obs) >= 2:
                live.append(tid)
        if self.settings.landmark_grid > 0 and len(live) > budget:
            pos = {i: j for j, i in enumerate(ids_l)}
            live = [live[n] for n in self._spread(fr.xy[[pos[t] for t in live]])]
        live = live[:2 * budget + 8]
        fast = self._triangulate_lazily([pend[t] for t in live], budget + 8, k, T_pred)
        created = n_added = 0
        use_raw = not self.rig.rectified
        add_obs = smoother.obs_adder()
        prior = cfg.landmark_prior_sigma > 0 and (self.settings.mode != "stereo" or cfg.landmark_prior_stereo)
        prior_sigma = cfg.landmark_prior_sigma if prior else 0.0
        for tid, (P, obs, dropped) in zip(live, fast):
            if created >= budget:
                break
            self.stats["outliers_rejected"] += dropped
            if P is None:
                continue
            key = L0 | self.stats["landmarks_created"]
            self.stats["landmarks_created"] += 1
            smoother.add_landmark(key, P, prior_sigma)
            for (ki, o_xy, o_xr, o_xrr, _) in obs:
                add_obs(X0 | ki, key, o_xy, o_xrr[0] if o_xrr is not None else None, o_xr if use_raw else None)
                n_added += 1
            k0 = obs[0][0]                  # the pending observations are in keyframe order: the first is the earliest
            t_first = fr.stamp_ns if k0 == k else self.window.kfs[k0].t_ns
            self._lm[tid] = Landmark(key, P, fr.stamp_ns, len(obs), fr.stamp_ns, t_first)
            del pend[tid]
            created += 1
        return n_added

    def refresh(self, est, horizon: int, t_ns: int, removed) -> None:
        """After the smoother's update of the keyframe at ``t_ns``: drop the landmarks not observed since
        ``horizon`` and those the smoother marginalised (keys in ``removed``); the ones observed now take
        their position from its estimate ``est``."""
        seen = []
        for tid, lm in list(self._lm.items()):
            if lm.last_t < horizon or lm.key in removed:
                del self._lm[tid]
            elif lm.last_t == t_ns:
                seen.append(lm)
        for lm, p in zip(seen, est.points([lm.key for lm in seen])):
            lm.p = p
        self.stats["landmarks_active"] = len(self._lm)

    # ------------------------------------------------------------------ helpers
    def _spread(self, xy: np.ndarray) -> np.ndarray:
        return grid_order(xy, self.rig.cam0, self.settings.landmark_grid)

    def _proj(self, ki, k, T_pred):
        """3x4 [R|t] world -> cam0 of keyframe ki (cached per keyframe update)."""
        P = self._proj_cache.get(ki)
        if P is None:
            R, t = self.rig.cam_T_cw(T_pred if ki == k else self.window.kfs[ki].T)
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
        stereo = self.settings.mode == "stereo"
        C = len(cands)
        flat = [o for c in cands for o in c]
        start = np.zeros(C + 1, np.int64)
        np.cumsum(np.fromiter(map(len, cands), np.int64, C), out=start[1:])
        kf_l = [o[0] for o in flat]
        uk = sorted(set(kf_l))                  # the keyframes seen (np.unique's order, without its overhead)
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
        gate = np.where(m_r, cfg.chi2_stereo, cfg.chi2_mono) * np.where(kfi == k, 4.0, 1.0) * self.rig.sigma ** 2
        keep = np.ones(len(flat), bool)
        X = np.zeros((C, 3))
        drops = np.zeros(C, np.int64)
        ok = triangulate_candidates(P_tab, view, xy, xr, m_r, gate, start, stereo,
                                    self.rig.T_c1c0, cfg.min_depth, cfg.max_depth,
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
