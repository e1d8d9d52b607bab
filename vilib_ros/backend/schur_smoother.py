"""The smoother of ``solver = 'schur'`` (stereo's default), our own for the visual-inertial window:
Gauss-Newton with the landmarks eliminated in closed form, states dense.

In a visual-inertial window every keyframe observes landmarks that tie it to every pose of the
window, so gtsam's iSAM2 re-eliminates nearly all of the window on every keyframe update: a batch
solve by a general sparse solver. The window's structure is known in advance: a few keyframe states
(15 dimensions each: pose, velocity, bias) densely coupled, many landmarks (3 each) that touch only
poses. So per update:

1. linearise: the visual factors compiled (:mod:`.schur_kernels`: gtsam's stereo and projection
   factors, Huber), every time; the inertial ones (``CombinedImuFactor``, priors, zero-velocity
   factors: gtsam factor objects) by gtsam, and only where one of their variables moved more than the
   relinearisation threshold since (iSAM2's rule; otherwise their last linearisation, carried to
   the estimate); the marginal priors as the linear factors they are;
2. eliminate each landmark (its 3x3 block: the Schur complement) into the states' dense system,
   solve that by Cholesky, back-substitute the landmarks: one Gauss-Newton step (``update()``
   without arguments: one more);
3. marginalise what left the lag: the leaving states and with them every landmark one of them
   observed, its observations from the remaining states included, so that the marginal is a dense
   prior on states alone (VINS-Mono's marginalisation). gtsam's smoother instead keeps such a
   landmark and couples it densely to the remaining states, which would make a solver like this one
   carry three more dense unknowns per landmark. The estimator ends those landmarks' tracks at the
   same moment, so a track seen on starts a new landmark; with a longer window than iSAM2's the
   trajectory stays as accurate.

The interface is the estimator's smoother interface (:mod:`.smoother`): the part of gtsam's
``IncrementalFixedLagSmoother`` it uses (``update``, ``estimate``, ``marginalCovariance``,
``setSmootherLag``, ``timestamps``), plus the visual input without gtsam objects:
:meth:`SchurSmoother.add_landmark` and :meth:`SchurSmoother.obs_adder`, and ``removed_landmarks``. A
system that is not positive definite raises :class:`IndeterminantSystem` (the estimator resets, as
after gtsam's exception). The window's parts (landmark table, state factors with their cached
linearisations, marginal priors) are in :mod:`.schur_window`.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg

from ._gtsam import load as load_gtsam
from .schur_kernels import STATE_DIM, landmark_steps, retract_states, states_local, visual_normal_equations
from .schur_kernels import warm_up as kernels_warm_up
from .schur_window import IDX_MASK as _IDX_MASK
from .schur_window import OFFSET as _OFFSET
from .schur_window import LandmarkTable, MarginalPrior, StateFactors

_X, _V, _B, _L = (ord(c) for c in "xvbl")
# LAPACK's Cholesky directly (scipy's cho_factor / cho_solve add checks to every call)
_potrf, _potrs = scipy.linalg.get_lapack_funcs(("potrf", "potrs"), (np.zeros(1),))


class IndeterminantSystem(RuntimeError):
    """The window's normal equations are not positive definite (an unconstrained direction)."""


class SchurSmoother:
    """See the module docstring. ``sigma``: the visual factors' isotropic sigma (normalised
    coordinates); ``huber_k``: Huber threshold in sigmas; ``baseline``: the rectified stereo
    baseline (m); ``T_bs0`` / ``T_bs1``: cam0 / cam1 in the body (4x4; cam1 for projection factors
    of a pair that is not rectified)."""

    def __init__(self, lag: float, sigma: float, huber_k: float, T_bs0: np.ndarray, baseline: float = 0.0,
                 T_bs1: np.ndarray | None = None, relinearize_threshold: float = 0.01, keep_landmarks: int = 0):
        gtsam = load_gtsam()

        self._g = gtsam
        self._lag = float(lag)
        self._sigma, self._huber = float(sigma), float(huber_k)
        self._baseline = float(baseline)
        T1 = T_bs0 if T_bs1 is None else T_bs1
        self._Rbs = np.ascontiguousarray(np.stack([T_bs0[:3, :3], T1[:3, :3]]), np.float64)
        self._tbs = np.ascontiguousarray(np.stack([T_bs0[:3, 3], T1[:3, 3]]), np.float64)
        self._relin = float(relinearize_threshold)
        self._keep_lm = int(keep_landmarks)  # BackendConfig.schur_keep_landmarks
        self._slots: list[int] = []         # keyframe index of each state slot, oldest first
        self._slot_of: dict[int, int] = {}
        self._state_t: dict[int, float] = {}    # keyframe index -> stamp [s]
        # the states' estimate, slot by slot: pose (R body -> world, t), velocity, bias [acc, gyro]
        self._Rs, self._ts = np.zeros((0, 3, 3)), np.zeros((0, 3))
        self._vs, self._bs = np.zeros((0, 3)), np.zeros((0, 6))
        self._factors = StateFactors(gtsam)  # gtsam's inertial and prior factors, linearised when stale
        self._priors: list = []             # MarginalPrior
        self._lm = LandmarkTable()
        self._now = -np.inf
        self._H = None                      # the last update's states system (marginal covariances)
        self._bufs: dict = {}               # work arrays kept between updates (_buf)
        self.removed_landmarks: set = set()  # landmark keys marginalised by the last update
        self.last_obs_used = 0
        kernels_warm_up()

    # ------------------------------------------------------------------ inputs
    def setSmootherLag(self, lag: float) -> None:  # noqa: N802 - gtsam's name
        self._lag = float(lag)

    def smootherLag(self) -> float:  # noqa: N802
        return self._lag

    def add_landmark(self, key: int, p, prior_sigma: float = 0.0) -> None:
        """A new landmark at ``p`` (world), with an isotropic prior there where ``prior_sigma`` > 0;
        it joins the system at the next :meth:`update`."""
        self._lm.add(key, p, prior_sigma)

    def obs_adder(self):
        """``add_obs(X, L, xy, xr_rect, xr_raw)`` as the estimator's ``_obs_adder`` gives it: a stereo
        observation where the rectified right x is known, else a projection into cam0 (and one
        into cam1 where the raw right point is given)."""
        return self._lm.adder()

    # ------------------------------------------------------------------ update
    def update(self, graph=None, values=None, stamps: dict | None = None, newest=()) -> None:
        """New inertial / prior factors (``graph``: gtsam factors on state keys), new states
        (``values``), stamps [s] of new and refreshed keys; one Gauss-Newton step; then the
        marginalisation of what left the lag. ``removed_landmarks``: what this update and the extra
        ones after it (``update()`` without arguments, ``extra_updates``) marginalised, for the
        estimator to end those tracks' landmarks."""
        if graph is not None or values is not None or stamps:
            # a keyframe's update starts the set; an extra step adds to it (the estimator must see the
            # first update's removals too, or it reads a removed landmark)
            self.removed_landmarks = set()
        if values is not None and values.size():
            self._add_states(values)
        if graph is not None:
            for i in range(graph.size()):
                f = graph.at(i)
                if f is not None:
                    self._factors.add(f, self._slot_of)
        landmark_stamps = self._stamp(stamps or {})
        self._lm.ingest(self._slots, self._now)
        for k, t in landmark_stamps:
            self._lm.stamp(k, t)
        self._step()
        self._marginalise()

    def _add_states(self, values) -> None:
        new = []
        for k in values.keys():
            if (k >> 56) == _X:
                i = k & _IDX_MASK
                self._slot_of[i] = len(self._slots)
                self._slots.append(i)
                new.append(i)
        self._factors.add_values(values, new)
        T = np.array([values.atPose3(_X << 56 | i).matrix() for i in new])
        self._Rs = np.concatenate([self._Rs, T[:, :3, :3]])
        self._ts = np.concatenate([self._ts, T[:, :3, 3]])
        self._vs = np.concatenate([self._vs, np.array([values.atVector(_V << 56 | i) for i in new])])
        self._bs = np.concatenate([self._bs, np.array([values.atConstantBias(_B << 56 | i).vector() for i in new])])

    def _stamp(self, stamps: dict) -> list:
        """The states' stamps [s]; returns the landmarks' (key, stamp), set once they are in."""
        lm = []
        for k, t in stamps.items():
            c = k >> 56
            if c == _L:
                lm.append((k, t))
            elif c == _X or c == _V or c == _B:
                self._state_t[k & _IDX_MASK] = t
            self._now = max(self._now, t)
        return lm

    # ------------------------------------------------------------------ linearisation
    def _rows(self, keys) -> np.ndarray:
        out = []
        for k in keys:
            off, dim = _OFFSET[k >> 56]
            base = STATE_DIM * self._slot_of[k & _IDX_MASK] + off
            out.extend(range(base, base + dim))
        return np.array(out, np.int64)

    def _inertial_system(self, H, g, select: set | None = None) -> list:
        """Adds the gtsam factors and the marginal priors (all, or those touching a slot in
        ``select``) to ``H``, ``g``; returns the priors added and marks the factors (``used``)."""
        st = (self._Rs, self._ts, self._vs, self._bs)
        self._factors.normal_equations(st, self._slots, self._relin, H, g, select)
        used = []
        idx = None if select is None else {self._slots[s] for s in select}
        for p in self._priors:
            if idx is not None and not (p.slots & idx):
                continue
            slots = np.array([self._slot_of[i] for i in p.kf], np.int64)
            d0 = np.empty(len(p.g))
            states_local(slots, p.R, p.t, p.v, p.b, *st, d0)
            if np.all(np.diff(slots) == 1):         # consecutive slots (as a marginalisation leaves them)
                a = STATE_DIM * int(slots[0])
                sl = slice(a, a + len(p.g))
                H[sl, sl] += p.H
                g[sl] += p.g + p.H @ d0
            else:
                r = self._rows(p.keys)
                H[np.ix_(r, r)] += p.H
                g[r] += p.g + p.H @ d0
            used.append(p)
        return used

    def _visual_system(self, H, g, lm_on, obs_on, rows=None):
        """The visual factors' normal equations into ``H``, ``g`` (landmarks eliminated); ``rows``:
        only these observations (the marginalisation's), else all."""
        t = self._lm
        st, lm, kind, z = t.o_state, t.o_lm, t.o_kind, t.o_z
        if rows is not None:
            st, lm, kind, z, obs_on = st[rows], lm[rows], kind[rows], z[rows], obs_on[rows]
        L, O = len(t), len(st)
        self._Hll_inv = self._buf("Hll_inv", (L, 3, 3))
        self._gl = self._buf("gl", (L, 3))
        self._Hpl = self._buf("Hpl", (O, 6, 3))
        self.last_obs_used = visual_normal_equations(
            self._Rs, self._ts, self._Rbs, self._tbs, self._baseline, t.P, lm_on, t.prior_H, t.prior_g, t.prior_P,
            st, lm, kind, z, obs_on, self._sigma, self._huber, len(self._slots), H, g, self._Hll_inv, self._gl,
            self._Hpl)

    def _buf(self, name: str, shape: tuple, zero: bool = False) -> np.ndarray:
        """A work array of ``shape`` in memory kept between updates: a fresh ``np.zeros`` of the
        window's system would be new pages every time, and their first touch (page faults) costs more
        than the kernels that fill them."""
        size = int(np.prod(shape))
        b = self._bufs.get(name)
        if b is None or b.size < size:
            b = self._bufs[name] = np.zeros(max(size, 2 * (b.size if b is not None else 0)))
        a = b[:size].reshape(shape)
        if zero:
            a.fill(0.0)
        return a

    def _step(self) -> None:
        n = STATE_DIM * len(self._slots)
        H, g = self._buf("H", (n, n), zero=True), self._buf("g", (n,), zero=True)
        self._inertial_system(H, g)
        t = self._lm
        lm_on = np.ones(len(t), np.bool_)
        obs_on = np.ones(len(t.o_state), np.bool_)
        self._visual_system(H, g, lm_on, obs_on)
        C = self._buf("chol", (n, n))
        np.copyto(C, H)
        c, info = _potrf(C, lower=True, overwrite_a=True, clean=False)
        if info != 0:
            raise IndeterminantSystem(f"the window's system is not positive definite (LAPACK potrf info {info})")
        d, info = _potrs(c, g, lower=True)
        d = -d
        if info != 0 or not np.all(np.isfinite(d)):
            raise IndeterminantSystem("the window's step is not finite")
        self._H = (c, list(self._slots))
        dP = np.zeros_like(t.P)
        landmark_steps(d, self._Hll_inv, self._gl, self._Hpl, t.o_state, t.o_lm, obs_on, lm_on, dP)
        t.P += dP
        retract_states(self._Rs, self._ts, self._vs, self._bs, d)

    # ------------------------------------------------------------------ marginalisation
    def _marginalise(self) -> None:
        limit = self._now - self._lag
        leave = {s for s, i in enumerate(self._slots) if self._state_t.get(i, np.inf) < limit}
        t = self._lm
        lm_leave = t.t < limit
        if not leave and not lm_leave.any():
            return
        if leave:
            # a landmark leaves with the first state that observed it (VINS-Mono's marginalisation: the
            # marginal stays on states alone); the estimator ends its track's landmark at the same time.
            # keep_landmarks > 0: one with that many observations by remaining states is marginalised all
            # the same, and then goes on in the window from its estimate with those observations
            # (VINS-Mono's depth shift: they are in the marginal too)
            seen = np.isin(t.o_state, np.fromiter(leave, np.int64))
            lm_leave[t.o_lm[seen]] = True
            if self._keep_lm > 0:
                stays = np.bincount(t.o_lm[~seen], minlength=len(t)) >= self._keep_lm
        obs_out = lm_leave[t.o_lm]              # observations that leave with their landmark
        n = STATE_DIM * len(self._slots)
        H, g = self._buf("H", (n, n), zero=True), self._buf("g", (n,), zero=True)
        used = self._inertial_system(H, g, select=leave)
        self._visual_system(H, g, lm_leave, obs_out, rows=np.flatnonzero(obs_out))
        m_rows = np.array([STATE_DIM * s + j for s in sorted(leave) for j in range(STATE_DIM)], np.int64)
        keep = [s for s in range(len(self._slots)) if s not in leave]
        blk = np.abs(H).reshape(len(self._slots), STATE_DIM, len(self._slots), STATE_DIM).sum(axis=(1, 3))
        sep = [s for s in keep if blk[s].any()]
        k_rows = np.array([STATE_DIM * s + j for s in sep for j in range(STATE_DIM)], np.int64)
        if len(k_rows):
            Hkk, gk = H[np.ix_(k_rows, k_rows)], g[k_rows]
            if len(m_rows):
                Hmm, Hkm = H[np.ix_(m_rows, m_rows)], H[np.ix_(k_rows, m_rows)]
                X = _pd_solve(Hmm, np.column_stack([Hkm.T, g[m_rows]]))     # Hmm^-1 [Hmk, g_m]
                Hkk = Hkk - Hkm @ X[:, :-1]
                gk = gk - Hkm @ X[:, -1]
            kf = [self._slots[s] for s in sep]
            idx = np.array(sep, np.int64)
            prior = MarginalPrior(kf, 0.5 * (Hkk + Hkk.T), gk, self._Rs[idx].copy(), self._ts[idx].copy(),
                           self._vs[idx].copy(), self._bs[idx].copy())
        else:
            prior = None
        # drop what was marginalised
        used_ids = {id(u) for u in used}
        self._priors = [p for p in self._priors if id(p) not in used_ids] + ([prior] if prior else [])
        if leave and self._keep_lm > 0:
            lm_leave &= ~stays
            obs_out = lm_leave[t.o_lm]
        self.removed_landmarks |= set(t.keys[lm_leave].tolist())
        self._drop(leave, lm_leave, obs_out)


    def _drop(self, leave: set, lm_leave: np.ndarray, obs_out: np.ndarray) -> None:
        keep_slots = [s for s in range(len(self._slots)) if s not in leave]
        for s in sorted(leave):
            self._state_t.pop(self._slots[s], None)
        self._factors.drop_marked([self._slots[s] for s in leave])
        remap = np.full(len(self._slots), -1, np.int64)
        remap[keep_slots] = np.arange(len(keep_slots))
        self._slots = [self._slots[s] for s in keep_slots]
        self._slot_of = {i: s for s, i in enumerate(self._slots)}
        ks = np.array(keep_slots, np.int64)
        self._Rs, self._ts, self._vs, self._bs = self._Rs[ks], self._ts[ks], self._vs[ks], self._bs[ks]
        self._factors.remap(remap)
        self._lm.drop(lm_leave, obs_out, remap)

    # ------------------------------------------------------------------ outputs
    def estimate(self) -> "SchurEstimate":
        return SchurEstimate(self)

    def calculateEstimate(self):  # noqa: N802
        return self.estimate()

    def marginalCovariance(self, key: int):  # noqa: N802
        """Covariance of a state key (its tangent space) from the last update's system."""
        if self._H is None:
            raise KeyError(key)
        c, slots = self._H
        i = key & _IDX_MASK
        if i not in slots:
            raise KeyError(key)
        off, dim = _OFFSET[key >> 56]
        n = c.shape[0]
        E = np.zeros((n, dim))
        b = STATE_DIM * slots.index(i) + off
        E[b:b + dim] = np.eye(dim)
        return _potrs(c, E, lower=True)[0][b:b + dim]

    def timestamps(self) -> dict:
        """{key: stamp [s]} of the states and landmarks in the window (as gtsam's smoother gives it)."""
        out = {c << 56 | i: t for i, t in self._state_t.items() if i in self._slot_of for c in (_X, _V, _B)}
        out.update(zip(self._lm.keys.tolist(), self._lm.t.tolist()))
        return out

    def landmarks_with_prior(self) -> int:
        """How many landmarks in the window carry a prior (a mono landmark's weak creation prior)."""
        return self._lm.with_prior()


class SchurEstimate:
    """The estimate as the estimator reads it (``exists``, ``atPose3``, ``atVector``,
    ``atConstantBias``, ``atPoint3``), from the smoother's arrays (gtsam objects where the
    estimator expects them)."""

    __slots__ = ("_s",)

    def __init__(self, s: SchurSmoother):
        self._s = s

    def _slot(self, key: int) -> int:
        return self._s._slot_of[key & _IDX_MASK]

    def exists(self, key: int) -> bool:
        s = self._s
        c = key >> 56
        return key in s._lm.row if c == _L else (c in _OFFSET and (key & _IDX_MASK) in s._slot_of)

    def atPose3(self, key: int) -> "_Matrix":  # noqa: N802
        """The pose; read as gtsam's is: ``.matrix()`` (4x4)."""
        s, i = self._s, self._slot(key)
        T = np.eye(4)
        T[:3, :3], T[:3, 3] = s._Rs[i], s._ts[i]
        return _Matrix(T)

    def atVector(self, key: int) -> np.ndarray:  # noqa: N802
        return self._s._vs[self._slot(key)].copy()

    def atConstantBias(self, key: int) -> "_Vector":  # noqa: N802
        """The bias; read as gtsam's is: ``.vector()`` ([acc, gyro])."""
        return _Vector(self._s._bs[self._slot(key)].copy())

    def atPoint3(self, key: int) -> np.ndarray:  # noqa: N802
        t = self._s._lm
        return t.P[t.row[key]].copy()

    def points(self, keys: list) -> np.ndarray:
        """(len(keys), 3): :meth:`atPoint3` of each key, in one read (a new array)."""
        t = self._s._lm
        row = t.row
        return t.P[np.fromiter((row[k] for k in keys), np.int64, len(keys))]


class _Matrix:
    __slots__ = ("_m",)

    def __init__(self, m):
        self._m = m

    def matrix(self) -> np.ndarray:
        return self._m


class _Vector:
    __slots__ = ("_v",)

    def __init__(self, v):
        self._v = v

    def vector(self) -> np.ndarray:
        return self._v


def _pd_solve(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A^-1 B`` for a symmetric positive (semi-)definite ``A``: Cholesky, else the pseudo-inverse
    (a direction without information is left out of the marginal)."""
    c, info = _potrf(A, lower=True, overwrite_a=False, clean=False)
    if info == 0:
        return _potrs(c, B, lower=True)[0]
    w, V = np.linalg.eigh(0.5 * (A + A.T))
    keep = w > 1e-9 * max(float(w.max()), 1e-300)
    return (V[:, keep] / w[keep]) @ (V[:, keep].T @ B)
