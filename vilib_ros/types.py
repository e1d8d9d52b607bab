"""Plain data passed between the algorithm modules, the nodes and the CLI.

Everything is NumPy on the host; GPU stages keep their own device buffers.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

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


class TrackStatus(enum.IntEnum):
    """Per-feature outcome (int8), the same codes as ``LK_*`` in ``kernels/lk.cu``."""

    TRACKED = 0
    LEFT_IMAGE = 1
    DIVERGED = 2
    NOT_CONVERGED = 3
    INACTIVE = 4


@dataclass
class TrackResult:
    """Tracker output (every LK twin): per feature, its position in the new image, status, the
    illumination and (affine warp) the warp relative to its template."""

    pos: np.ndarray        # float32 (N, 2) level-0 positions
    status: np.ndarray     # int8 (N,) TrackStatus
    residual: np.ndarray   # float32 (N,) final mean |I - (1+a)T - b| on level 0, 0..255 units
    gain: np.ndarray       # float32 (N,) 1 + alpha
    offset: np.ndarray     # float32 (N,) beta, 0..255 units
    iterations: np.ndarray  # int32 (N,) total iterations over all levels
    timings: dict = field(default_factory=dict)
    affine: np.ndarray | None = None   # float32 (N, 4) a11 a12 a21 a22 of the affine warp (warp='affine' only)

    @property
    def tracked(self) -> np.ndarray:
        return self.status == TrackStatus.TRACKED


class FrameStats(Mapping):
    """Counters since start as of one frame: a read-only mapping name -> int.

    ``index`` maps the names held in the int64 array ``values`` (on the GPU path a view of the
    frame's result slot) to their positions; ``extra`` holds the rest (host-side counters).
    ``dict(stats)`` makes a plain copy.
    """

    __slots__ = ("_index", "_values", "_extra")

    def __init__(self, index: Mapping[str, int], values: np.ndarray, extra: Mapping[str, int] | None = None):
        self._index = index
        self._values = values
        self._extra = extra if extra is not None else {}

    def __getitem__(self, key: str) -> int:
        i = self._index.get(key)
        if i is not None:
            return int(self._values[i])
        return int(self._extra[key])

    def __iter__(self):
        yield from self._index
        yield from (k for k in self._extra if k not in self._index)

    def __len__(self) -> int:
        return len(self._index) + sum(1 for k in self._extra if k not in self._index)

    def __repr__(self) -> str:
        return f"FrameStats({dict(self)!r})"


@dataclass
class TrackFrame:
    """Frontend output for one frame (the content of the tracks message).

    On the GPU path the arrays are views of a page-locked result slot that the frontend
    reuses: they stay valid until ``FeatureTracker.RESULT_SLOTS - 1`` further frames have been
    submitted (see :class:`vilib_ros.frontend.FeatureTracker`). :meth:`copy` makes a frame
    that owns its data.
    """

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

    def copy(self) -> "TrackFrame":
        """A frame owning copies of every array (and of the counters)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                v = v.copy()
            elif f.name in ("stats", "timings"):
                v = dict(v)
            kw[f.name] = v
        return TrackFrame(**kw)
