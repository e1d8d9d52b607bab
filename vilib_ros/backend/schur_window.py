"""The parts of :class:`.schur_smoother.SchurSmoother`'s window: the landmarks and their
observations (:class:`LandmarkTable`), the gtsam factors on states with their cached
linearisations (:class:`StateFactors`), the marginal priors (:class:`MarginalPrior`)."""
from __future__ import annotations

import numpy as np

from .schur_kernels import STATE_DIM, factor_normal_equations, pose_local

_X, _V, _B, _L = (ord(c) for c in "xvbl")
OFFSET = {_X: (0, 6), _V: (6, 3), _B: (9, 6)}     # a state key's rows in its slot
_OFFSET = OFFSET
IDX_MASK = (1 << 56) - 1
_IDX_MASK = IDX_MASK


class LandmarkTable:
    """The window's landmarks and their observations as arrays, rows in increasing key order: the
    landmarks' points ``P``, stamps ``t`` and priors (a linear factor each: information ``prior_H``,
    gradient ``prior_g`` at ``prior_P``); per observation its state slot ``o_state``, landmark row
    ``o_lm``, kind ``o_kind`` (0 stereo, 1 mono cam0, 2 mono cam1) and measurement ``o_z``.
    New landmarks (:meth:`add`) and observations (:meth:`adder`) wait until :meth:`ingest`."""

    def __init__(self):
        self.row: dict[int, int] = {}       # key -> row
        self.keys = np.zeros(0, np.int64)   # the keys by row: increasing (rows keep their order)
        self.P = np.zeros((0, 3))
        self.t = np.zeros(0)
        self.prior_H = np.zeros((0, 3, 3))
        self.prior_g = np.zeros((0, 3))
        self.prior_P = np.zeros((0, 3))
        self.o_state = np.zeros(0, np.int64)
        self.o_lm = np.zeros(0, np.int64)
        self.o_kind = np.zeros(0, np.int64)
        self.o_z = np.zeros((0, 3))
        self._new_lm: list = []             # (key, point, prior sigma)
        self._new_obs: list = []            # (keyframe index, L key) of the observations since the last ingest
        self._new_z: list = []              # (kind, z0, z1, z2) of the same

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: int, p, prior_sigma: float = 0.0) -> None:
        self._new_lm.append((int(key), np.asarray(p, np.float64), float(prior_sigma)))

    def adder(self):
        """``add_obs(X, L, xy, xr_rect, xr_raw)``: a stereo observation where the rectified right x
        is known, else a projection into cam0 (and one into cam1 where the raw right point is given)."""
        app, appz = self._new_obs.append, self._new_z.append
        nan, mask = float("nan"), _IDX_MASK

        def add_obs(X: int, L: int, xy, xr_rect, xr_raw) -> None:
            if xr_rect is not None and xr_rect == xr_rect:
                app((X & mask, L))
                appz((0, xy[0], xr_rect, xy[1]))
                return
            app((X & mask, L))
            appz((1, xy[0], xy[1], nan))
            if xr_raw is not None and xr_raw[0] == xr_raw[0]:
                app((X & mask, L))
                appz((2, xr_raw[0], xr_raw[1], nan))

        return add_obs

    def ingest(self, slots: list, now: float) -> None:
        """The new landmarks and observations into the arrays (``slots``: the state slots' keyframe
        indices, increasing); an observed landmark's stamp becomes ``now``."""
        if self._new_lm:
            new, self._new_lm = self._new_lm, []
            keys = np.array([k for k, _, _ in new], np.int64)
            last = self.keys[-1] if len(self.keys) else -1
            if not (keys[0] > last and np.all(np.diff(keys) > 0)):
                raise ValueError("landmark keys must be new and increasing (the estimator numbers its landmarks)")
            n0 = len(self.keys)
            self.row.update(zip(keys.tolist(), range(n0, n0 + len(keys))))
            P = np.array([p for _, p, _ in new])
            info = np.array([1.0 / (s * s) if s > 0 else 0.0 for _, _, s in new])
            self.keys = np.concatenate([self.keys, keys])
            self.P = np.concatenate([self.P, P])
            self.t = np.concatenate([self.t, np.full(len(new), now)])
            self.prior_P = np.concatenate([self.prior_P, P])
            self.prior_g = np.concatenate([self.prior_g, np.zeros((len(new), 3))])
            self.prior_H = np.concatenate([self.prior_H, info[:, None, None] * np.eye(3)])
        if not self._new_obs:
            return
        ints = np.array(self._new_obs, np.int64)
        z = np.array(self._new_z, np.float64)
        self._new_obs, self._new_z = [], []
        # slots and landmark rows by binary search: both are kept in increasing order of their keys
        sl = np.array(slots, np.int64)
        st = np.searchsorted(sl, ints[:, 0])
        lm = np.searchsorted(self.keys, ints[:, 1])
        bad = (st >= len(sl)) | (lm >= len(self.keys))
        if bad.any() or np.any(sl[st] != ints[:, 0]) or np.any(self.keys[lm] != ints[:, 1]):
            raise ValueError("observation of an unknown state or landmark")
        self.t[lm] = now                        # an observation refreshes its landmark's stamp
        self.o_state = np.concatenate([self.o_state, st])
        self.o_lm = np.concatenate([self.o_lm, lm])
        self.o_kind = np.concatenate([self.o_kind, z[:, 0].astype(np.int64)])
        self.o_z = np.concatenate([self.o_z, z[:, 1:4]])

    def stamp(self, key: int, t: float) -> None:
        r = self.row.get(key)
        if r is not None:
            self.t[r] = t

    def drop(self, leave: np.ndarray, obs_out: np.ndarray, slot_remap: np.ndarray) -> None:
        """Drops the landmarks ``leave`` (bool per row) and the observations ``obs_out``; the
        remaining observations' slots renumbered by ``slot_remap`` (old -> new, -1: gone)."""
        keep = ~leave
        remap = np.full(len(self.keys), -1, np.int64)
        remap[keep] = np.arange(int(keep.sum()))
        self.keys = self.keys[keep]
        self.row = dict(zip(self.keys.tolist(), range(len(self.keys))))
        self.P, self.t = self.P[keep], self.t[keep]
        self.prior_H, self.prior_g, self.prior_P = self.prior_H[keep], self.prior_g[keep], self.prior_P[keep]
        ok = ~obs_out & keep[self.o_lm] & (slot_remap[self.o_state] >= 0)
        self.o_state, self.o_lm = slot_remap[self.o_state[ok]], remap[self.o_lm[ok]]
        self.o_kind, self.o_z = self.o_kind[ok], self.o_z[ok]

    def with_prior(self) -> int:
        return int((np.abs(self.prior_H).reshape(len(self.prior_H), -1).sum(axis=1) > 0).sum())


class StateFactors:
    """gtsam factors on state keys (``CombinedImuFactor``, priors, zero-velocity factors), each on
    one state slot or two consecutive ones, with its last linearisation (15 rows per slot: ``H``
    = ``A^T A``, ``c`` = ``A^T b``) and where it was taken. Linearised by gtsam again only where a
    variable moved more than the relinearisation threshold from that point
    (:func:`.schur_kernels.factor_normal_equations`). The arrays hold ``n`` factors in a larger capacity."""

    _ARRAYS = (("s0", (), np.int64), ("two", (), np.bool_), ("rows", (30,), np.bool_), ("H", (30, 30), float),
               ("c", (30,), float), ("R", (2, 3, 3), float), ("t", (2, 3), float), ("v", (2, 3), float),
               ("b", (2, 6), float), ("marked", (), np.bool_), ("fresh", (), np.bool_))

    def __init__(self, gtsam):
        self._g = gtsam
        # the states as gtsam values, for gtsam's linearisation: brought to the estimate only where a
        # factor is linearised (``_at``: each state's value there, as arrays)
        self.theta = gtsam.Values()
        self._at: dict = {}             # keyframe index -> (R, t, v, b) of its value in theta
        self.f: list = []               # the gtsam factors
        self.kf: list = []              # their keyframe indices, in slot order
        self.cols: list = []            # per factor: its Jacobian's columns in the 30-row layout
        self.n = 0
        self._cap = {name: np.zeros((16,) + shape, dt) for name, shape, dt in self._ARRAYS}

    def __getattr__(self, name):
        cap = self.__dict__.get("_cap")
        if cap is not None and name in cap:
            return cap[name][:self.n]
        raise AttributeError(name)

    def add_values(self, values, new: list) -> None:
        """New states (``values``: gtsam values of their keys; ``new``: their keyframe indices)."""
        self.theta.insert(values)
        for i in new:
            T = values.atPose3(_X << 56 | i).matrix()
            self._at[i] = (T[:3, :3].copy(), T[:3, 3].copy(), np.asarray(values.atVector(_V << 56 | i), float),
                           np.asarray(values.atConstantBias(_B << 56 | i).vector(), float))

    def add(self, f, slot_of: dict) -> None:
        keys = list(f.keys())
        if any((k >> 56) not in _OFFSET for k in keys):
            raise ValueError("SchurSmoother takes gtsam factors on states (x, v, b) only; landmarks and their "
                             "observations through add_landmark / obs_adder")
        kf = sorted({k & _IDX_MASK for k in keys}, key=lambda i: slot_of[i])
        if len(kf) > 2 or (len(kf) == 2 and slot_of[kf[1]] != slot_of[kf[0]] + 1):
            raise ValueError("a state factor must span one state or two consecutive ones")
        cols = []
        for k in keys:
            off, dim = _OFFSET[k >> 56]
            base = STATE_DIM * kf.index(k & _IDX_MASK) + off
            cols.extend(range(base, base + dim))
        if self.n == len(self._cap["s0"]):
            self._cap = {k: np.concatenate([a, np.zeros_like(a)]) for k, a in self._cap.items()}
        j = self.n
        self.n += 1
        self.f.append(f)
        self.kf.append(kf)
        self.cols.append(np.array(cols, np.int64))
        c = self._cap
        c["s0"][j], c["two"][j] = slot_of[kf[0]], len(kf) == 2
        c["rows"][j] = False
        c["rows"][j, cols] = True
        c["marked"][j], c["fresh"][j] = False, True     # not linearised yet
        c["R"][j] = np.eye(3)                           # a valid point until then

    def normal_equations(self, st, slots: list, thresh: float, H, g, select: set | None) -> None:
        """Adds the factors (those touching a slot in ``select``, or all; marked for removal then)
        to ``H``, ``g``, linearising the stale ones at the estimate ``st`` = (Rs, ts, vs, bs)."""
        n = self.n
        if not n:
            return
        if select is None:
            on = np.ones(n, np.bool_)
        else:
            sel = np.zeros(len(slots) + 1, np.bool_)
            sel[list(select)] = True
            on = sel[self.s0] | (self.two & sel[np.minimum(self.s0 + 1, len(slots))])
            self.marked[:] |= on
        for j in np.flatnonzero(self.fresh & on):
            self._linearise(int(j), st)
        stale = np.zeros(n, np.bool_)
        factor_normal_equations(self.s0, self.two, self.rows, self.H, self.c, self.R, self.t, self.v, self.b,
                                *st, thresh, on, H, g, stale)
        for j in np.flatnonzero(stale):
            self._linearise(int(j), st)
            b = STATE_DIM * int(self.s0[j])
            m = 2 * STATE_DIM if self.two[j] else STATE_DIM
            H[b:b + m, b:b + m] += self.H[j, :m, :m]
            g[b:b + m] -= self.c[j, :m]

    def _linearise(self, j: int, st) -> None:
        g = self._g
        Rs, ts, vs, bs = st
        vv = g.VectorValues()
        d = np.empty(6)
        cap = self._cap
        for q in range(2 if cap["two"][j] else 1):
            s, i = int(cap["s0"][j]) + q, self.kf[j][q]
            R0, t0, v0, b0 = self._at[i]
            # every step moves every state a little: bring theta's value to the estimate
            pose_local(R0, t0, Rs[s], ts[s], d)
            vv.insert(_X << 56 | i, d.copy())
            vv.insert(_V << 56 | i, vs[s] - v0)
            vv.insert(_B << 56 | i, bs[s] - b0)
            self._at[i] = (Rs[s].copy(), ts[s].copy(), vs[s].copy(), bs[s].copy())
            cap["R"][j, q], cap["t"][j, q], cap["v"][j, q], cap["b"][j, q] = Rs[s], ts[s], vs[s], bs[s]
        self.theta = self.theta.retract(vv)
        A, b = self.f[j].linearize(self.theta).jacobian()
        cap["fresh"][j] = False
        A30 = np.zeros((A.shape[0], 30))
        A30[:, self.cols[j]] = A
        cap["H"][j] = A30.T @ A30
        cap["c"][j] = A30.T @ b

    def remap(self, remap: np.ndarray) -> None:
        """Slots renumbered after a marginalisation (``remap[old] = new``)."""
        self.s0[:] = remap[self.s0]

    def drop_marked(self, gone: list) -> None:
        """Drops the factors marked by the marginalisation and the values of the states ``gone``."""
        for i in gone:
            for c in (_X, _V, _B):
                self.theta.erase(c << 56 | i)
            self._at.pop(i, None)
        keep = ~self.marked
        if keep.all():
            return
        idx = np.flatnonzero(keep)
        self.f = [self.f[i] for i in idx]
        self.kf = [self.kf[i] for i in idx]
        self.cols = [self.cols[i] for i in idx]
        m = len(idx)
        for a in self._cap.values():
            a[:m] = a[idx]
        self.n = m


class MarginalPrior:
    """A marginal prior on states (``kf``: their keyframe indices): information ``H`` and
    gradient ``g`` (15 rows per state: pose, velocity, bias) at the linearisation point ``R``,
    ``t``, ``v``, ``b`` (one row per state). At the current estimate its gradient is ``g + H d0``,
    ``d0`` the estimate's local coordinates there (gtsam's ``LinearContainerFactor``)."""

    __slots__ = ("kf", "slots", "keys", "H", "g", "R", "t", "v", "b")

    def __init__(self, kf, H, g, R, t, v, b):
        self.kf = list(kf)
        self.slots = frozenset(kf)
        self.keys = [c << 56 | i for i in kf for c in (_X, _V, _B)]
        self.H, self.g, self.R, self.t, self.v, self.b = H, g, R, t, v, b
