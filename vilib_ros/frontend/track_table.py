"""The track table: live tracks with persistent ids, updated once per frame; and the template bank.

:class:`TrackTable` is the NumPy table of the CPU pipeline (with either CPU twin's stages);
``kernels/frontend.cu`` (``table_update``, ``new_tracks``) is its device twin in the GPU
pipeline. Both make the same decisions in the same order, so the two pipelines give the same ids:

* **update** (after LK): a track lives on where LK says TRACKED, the forward-backward check (if
  on) passes and RANSAC (if on) does not reject it. Live tracks are compacted to the front of
  the table in their order (oldest first); position, undistorted position, velocity
  (``d xy / dt``, kept where ``dt`` is 0) and age (+1) are updated.
* **occupancy**: the detector cells that hold a live track.
* **redetection** when ``live == 0`` or ``live < min_track_fraction * target``: the detector's
  cell winners in free cells become new tracks, the strongest first where there are more than
  free slots (score, then lower cell index), appended in cell order with
  ``id = next_id + cell index``; ``next_id`` then advances by the number of cells. So an id is
  never given twice, and a track's id depends only on the frame of its detection run and its
  cell, not on what happened to other tracks.

:data:`~vilib_ros.frontend.config.COUNTERS` names the counters (here, in the device table and
in the GPU result slots). :class:`TemplateBank` holds the tracks' stored templates
(:mod:`vilib_ros.frontend.reference.templates`), one row per track slot (``TrackTable.tslot``).
"""
from __future__ import annotations

import numpy as np

from vilib_ros.frontend.config import COUNTER_INDEX, COUNTERS, PATCH_AREA
from vilib_ros.types import CellFeatures, FrameStats, TrackFrame, TrackStatus


def fb_passed(fb_pos, fb_status, uv, threshold: float) -> np.ndarray:
    """Forward-backward check per slot: the backward track came home (float32, as the kernel)."""
    d = np.linalg.norm(np.asarray(fb_pos, np.float32) - np.asarray(uv, np.float32), axis=1)
    return (np.asarray(fb_status) == TrackStatus.TRACKED) & (d < np.float32(threshold))


class TemplateBank:
    """Fixed-size template slots for ``capacity`` tracks and ``levels`` pyramid levels (see
    :mod:`vilib_ros.frontend.reference.templates`): ``patch`` float32 (capacity, levels,
    PATCH_AREA), ``valid`` uint8 (capacity, levels). The track table names each track's row
    (``TrackTable.tslot``)."""

    def __init__(self, capacity: int, levels: int):
        self.capacity, self.levels = int(capacity), int(levels)
        self.patch = np.zeros((self.capacity, self.levels, PATCH_AREA), np.float32)
        self.valid = np.zeros((self.capacity, self.levels), np.uint8)

    @property
    def nbytes(self) -> int:
        return int(self.patch.nbytes + self.valid.nbytes)


class TrackTable:
    """Live tracks (NumPy, the CPU pipeline's table); see the module docstring."""

    def __init__(self, capacity: int, grid_shape: tuple[int, int], cell_size: tuple[int, int], first_id: int = 0):
        S = int(capacity)
        self.capacity = S
        self.grid_shape = (int(grid_shape[0]), int(grid_shape[1]))
        self.n_cells = self.grid_shape[0] * self.grid_shape[1]
        self.cell_w, self.cell_h = int(cell_size[0]), int(cell_size[1])
        self.count = 0
        self.next_id = int(first_id)
        self.counters = np.zeros(len(COUNTERS), np.int64)
        self.ids = np.zeros(S, np.int64)
        self.uv = np.zeros((S, 2), np.float32)
        self.xy = np.zeros((S, 2), np.float64)
        self.vel = np.zeros((S, 2), np.float64)
        self.score = np.zeros(S, np.float32)
        self.level = np.zeros(S, np.int32)
        self.age = np.zeros(S, np.int32)
        # LK state per track (vilib_ros.frontend.reference.templates): the last result's residual and
        # illumination; with reference templates also the template's bank row and age
        self.residual = np.zeros(S, np.float32)
        self.gain = np.ones(S, np.float32)
        self.offset = np.zeros(S, np.float32)
        self.tslot = np.zeros(S, np.int64)
        self.tmpl_age = np.zeros(S, np.int32)
        self.affine = np.tile(np.array([1, 0, 0, 1], np.float32), (S, 1))   # warp='affine': a11 a12 a21 a22

    def clear(self) -> None:
        """Drop every track (ids are not reused: ``next_id`` stays)."""
        self.count = 0

    def tally(self, name: str, value) -> None:
        """Add ``value`` to the counter ``name``."""
        self.counters[COUNTER_INDEX[name]] += int(value)

    def update(self, pos, status, xy_new, iterations, dt: float, fb_ok=None, reject=None, residual=None, gain=None,
               offset=None, affine=None) -> None:
        """Apply one frame's LK results for slots ``0..count-1``: ``pos`` (level-0 pixels),
        ``status``, ``xy_new`` (undistorted, used where tracked), ``iterations``; ``fb_ok``:
        forward-backward result per slot (None: check off); ``reject``: RANSAC outliers per
        slot (None: not run); ``residual``, ``gain``, ``offset``, ``affine``: LK's, kept per track
        (None: residual 0, gain 1, offset 0, identity)."""
        n = self.count
        st = np.asarray(status)[:n]
        keep = st == TrackStatus.TRACKED
        hist = np.bincount(st.astype(np.int64), minlength=len(TrackStatus))
        self.tally("lost_left_image", hist[TrackStatus.LEFT_IMAGE])
        self.tally("lost_diverged", hist[TrackStatus.DIVERGED])
        self.tally("lost_not_converged", hist[TrackStatus.NOT_CONVERGED])
        self.tally("tracked_total", hist[TrackStatus.TRACKED])
        self.tally("iterations_total", np.asarray(iterations)[:n][keep].sum())
        if fb_ok is not None:
            bad = keep & ~np.asarray(fb_ok)[:n]
            self.tally("fb_rejected", np.count_nonzero(bad))
            keep &= ~bad
        if reject is not None:
            bad = keep & np.asarray(reject, bool)[:n]
            self.tally("ransac_rejected", np.count_nonzero(bad))
            keep &= ~bad
        idx = np.flatnonzero(keep)
        k = idx.size
        xn = np.asarray(xy_new, np.float64)[idx]
        vel = (xn - self.xy[idx]) / dt if dt > 0 else self.vel[idx]
        # fancy indexing copies first, so compacting in place is safe
        self.ids[:k] = self.ids[idx]
        self.uv[:k] = np.asarray(pos, np.float32)[idx]
        self.vel[:k] = vel
        self.xy[:k] = xn
        self.score[:k] = self.score[idx]
        self.level[:k] = self.level[idx]
        self.age[:k] = self.age[idx] + 1
        self.residual[:k] = 0.0 if residual is None else np.asarray(residual, np.float32)[idx]
        self.gain[:k] = 1.0 if gain is None else np.asarray(gain, np.float32)[idx]
        self.offset[:k] = 0.0 if offset is None else np.asarray(offset, np.float32)[idx]
        self.tslot[:k] = self.tslot[idx]
        self.tmpl_age[:k] = self.tmpl_age[idx] + 1
        self.affine[:k] = (1.0, 0.0, 0.0, 1.0) if affine is None else np.asarray(affine, np.float32)[idx]
        self.tally("tracks_lost", n - k)
        self.count = k

    def refresh(self, rows) -> None:
        """The templates of ``rows`` were taken again: template age 0, illumination relative to
        it 1 / 0, identity warp (counted as ``templates_refreshed``)."""
        rows = np.asarray(rows, np.int64)
        self.tmpl_age[rows] = 0
        self.affine[rows] = (1.0, 0.0, 0.0, 1.0)
        self.gain[rows] = 1.0
        self.offset[rows] = 0.0
        self.tally("templates_refreshed", rows.size)

    def occupancy(self) -> np.ndarray:
        """(rows, cols) bool: the detector cells that hold a live track."""
        rows, cols = self.grid_shape
        occ = np.zeros((rows, cols), bool)
        uv = self.uv[:self.count]
        if uv.shape[0]:
            r = np.clip(np.floor(uv[:, 1] / np.float32(self.cell_h)).astype(np.int64), 0, rows - 1)
            c = np.clip(np.floor(uv[:, 0] / np.float32(self.cell_w)).astype(np.int64), 0, cols - 1)
            occ[r, c] = True
        return occ

    def need_detection(self, detect_below: float) -> bool:
        """Redetection flag: no live track, or fewer than ``detect_below``."""
        return self.count == 0 or self.count < detect_below

    def add(self, cells: CellFeatures, undistort) -> int:
        """New tracks from the detector's cells (one detection run); returns how many."""
        self.tally("detection_runs", 1)
        x, y, score, level = cells.x, cells.y, cells.score, cells.level
        cand = np.flatnonzero((level >= 0) & np.isfinite(x) & np.isfinite(y))
        free = self.capacity - self.count
        if cand.size > free:
            order = cand[np.argsort(-score[cand], kind="stable")][:max(free, 0)]
            cand = np.sort(order)
        k = cand.size
        if k == 0:
            return 0
        sl = slice(self.count, self.count + k)
        self.ids[sl] = self.next_id + cand
        self.uv[sl, 0] = x[cand]
        self.uv[sl, 1] = y[cand]
        self.xy[sl] = undistort(self.uv[sl])
        self.vel[sl] = 0.0
        self.score[sl] = score[cand]
        self.level[sl] = level[cand]
        self.age[sl] = 0
        self.residual[sl] = 0.0
        self.gain[sl] = 1.0
        self.offset[sl] = 0.0
        self.tmpl_age[sl] = 0
        self.affine[sl] = (1.0, 0.0, 0.0, 1.0)
        used = np.zeros(self.capacity, bool)
        used[self.tslot[:self.count]] = True
        self.tslot[sl] = np.flatnonzero(~used)[:k]     # free template rows, lowest first
        self.count += k
        self.next_id += self.n_cells
        self.tally("tracks_new", k)
        self.tally("redetections", 1)
        return k

    def frame(self, stamp_ns: int, uv_right=None, xy_right=None, timings=None, host_stats=None) -> TrackFrame:
        """The live tracks as a TrackFrame owning copies of the table's arrays."""
        n = self.count
        fr = TrackFrame(stamp_ns=int(stamp_ns), ids=self.ids[:n].copy(), uv=self.uv[:n].copy(),
                        xy=self.xy[:n].copy(), velocity=self.vel[:n].copy(), score=self.score[:n].copy(),
                        level=self.level[:n].copy(), age=self.age[:n].copy(), timings=dict(timings or {}),
                        stats=FrameStats(COUNTER_INDEX, self.counters.copy(), host_stats))
        if uv_right is not None:
            fr.uv_right = np.asarray(uv_right, np.float32)[:n]
            fr.xy_right = np.asarray(xy_right, np.float64)[:n]
        return fr
