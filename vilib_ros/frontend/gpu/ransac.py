"""The fundamental-matrix RANSAC of :mod:`vilib_ros.frontend.ransac` on the device
(``kernels/ransac.cu``): one launch inside the frame's CUDA graph, after LK and the
forward-backward check, before ``table_update``, which drops the slots flagged in
:attr:`GpuRansac.reject` and counts them as ``ransac_rejected``. No host round trip, no
per-frame allocation: the sample table and every scratch array are allocated once, with the
pipeline.
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import CudaUnavailable, Layout, get_module, launch
from vilib_ros.frontend.config import ransac_defines
from vilib_ros.frontend.ransac import HYPOTHESES, LANES, SAMPLE, STATE, TABLE

#: ``-fmad=false``: no fused multiply-add, so that the float64 results are those of the numba twin
OPTIONS = ("-fmad=false",)
#: threads per block of ransac_frame (kernels/ransac.cu RS_THREADS): one block per hypothesis
THREADS = 256
#: slots per thread at most (RS_MAX_PER): the largest table is MAX_PER * THREADS slots
MAX_PER = 32


def scratch_layout(S: int) -> Layout:
    """The device scratch of :class:`GpuRansac` for ``S`` track slots."""
    return Layout([("table", np.uint32, (HYPOTHESES, SAMPLE)), ("state", np.int32, len(STATE)),
                   ("cand", np.int32, S), ("x1", np.float64, (S, 2)), ("x2", np.float64, (S, 2)),
                   ("flag", np.int8, S), ("inl", np.int8, S), ("reject", np.int8, S),
                   ("F", np.float64, (HYPOTHESES, 9)), ("valid", np.int8, HYPOTHESES),
                   ("count", np.int32, HYPOTHESES), ("done", np.uint32, 1)])


class GpuRansac:
    """Device RANSAC for a table of ``capacity`` slots; :meth:`enqueue` per frame."""

    def __init__(self, capacity: int):
        import cupy as cp

        assert LANES == 32, "the LO sums are warp butterflies"
        self.S = int(capacity)
        if not 0 < self.S <= MAX_PER * THREADS:
            raise ValueError(f"a RANSAC of capacity {self.S}: between 1 and {MAX_PER * THREADS} slots")
        self.layout = scratch_layout(self.S)
        host = np.zeros(self.layout.nbytes, np.uint8)
        self.layout.views(host)["table"][:] = TABLE[:HYPOTHESES]
        self.buf = cp.asarray(host)
        self.v = self.layout.views(self.buf)
        try:
            self._k = get_module("ransac", ransac_defines(), OPTIONS).get_function("ransac_frame")
        except CudaUnavailable:
            raise
        except Exception as exc:
            raise CudaUnavailable(f"the RANSAC kernel failed to load: {exc.__class__.__name__}: {exc}") from exc

    @property
    def reject(self):
        """int8 (capacity,) device flags: 1 = a RANSAC outlier of this frame (for table_update)."""
        return self.v["reject"]

    def state(self) -> dict[str, int]:
        """The last frame's candidates, chosen hypothesis (-1: none), final inliers, hypotheses
        read (synchronises: tests and diagnostics)."""
        return dict(zip(STATE, (int(x) for x in self.v["state"].get())))

    def enqueue(self, stream, checked: bool, hdr, lk_status, uv, xy, lk_xy, fb_pos, fb_status, fb_threshold: float,
                threshold: float, confidence: float) -> None:
        """The launch on ``stream`` (``fb_status`` None: no forward-backward check);
        ``threshold`` in the units of ``xy`` (normalised: ransac_threshold / fx)."""
        v = self.v
        null = np.uint64(0)
        launch(self._k, (HYPOTHESES, 1, 1), (THREADS, 1, 1),
               (hdr, lk_status, uv, xy, lk_xy, null if fb_status is None else fb_pos,
                null if fb_status is None else fb_status, np.float32(fb_threshold), np.int32(self.S), v["table"],
                np.float64(float(threshold) ** 2), np.float64(confidence), v["cand"], v["x1"], v["x2"], v["flag"],
                v["F"], v["valid"], v["count"], v["inl"], v["reject"], v["state"], v["done"]),
               stream=stream, checked=checked)

    def run(self, xy_old, xy_new, threshold: float, confidence: float, status=None):
        """One RANSAC of host arrays (tests, tools; allocates): (outlier mask over the rows or
        None, best hypothesis, final inliers). The rows are the slots of a table whose ``status``
        (default all TRACKED) LK gave; positions as float32, as the device table holds them."""
        import cupy as cp

        n = len(xy_old)
        if n > self.S:
            raise ValueError(f"{n} rows for a RANSAC of capacity {self.S}")
        pad = np.zeros((self.S, 2), np.float32)
        x1, x2 = pad.copy(), pad.copy()
        x1[:n], x2[:n] = xy_old, xy_new
        st = np.zeros(self.S, np.int8)
        if status is not None:
            st[:n] = status
        hdr = cp.asarray(np.array([n, 0, 0, 0, 0, 0, 0, 0], np.int64))
        stream = cp.cuda.Stream(non_blocking=True)
        self.enqueue(stream, True, hdr, cp.asarray(st), cp.asarray(x1), cp.asarray(x1), cp.asarray(x2), None, None,
                     0.0, threshold, confidence)
        stream.synchronize()
        s = self.state()
        if s["best"] < 0:
            return None, -1, 0
        return self.v["reject"][:n].get().astype(bool), s["best"], s["count"]
