"""The estimator's record of its output (:class:`TrajectoryRecord`): every processed frame's pose, causal
(as published) and relative to its keyframe, and each keyframe's last estimate in the window, from
which the smoothed trajectory follows."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .config import VioState


class TrajectoryRecord:
    """Per processed frame: (stamp ns, its keyframe's index, pose relative to that keyframe, causal pose);
    ``kf_final``: keyframe index -> its last estimate in the window; ``last_state`` / ``last_R``: the
    newest frame's state and orientation (what the IMU-rate output propagates)."""

    def __init__(self):
        self._rows: list[tuple[int, int, np.ndarray, np.ndarray]] = []
        self.kf_final: dict[int, np.ndarray] = {}
        self.last_state: VioState | None = None
        self.last_R: np.ndarray | None = None

    def add(self, t_ns: int, kf_idx: int, T_rel: np.ndarray, T_online: np.ndarray, state: VioState) -> None:
        self._rows.append((t_ns, kf_idx, T_rel, T_online.copy()))
        self.last_R = T_online[:3, :3].copy()
        self.last_state = state

    def arrays(self, smoothed: bool = True):
        """(t_ns (N,), p (N,3), q_xyzw (N,4)) for every frame. ``smoothed``: each frame is expressed
        relative to its keyframe, and the keyframe's last estimate in the window is used; otherwise the
        online (causal) output."""
        from scipy.spatial.transform import Rotation

        if not self._rows:
            return np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 4))
        final = self.kf_final
        Ts = []
        for t, ki, T_rel, T_on in self._rows:
            Ts.append(final[ki] @ T_rel if smoothed and ki in final else T_on)
        Ts = np.array(Ts)
        t = np.array([r[0] for r in self._rows], np.int64)
        return t, Ts[:, :3, 3].copy(), Rotation.from_matrix(Ts[:, :3, :3]).as_quat()

    def write_tum(self, path, smoothed: bool = True) -> Path:
        """TUM trajectory file: ``t[s] x y z qx qy qz qw`` per frame."""
        t, p, q = self.arrays(smoothed)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for ti, pi, qi in zip(t, p, q):
                f.write(f"{ti // 1_000_000_000}.{ti % 1_000_000_000:09d} "
                        + " ".join(f"{x:.9f}" for x in (*pi, *qi)) + "\n")
        return path
