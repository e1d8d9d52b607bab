"""Smooth analytic body trajectories with exact derivatives.

Position: ``p(t) = c + sum_k A_k * sin(w_k t + phi_k)`` per axis, so ``v`` and ``a`` are exact.
Orientation: ``R_WB(t) = Rz(yaw) Ry(pitch) Rx(roll) R_base`` with each angle a drift plus a sum
of sinusoids. The world angular velocity of a product of rotations is
``w_W = yaw' e_z + Rz(yaw) pitch' e_y + Rz(yaw) Ry(pitch) roll' e_x`` (exact), and the body
(= IMU) angular velocity is ``R_WB^T w_W``.

``R_base`` makes the body frame look like EuRoC's (body x up, body z forward): with EuRoC's
cam0 extrinsics the camera then looks horizontally along world x at yaw = 0.
World: z up, gravity ``(0, 0, -9.81)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRAVITY = 9.81
G_W = np.array([0.0, 0.0, -GRAVITY])

#: Body axes in world coordinates at zero angles: body x = up, body y = -world y, body z = world x.
R_BASE = np.array([[0.0, 0.0, 1.0],
                   [0.0, -1.0, 0.0],
                   [1.0, 0.0, 0.0]])


def _rx(a):
    c, s = np.cos(a), np.sin(a)
    o, z = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([o, z, z], -1), np.stack([z, c, -s], -1), np.stack([z, s, c], -1)], -2)


def _ry(a):
    c, s = np.cos(a), np.sin(a)
    o, z = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([c, z, s], -1), np.stack([z, o, z], -1), np.stack([-s, z, c], -1)], -2)


def _rz(a):
    c, s = np.cos(a), np.sin(a)
    o, z = np.ones_like(a), np.zeros_like(a)
    return np.stack([np.stack([c, -s, z], -1), np.stack([s, c, z], -1), np.stack([z, z, o], -1)], -2)


@dataclass
class SineSum:
    """``f(t) = offset + drift * t + sum_k amp_k sin(freq_k t + phase_k)`` and its derivatives."""

    offset: float
    drift: float
    amp: np.ndarray
    freq: np.ndarray
    phase: np.ndarray

    def __call__(self, t: np.ndarray, order: int = 0) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)[..., None]
        arg = self.freq * t + self.phase
        if order == 0:
            return self.offset + self.drift * t[..., 0] + np.sum(self.amp * np.sin(arg), -1)
        if order == 1:
            return self.drift + np.sum(self.amp * self.freq * np.cos(arg), -1)
        if order == 2:
            return np.sum(-self.amp * self.freq ** 2 * np.sin(arg), -1)
        raise ValueError("order must be 0, 1 or 2")

    def rms_rate(self) -> float:
        return float(np.sqrt(self.drift ** 2 + np.sum((self.amp * self.freq) ** 2) / 2))


@dataclass
class TrajectorySample:
    p: np.ndarray        # (N,3) world position of the body
    v: np.ndarray        # (N,3) world velocity
    a: np.ndarray        # (N,3) world acceleration (kinematic, without gravity)
    R: np.ndarray        # (N,3,3) R_WB
    w_body: np.ndarray   # (N,3) body angular velocity


class Trajectory:
    """Random smooth trajectory inside a box, with given RMS speed and RMS angular rate."""

    def __init__(self, rng: np.random.Generator, center=(0.0, 0.0, 1.5), extent=(1.4, 0.9, 0.45),
                 speed: float = 0.5, angular_rate: float = 0.5, yaw0: float = 0.0,
                 pitch_amp: float = 0.2, roll_amp: float = 0.12, yaw_amp: float = 0.7,
                 yaw_drift_fraction: float = 0.35, n_terms: int = 3):
        if speed < 0 or angular_rate < 0:
            raise ValueError("speed and angular_rate must be >= 0")
        center = np.asarray(center, float)
        extent = np.asarray(extent, float)
        # Position: amplitudes sum to the extent per axis; frequencies scaled to the RMS speed.
        self.pos: list[SineSum] = []
        for ax in range(3):
            frac = rng.uniform(0.5, 1.0, n_terms)
            amp = extent[ax] * frac / frac.sum()
            freq = rng.uniform(0.6, 1.6, n_terms)
            phase = rng.uniform(0, 2 * np.pi, n_terms)
            self.pos.append(SineSum(0.0, 0.0, amp, freq, phase))
        rms = np.sqrt(sum(np.sum((s.amp * s.freq) ** 2) / 2 for s in self.pos))
        scale = speed / rms if rms > 0 else 0.0
        for ax, s in enumerate(self.pos):
            s.freq = s.freq * scale
            # Centre so that p(0) = center exactly (the sequence starts in the middle of the room).
            s.offset = center[ax] - float(np.sum(s.amp * np.sin(s.phase)))
        # Orientation: yaw drift carries the view around the room; sinusoids add shake.
        sgn = rng.choice([-1.0, 1.0])
        drift = sgn * yaw_drift_fraction * angular_rate
        self.ang: list[SineSum] = []
        for amp_tot in (yaw_amp, pitch_amp, roll_amp):
            frac = rng.uniform(0.5, 1.0, n_terms)
            amp = amp_tot * frac / frac.sum()
            freq = rng.uniform(0.6, 1.6, n_terms)
            phase = rng.uniform(0, 2 * np.pi, n_terms)
            self.ang.append(SineSum(0.0, 0.0, amp, freq, phase))
        self.ang[0].drift = drift
        osc2 = sum(np.sum((s.amp * s.freq) ** 2) / 2 for s in self.ang)
        target2 = max(angular_rate ** 2 - drift ** 2, 0.0)
        scale = np.sqrt(target2 / osc2) if osc2 > 0 else 0.0
        for s in self.ang:
            s.freq = s.freq * scale
        for s, off in zip(self.ang, (yaw0, 0.0, 0.0)):
            s.offset = off - float(np.sum(s.amp * np.sin(s.phase)))
        self.center, self.extent = center, extent

    def rotation(self, t) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)
        yaw, pitch, roll = (s(t) for s in self.ang)
        return _rz(yaw) @ _ry(pitch) @ _rx(roll) @ R_BASE

    def sample(self, t) -> TrajectorySample:
        """Evaluate at times ``t`` (seconds since the sequence start; scalar or (N,))."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        p = np.stack([s(t, 0) for s in self.pos], -1)
        v = np.stack([s(t, 1) for s in self.pos], -1)
        a = np.stack([s(t, 2) for s in self.pos], -1)
        yaw, pitch, roll = (s(t, 0) for s in self.ang)
        dyaw, dpitch, droll = (s(t, 1) for s in self.ang)
        Rz, Ry, Rx = _rz(yaw), _ry(pitch), _rx(roll)
        R = Rz @ Ry @ Rx @ R_BASE
        ez = np.array([0.0, 0.0, 1.0])
        w_w = (dyaw[:, None] * ez
               + np.einsum("nij,j->ni", Rz, np.array([0.0, 1.0, 0.0])) * dpitch[:, None]
               + np.einsum("nij,j->ni", Rz @ Ry, np.array([1.0, 0.0, 0.0])) * droll[:, None])
        w_b = np.einsum("nji,nj->ni", R, w_w)
        return TrajectorySample(p, v, a, R, w_b)
