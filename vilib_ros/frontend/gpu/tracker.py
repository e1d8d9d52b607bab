"""The LK tracker on the GPU (``kernels/lk.cu``): one warp per feature, the algorithm of
:mod:`vilib_ros.frontend.reference.lk` (and against stored templates, of
:mod:`vilib_ros.frontend.reference.templates`), with the interface of
:class:`~vilib_ros.frontend.reference.tracker.CpuLKTracker`.
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import Layout, get_module, launch
from vilib_ros.frontend.config import TrackerConfig, lk_defines
from vilib_ros.frontend.gpu.pyramid import GpuPyramid
from vilib_ros.types import TrackResult

#: warps per block of the LK kernels (one feature per warp in ``lk_track`` / ``lk_frontend``)
LK_WARPS = 4
#: Warps per feature in the stored-template kernels (``lk_template_*``, kernels/lk.cu
#: ``LK_FEATURE_WARPS``: 1, 2 or 4, dividing the warps per block): on the 16x16 levels each warp
#: of a feature samples its share of the patch and the sums are exchanged through shared memory,
#: which shortens the sample loops on each feature's serial chain.
LK_FEATURE_WARPS = 2
#: NVRTC options of ``kernels/lk.cu``: approximate fp32 division and square root, denormals
#: flushed. The solver's divisions and square roots (the Cholesky inverse of the Hessian per level,
#: the composition with the inverse step per iteration) are on each feature's serial chain, where
#: the IEEE versions cost most. The converged position is where sum U r = 0, which the accuracy
#: of H^-1 does not move; the GPU and CPU trackers agree within the tolerances of
#: test_tracker_gpu / test_frontend.TestGpuMatchesCpu.
LK_OPTIONS = ("--ftz=true", "--prec-div=false", "--prec-sqrt=false")

OUTPUT_FIELDS = (("pos", np.float32, 2), ("status", np.int8, 0), ("residual", np.float32, 0), ("gain", np.float32, 0),
                 ("offset", np.float32, 0), ("iterations", np.int32, 0))


def output_fields(m: int, prefix: str = "") -> list:
    return [(prefix + n, dt, (m, k) if k else (m,)) for n, dt, k in OUTPUT_FIELDS]


def _ptr_table(cp, pyramid_levels):
    return cp.asarray(np.array([lv.data.ptr for lv in pyramid_levels], dtype=np.uint64))


class GpuLKTracker:
    """One warp per feature LK on device pyramids (``kernels/lk.cu``).

    Device buffers for ``max_features`` features are allocated here; :meth:`track_device`
    enqueues the kernel on given device pyramids without synchronising or allocating;
    :meth:`track` is the host convenience twin of :meth:`CpuLKTracker.track`.
    """

    device = "cuda"

    def __init__(self, width: int, height: int, config: TrackerConfig | None = None, max_features: int = 1024,
                 warps: int | None = None, defines: dict | None = None, feature_warps: int | None = None):
        import cupy as cp

        self.config = config or TrackerConfig()
        self.width, self.height, self.max_features = int(width), int(height), int(max_features)
        self.warps = int(warps if warps is not None else LK_WARPS)
        if not 1 <= self.warps <= 32:
            raise ValueError(f"warps must be in 1..32, got {warps!r}")
        #: warps per feature in lk_template_* (LK_FEATURE_WARPS; must divide the warps per block)
        self.feature_warps = int(LK_FEATURE_WARPS if feature_warps is None else feature_warps)
        if self.feature_warps not in (1, 2, 4) or self.warps % self.feature_warps:
            raise ValueError(f"feature_warps must be 1, 2 or 4 and divide warps={self.warps}, "
                             f"got {self.feature_warps!r}")
        c = self.config
        mod = get_module("lk", {**lk_defines(c, self.warps, self.feature_warps), **(defines or {})}, LK_OPTIONS)
        self.kernel = mod.get_function(f"lk_track_{self.config.mode}")
        # the frontend's variant on the device-side track table (same compile-time settings)
        self.frontend_kernel = mod.get_function(f"lk_frontend_{self.config.mode}")
        # stored templates (vilib_ros.frontend.reference.templates): LK from the template bank, and its extraction
        self.template_kernel = mod.get_function(f"lk_template_{self.config.warp}_{self.config.mode}")
        # the same with the forward-backward check fused (the frontend's default)
        self.template_fb_kernel = mod.get_function(f"lk_template_fb_{self.config.warp}_{self.config.mode}")
        self.extract_kernel = mod.get_function(f"lk_extract_{self.config.mode}")
        self._tables: dict[int, object] = {}
        self._arg_cache: dict = {}   # launch arguments per set of buffers (built once: building them is slow Python)
        m = self.max_features
        # inputs and outputs each in one buffer: one upload, one download per call
        self.in_layout = Layout([("tmpl_pos", np.float32, (m, 2)), ("pred", np.float32, (m, 2)),
                                 ("active", np.int8, (m,))])
        self.out_layout = Layout(output_fields(m))
        self.d_in_buf = cp.zeros(self.in_layout.nbytes, cp.uint8)
        self.d_out_buf = cp.zeros(self.out_layout.nbytes, cp.uint8)
        d_in = self.in_layout.views(self.d_in_buf)
        self.d_tmpl_pos, self.d_pred, self.d_active = d_in["tmpl_pos"], d_in["pred"], d_in["active"]
        self.d_out = self.out_layout.views(self.d_out_buf)
        self._pyrs = None
        self._events = (cp.cuda.Event(), cp.cuda.Event())

    def template_launch(self, n: int) -> tuple:
        """(grid, block) of ``template_kernel`` / ``template_fb_kernel`` for ``n`` slots:
        :attr:`feature_warps` warps per slot."""
        per_block = self.warps // self.feature_warps
        return ((n + per_block - 1) // per_block, 1, 1), (32, self.warps, 1)

    def level_table(self, pyramid):
        """Device table of level pointers for a GpuPyramid (made once per pyramid)."""
        key = id(pyramid)
        t = self._tables.get(key)
        if t is None:
            import cupy as cp

            if pyramid.n_levels < self.config.levels:
                raise ValueError(f"pyramid has {pyramid.n_levels} levels, the tracker needs {self.config.levels}")
            if pyramid.shapes[0] != (self.height, self.width):
                raise ValueError(f"pyramid is {pyramid.shapes[0]}, tracker built for {(self.height, self.width)}")
            t = (_ptr_table(cp, pyramid.levels), pyramid)  # keep the pyramid alive with its table
            self._tables[key] = t
        return t[0]

    def launch_args(self, tmpl_table, img_table, tmpl_pos, pred, active, active_value, n, out):
        c = self.config
        return (tmpl_table, img_table, np.int32(self.width), np.int32(self.height), np.int32(c.levels),
                np.int32(c.patch16_mask), tmpl_pos, pred, active, np.int32(active_value), np.int32(n),
                np.int32(c.max_iterations), np.float32(c.eps), np.float32(c.min_eigen), np.float32(c.max_residual),
                out["pos"], out["status"], out["residual"], out["gain"], out["offset"], out["iterations"])

    def track_device(self, tmpl_pyramid, img_pyramid, tmpl_pos, pred, active, n: int, out: dict | None = None,
                     stream=None, active_value: int = 1, checked: bool = True) -> None:
        """Enqueue tracking of ``n`` slots (device arrays) on ``stream``; no sync, no allocation."""
        if n <= 0:
            return
        out = self.d_out if out is None else out
        # the cached tuple holds every object whose id is in the key, so no id is reused while cached
        key = (id(tmpl_pyramid), id(img_pyramid), id(tmpl_pos), id(pred), id(active), active_value, n,
               id(out["pos"]), id(out["status"]), id(out["residual"]), id(out["gain"]), id(out["offset"]),
               id(out["iterations"]))
        hit = self._arg_cache.get(key)
        if hit is None:
            args = self.launch_args(self.level_table(tmpl_pyramid), self.level_table(img_pyramid), tmpl_pos, pred,
                                    active, active_value, n, out)
            if len(self._arg_cache) >= 256:
                self._arg_cache.clear()
            grid = ((n + self.warps - 1) // self.warps, 1, 1)
            hit = self._arg_cache[key] = (grid, (32, self.warps, 1), args, (tmpl_pyramid, img_pyramid))
        launch(self.kernel, hit[0], hit[1], hit[2], stream=stream, checked=checked)

    def track(self, tmpl, img, tmpl_pos, pred=None, active=None) -> TrackResult:
        """Host convenience: upload two images, build pyramids, track, download (synchronous)."""
        import cupy as cp

        for im in (tmpl, img):
            a = np.asarray(im[0] if isinstance(im, (list, tuple)) else im)
            if a.dtype != np.uint8 or a.shape != (self.height, self.width):
                raise ValueError(f"tracker built for uint8 {self.height}x{self.width} images, got {a.dtype} {a.shape}")
        tmpl_pos = np.asarray(tmpl_pos, np.float32).reshape(-1, 2)
        n = tmpl_pos.shape[0]
        if n > self.max_features:
            raise ValueError(f"{n} features exceed max_features={self.max_features}")
        pred = tmpl_pos if pred is None else np.asarray(pred, np.float32).reshape(n, 2)
        if self._pyrs is None:
            self._pyrs = [GpuPyramid(self.width, self.height, self.config.levels) for _ in range(2)]
        for pyr, im in zip(self._pyrs, (tmpl, img)):
            im0 = im[0] if isinstance(im, (list, tuple)) else im
            pyr.upload(np.asarray(im0))
            pyr.build()
        if n == 0:
            z = np.zeros(0, np.float32)
            return TrackResult(np.zeros((0, 2), np.float32), np.zeros(0, np.int8), z, z, z, np.zeros(0, np.int32))
        self.d_tmpl_pos[:n].set(tmpl_pos)
        self.d_pred[:n].set(pred)
        self.d_active[:n].set(np.ones(n, np.int8) if active is None else np.asarray(active, np.int8).reshape(n))
        e0, e1 = self._events
        stream = cp.cuda.get_current_stream()
        e0.record(stream)
        self.track_device(self._pyrs[0], self._pyrs[1], self.d_tmpl_pos, self.d_pred, self.d_active, n, stream=stream)
        e1.record(stream)
        e1.synchronize()
        o = {k: v[:n].get() for k, v in self.d_out.items()}
        return TrackResult(o["pos"], o["status"], o["residual"], o["gain"], o["offset"], o["iterations"],
                           timings={"gpu_s": cp.cuda.get_elapsed_time(e0, e1) * 1e-3})
