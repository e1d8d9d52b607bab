"""Plain data passed between the algorithm modules, the nodes and the CLI.

Everything is NumPy on the host; GPU stages keep their own device buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class CellFeatures:
    """Detector output: one slot per grid cell (row-major, ``rows * cols`` slots).

    Coordinates are in level-0 pixels (lower-level positions scaled up by 2**level).
    An empty cell has ``level == -1`` and ``score == 0``.
    """

    x: np.ndarray       # float32 (n_cells,)
    y: np.ndarray       # float32 (n_cells,)
    score: np.ndarray   # float32 (n_cells,)
    level: np.ndarray   # int32 (n_cells,), -1 = empty cell
    grid_shape: tuple[int, int]  # (rows, cols)

    @property
    def valid(self) -> np.ndarray:
        return self.level >= 0

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.valid))

    def points(self) -> np.ndarray:
        """(K, 2) float32 level-0 positions of the non-empty cells."""
        v = self.valid
        return np.stack([self.x[v], self.y[v]], axis=1).astype(np.float32)


@dataclass
class TrackFrame:
    """Frontend output for one frame (the content of the tracks message)."""

    stamp_ns: int
    ids: np.ndarray        # int64 (N,) persistent track ids
    uv: np.ndarray         # float32 (N, 2) pixel positions, cam0
    xy: np.ndarray         # float64 (N, 2) undistorted normalised coordinates, cam0
    velocity: np.ndarray   # float64 (N, 2) d(xy)/dt in 1/s (0 for new tracks)
    score: np.ndarray      # float32 (N,)
    level: np.ndarray      # int32 (N,) pyramid level of the detection
    age: np.ndarray        # int32 (N,) frames since detection (0 = new)
    # Stereo (optional): right-image position of each track, NaN where not matched.
    uv_right: np.ndarray | None = None   # float32 (N, 2)
    xy_right: np.ndarray | None = None   # float64 (N, 2)
    # Per-stage wall / GPU times of this frame, seconds.
    timings: dict[str, float] = field(default_factory=dict)
    # Counters since start (skipped frames, lost tracks, redetections, ...).
    stats: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.shape[0])
