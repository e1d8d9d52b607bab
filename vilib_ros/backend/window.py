"""The keyframe states in the smoother's window: the one piece of state the estimator's members share.

:class:`KeyframeWindow` holds the keyframes whose states are in the window (index -> :class:`Keyframe`:
time, pose, velocity, bias, the tracks seen there), the newest of them, and the time origin the
smoother's stamps count from. The estimator writes it (a keyframe accepted, the window restarted after
initialisation or a reset); the keyframe policy reads the newest keyframe (parallax, rest), the
landmark map the keyframes' poses (triangulation) and times (which observations are still in the
window). Every time is integer nanoseconds; the smoother receives ``(t_ns - t0_ns) * 1e-9`` (seconds
since the first frame), so that float rounding never reorders or merges keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the smoother's keys: pose X(k), velocity V(k), bias B(k) of keyframe k, landmark L(n); ``X0 | k`` is
#: ``gtsam.symbol("x", k)`` (Symbol's layout: the character in the top byte), without a call into gtsam
X0, V0, B0, L0 = (ord(c) << 56 for c in "xvbl")


@dataclass
class Keyframe:
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


class KeyframeWindow:
    """See the module docstring. ``kfs``: index -> keyframe, in increasing index (and time) order;
    ``last``: the newest; ``idx``: its index (indices count on across restarts, so that a restarted
    smoother never meets a key of the one before)."""

    def __init__(self):
        self.t0_ns = 0
        self.kfs: dict[int, Keyframe] = {}
        self.last: Keyframe | None = None
        self.idx = -1

    def ts(self, t_ns: int) -> float:
        """The smoother's stamp of ``t_ns``: seconds since the time origin."""
        return (int(t_ns) - self.t0_ns) * 1e-9

    def clear(self) -> None:
        """No keyframe in the window (a restart; :meth:`restart` follows)."""
        self.kfs = {}

    def restart(self, kf: Keyframe) -> None:
        """The window holds ``kf`` alone (the smoother started on its state)."""
        self.kfs = {kf.idx: kf}
        self.last = kf
        self.idx = kf.idx

    def accept(self, kf: Keyframe, horizon_ns: int, est) -> None:
        """``kf`` is the newest keyframe; those older than ``horizon_ns`` leave the window, the others
        take their pose from the smoother's estimate ``est`` (where it still holds their pose)."""
        self.idx = kf.idx
        self.kfs[kf.idx] = kf
        self.last = kf
        for i in [i for i, f in self.kfs.items() if f.t_ns < horizon_ns and i != kf.idx]:
            del self.kfs[i]
        for i, f in self.kfs.items():
            xi = X0 | i
            if i != kf.idx and est.exists(xi):
                f.T = est.atPose3(xi).matrix()

    def first_index_from(self, horizon_ns: int, default: int) -> int:
        """The oldest keyframe at or after ``horizon_ns`` (``default`` where there is none)."""
        return min((i for i, f in self.kfs.items() if f.t_ns >= horizon_ns), default=default)
