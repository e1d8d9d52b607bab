"""The estimator's health while tracking is poor: :class:`TrackingHealth` (losses and recoveries of visual
tracking) and :class:`OdometryCovariance` (the covariance the odometry reports).

Tracking: a keyframe whose frame has fewer than ``tracking_min_tracks`` tracks (the frontend lost them: a
covered lens, darkness, a blank wall, blur), or whose tracks give the smoother no visual observation where
they should (stereo, moving), is a tracking loss: the IMU alone carries the state. Not one: a monocular
estimator's tracks waiting for the parallax that makes their landmarks (after the start, or at rest), and
a vehicle at rest (the zero-velocity update holds it). The first such keyframe counts a loss
(``tracking_lost``) and warns (throttled: a flickering loss warns once, then at most every 10 s with the
count held back); the first keyframe with enough observations again counts a recovery
(``tracking_recovered``), logged with how long the loss lasted; ``tracking_lost_ms`` totals the time lost
in the losses recovered from. :attr:`TrackingHealth.lost_since` is the loss's start while it lasts (None
while tracking).

Covariance: the smoother's marginal of the newest keyframe (taken once per keyframe, when asked) in the
world-frame error state (:func:`~.covariance.world_covariance`), propagated to each frame's stamp by the
IMU's error dynamics (:func:`~.covariance.propagate`, with the preintegration's white-noise densities): a
frame between keyframes is an IMU prediction, and while tracking is lost every keyframe's marginal is the
IMU's alone, so the published covariance grows from the last visual update on.

* While tracking is lost each block (rotation, position, velocity) is the larger (by trace) of the
  smoother's marginal and the IMU propagation of the covariance reported before the loss: the newest
  state's marginal alone can dip at first where the position and velocity errors were anticorrelated, and
  without a visual observation nothing is learned. Tracks back, the smoother's marginal rules again and the
  velocity's (and the tilt's) falls.
* Where the smoother gives no marginal, the last one is propagated over the longer time.
* A smoother restart (a reset, or the re-initialisation after an IMU hole) anchors the new window with
  priors that know nothing of the uncertainty before it: the position and heading uncertainty reached at
  the restart (after an IMU hole with the motion the hole hid, at the last speed) is kept and added to
  every later marginal, since nothing observes the absolute position or heading again.
"""
from __future__ import annotations

import logging

import numpy as np

from .config import BackendConfig
from .covariance import propagate, ros_covariance, world_covariance

log = logging.getLogger("vilib_ros.backend.estimator")   # one logger for the estimator's parts


class TrackingHealth:
    """See the module docstring. Counts in ``stats``; warns through ``warn`` (a
    :class:`vilib_ros.log_throttle.ThrottledWarnings`)."""

    def __init__(self, config: BackendConfig, stats: dict, warn):
        self.min_tracks = int(config.tracking_min_tracks)
        self.stats = stats
        self._warn = warn
        self.lost_since: int | None = None

    def keyframe(self, t_ns: int, n_tracks: int, n_visual: int, waiting: bool = False) -> None:
        """A keyframe at ``t_ns`` whose frame has ``n_tracks`` tracks, ``n_visual`` of them observations in its
        update; ``waiting``: none may be (at rest, or a monocular estimator's tracks waiting for parallax)."""
        if n_tracks < self.min_tracks or (n_visual == 0 and not waiting):
            if self.lost_since is None:
                self.lost_since = int(t_ns)
                self.stats["tracking_lost"] += 1
                self._warn("tracking_lost", "tracking lost at %d (#%d): %d tracks, %d visual observations on this "
                           "keyframe: IMU only until tracks return, the odometry covariance grows",
                           t_ns, self.stats["tracking_lost"], n_tracks, n_visual)
        elif self.lost_since is not None:
            lost_s = (int(t_ns) - self.lost_since) * 1e-9
            self.stats["tracking_recovered"] += 1
            self.stats["tracking_lost_ms"] += int(round(lost_s * 1e3))
            log.info("tracking recovered at %d after %.2f s (#%d)", t_ns, lost_s, self.stats["tracking_recovered"])
            self.lost_since = None

    def lost_for_s(self, t_ns: int) -> float:
        """Seconds since the loss began at ``t_ns`` (0 while tracking)."""
        return 0.0 if self.lost_since is None else max(0.0, (int(t_ns) - self.lost_since) * 1e-9)

    def status(self, t_ns: int | None) -> dict:
        """At the newest state's stamp ``t_ns`` (None: no state, before the initialisation or again after an IMU
        hole): ``tracking`` 'initialising', 'lost' (the IMU alone carries the state) or 'ok', and ``lost_for_s``."""
        if t_ns is None:
            return {"tracking": "initialising", "lost_for_s": 0.0}
        return {"tracking": "ok" if self.lost_since is None else "lost", "lost_for_s": self.lost_for_s(t_ns)}


class OdometryCovariance:
    """See the module docstring: :meth:`of_state` gives the ROS covariances of a state."""

    def __init__(self, gravity: float):
        self.g_w = np.array([0.0, 0.0, -float(gravity)])
        self._kf = None             # (keyframe index, stamp ns, velocity, world error covariance 9x9)
        self._tried: int | None = None      # the keyframe whose marginal was last asked for
        self._offset = np.zeros((9, 9))     # what the smoother's priors no longer know after a restart
        self._last = None           # (stamp ns, velocity, world error covariance) last reported
        self._loss = None           # the same, reported before the tracking loss that lasts

    def _refresh(self, kf, marginal) -> None:
        if self._tried == kf.idx:
            return
        self._tried = kf.idx
        cov = marginal()
        if cov is not None and cov.stamp_ns == kf.t_ns:
            self._kf = (kf.idx, int(kf.t_ns), np.array(kf.v, float), world_covariance(cov) + self._offset)

    def world(self, t_ns: int, v, sigmas) -> np.ndarray | None:
        """The world error covariance (9x9) at ``t_ns`` of a state with velocity ``v``, propagated from the
        newest keyframe that has a marginal (None before any)."""
        if self._kf is None:
            return None
        _, t0, v0, P0 = self._kf
        dt = (int(t_ns) - t0) * 1e-9
        f_w = (np.asarray(v, float) - v0) / dt - self.g_w if dt > 1e-6 else -self.g_w
        return propagate(P0, dt, f_w, *sigmas)

    def of_state(self, state, kf, marginal, sigmas, lost: bool = False, angular_variance: float = 1e3):
        """(pose_cov, twist_cov) in ROS's conventions (:func:`~.covariance.ros_covariance`) of ``state`` (a
        :class:`~.config.VioState`), whose keyframe ``kf`` is the window's newest; ``marginal()`` gives that
        keyframe's :class:`~.config.StateCovariance` or None, asked once per keyframe; ``sigmas``: the IMU's
        (gyroscope, accelerometer) white-noise densities; ``lost``: tracking is lost (no block shrinks). None
        before any marginal."""
        self._refresh(kf, marginal)
        P = self.world(state.stamp_ns, state.v, sigmas)
        if P is None:
            return None
        if not lost:
            self._loss = None
        elif self._loss is None and self._last is not None:
            t0, v0, P0 = self._last
            self._loss = (t0, v0, _blocks(P0))
        P = self._through_loss(P, state, sigmas)
        self._last = (int(state.stamp_ns), np.array(state.v, float), P)
        return ros_covariance(P, state.R, angular_variance)

    def ahead(self, state, kf, marginal, sigmas, angular_variance: float = 1e3):
        """(pose_cov, twist_cov) of an IMU-rate ``state`` predicted ahead of the newest frame (the node's
        ``odometry_imu``): propagated like a frame's, through a tracking loss that lasts too, but not
        recorded, so the frames' own reports do not depend on how often this is asked. None before any
        marginal."""
        self._refresh(kf, marginal)
        P = self.world(state.stamp_ns, state.v, sigmas)
        if P is None:
            return None
        return ros_covariance(self._through_loss(P, state, sigmas), state.R, angular_variance)

    def _through_loss(self, P: np.ndarray, state, sigmas) -> np.ndarray:
        """``P``, no smaller than the covariance reported before the tracking loss that lasts, propagated
        to ``state`` (the keyframes of a loss carry no vision: their marginals alone would shrink)."""
        if self._loss is None or state.stamp_ns < self._loss[0]:
            return P
        t0, v0, P0 = self._loss
        dt = (int(state.stamp_ns) - t0) * 1e-9
        f_w = (np.asarray(state.v, float) - v0) / dt - self.g_w if dt > 1e-6 else -self.g_w
        return _larger_blocks(P, propagate(P0, dt, f_w, *sigmas))

    def restart(self, t_ns: int, v, sigmas, hidden_s: float = 0.0) -> None:
        """The smoother starts again at ``t_ns`` (state velocity ``v``) from priors: keep the position and
        heading (world z) uncertainty reached there, with ``hidden_s`` seconds of motion at the last speed
        nobody saw (an IMU hole) added to the position's."""
        P = self.world(t_ns, v, sigmas)
        self._kf, self._tried = None, None
        if P is None:
            return
        off = np.zeros((9, 9))
        off[3:6, 3:6] = P[3:6, 3:6] + np.eye(3) * (float(np.linalg.norm(v)) * hidden_s) ** 2
        off[2, 2] = P[2, 2]
        self._offset = off


def _blocks(P: np.ndarray) -> np.ndarray:
    """``P`` without the terms between its rotation, position and velocity blocks: propagated, no block's
    trace shrinks (a negative position-velocity term would shrink the position's: conservative)."""
    out = np.zeros((9, 9))
    for i in (0, 3, 6):
        out[i:i + 3, i:i + 3] = P[i:i + 3, i:i + 3]
    return out


def _larger_blocks(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Block-diagonal (rotation, position, velocity) of whichever of ``A`` and ``B`` has the larger trace in
    each block; ``A`` as it is where it is the larger in all three."""
    pick = [A if np.trace(A[i:i + 3, i:i + 3]) >= np.trace(B[i:i + 3, i:i + 3]) else B for i in (0, 3, 6)]
    if all(m is A for m in pick):
        return A
    out = _blocks(A)
    for i, m in zip((0, 3, 6), pick):
        out[i:i + 3, i:i + 3] = m[i:i + 3, i:i + 3]
    return out
