"""The kernels of one frame of the GPU frontend, on the device-side track table.

:class:`FrameKernels` owns the device side: a ring of :data:`RING` device pyramids (per camera),
the device table (:func:`table_layout`: header, counters, the live tracks, cell occupancy, LK
scratch, per-slot frame parameters, constants) and the kernels. It enqueues a frame in two
parts, each captured as a CUDA graph by :class:`~vilib_ros.frontend.gpu.pipeline.GpuPipeline`:

* :meth:`~FrameKernels.enqueue_upload` (upload stream): ``pyramid_frame`` (reads the frame from
  page-locked host memory or a device copy, builds the levels, copies the frame parameters to the
  device);
* :meth:`~FrameKernels.enqueue_compute` (compute stream): ``lk_frontend`` (previous -> current
  frame, from the IMU-predicted position, undistorted result; with stored templates
  ``lk_template_<warp>_<mode>`` from each track's template; ``lk_template_fb_<warp>_<mode>`` with
  the forward-backward check in the same warp) [-> ``lk_frontend`` backward: the forward-backward
  check, frame to frame] [-> ``ransac_frame`` (:mod:`vilib_ros.frontend.gpu.ransac`): its
  outliers flagged] -> ``table_update`` (status, compaction, velocity, age, cell
  occupancy, redetection flag; templates due flagged) -> ``fast_crf_levels`` -> ``nms_cell`` (both
  return at once unless the flag is set) -> ``finalize`` (new tracks where the flag is set; the
  result) [-> ``lk_extract``: the templates of the new and flagged tracks] [stereo frames: ->
  ``lk_frontend`` stereo with the epipolar check -> ``pack_output``].

Stored templates (``tracker.template: reference`` or ``tracker.warp: affine``,
:mod:`vilib_ros.frontend.reference.templates`): the template bank (``bank`` float32 (S, levels,
BANK_STRIDE): the samples, then the level's solver; ``bank_valid`` uint8 (S, levels)) is its own
device buffer, not part of the table;
the table holds per slot the bank row
``tslot``, ``gain`` / ``offset`` / ``affine`` / ``residual`` of the last LK, ``tmpl_age`` and
``refresh``.

The compute part of frame k overlaps the upload part of frame k+1: every slot has its own
pyramid and frame parameters.
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import CudaUnavailable, Layout, get_module, launch
from vilib_ros.frontend.config import BANK_STRIDE, COUNTER_INDEX, COUNTERS, HEADER, N_HEADER, frontend_defines
from vilib_ros.frontend.gpu.pyramid import GpuPyramid
from vilib_ros.frontend.gpu.ransac import GpuRansac
from vilib_ros.frontend.stereo import cam_params, essential_rl

RING = 4
FUSED_LEVELS = 5                # pyramid_frame builds levels 1..5; further ones by pyramid_halve
PARAMS_BYTES = 128              # FrameParams, kernels/frame.cuh
_F32_M = 6                      # FrameParams.M, in 32-bit words
H = {n: i for i, n in enumerate(HEADER)}


#: per-slot template state (stored templates only): name, dtype, values per slot
TEMPLATE_COLUMNS = (("tslot", np.int32, 1), ("gain", np.float32, 1), ("offset", np.float32, 1),
                    ("affine", np.float32, 4), ("residual", np.float32, 1), ("tmpl_age", np.int32, 1),
                    ("refresh", np.uint8, 1), ("lk_residual", np.float32, 1), ("lk_gain", np.float32, 1),
                    ("lk_offset", np.float32, 1), ("lk_affine", np.float32, 4))


def table_layout(S: int, n_cells: int, templates: bool = False) -> Layout:
    """The device table: header, counters, the live tracks, cell occupancy, per-frame LK
    scratch, frame parameters of every slot and constants (cameras, stereo rotation, E); with
    ``templates`` the per-slot template state (:data:`TEMPLATE_COLUMNS`)."""
    f32, i8 = np.float32, np.int8
    tpl = [(n, dt, (S, k) if k > 1 else S) for n, dt, k in TEMPLATE_COLUMNS] if templates else []
    return Layout(tpl + [("hdr", np.int64, N_HEADER), ("cnt", np.int64, len(COUNTERS)), ("ids", np.int64, S),
                   ("uv", f32, (S, 2)), ("xy", f32, (S, 2)), ("vel", f32, (S, 2)), ("score", f32, S),
                   ("level", np.int32, S), ("age", np.int32, S), ("occ", np.uint8, n_cells),
                   ("lk_pos", f32, (S, 2)), ("lk_status", i8, S), ("lk_xy", f32, (S, 2)), ("lk_iters", np.int32, S),
                   ("fb_pos", f32, (S, 2)), ("fb_status", i8, S), ("st_pos", f32, (S, 2)), ("st_status", i8, S),
                   ("st_xy", f32, (S, 2)), ("params", np.uint8, (RING, PARAMS_BYTES)), ("cam", f32, 12),
                   ("cam_r", f32, 12), ("M_rl", f32, 12), ("epi", f32, 12)])


def result_layout(S: int) -> Layout:
    """One result slot (page-locked host memory, written by the kernels)."""
    return Layout([("hdr", np.int64, N_HEADER), ("cnt", np.int64, len(COUNTERS)), ("ids", np.int64, S),
                   ("uv", np.float32, (S, 2)), ("xy", np.float64, (S, 2)), ("vel", np.float64, (S, 2)),
                   ("score", np.float32, S), ("level", np.int32, S), ("age", np.int32, S),
                   ("uv_r", np.float32, (S, 2)), ("xy_r", np.float64, (S, 2))])


def _view1(a, i):
    return a[i:i + 1]


class FrameKernels:
    """Device buffers and kernel launches of the GPU frontend (see the module docstring)."""

    def __init__(self, camera, config, detector, tracker, capacity: int, levels: int, first_id: int,
                 camera_right=None, T_right_left=None):
        import cupy as cp

        self._cp = cp
        self.config, self.detector, self.tracker = config, detector, tracker
        self.W, self.H, self.S, self.levels = int(camera.width), int(camera.height), int(capacity), int(levels)
        self.stereo_on = camera_right is not None and bool(config.stereo)
        self.pyrs = [GpuPyramid(self.W, self.H, self.levels) for _ in range(RING)]
        self.pyrs_r = [GpuPyramid(self.W, self.H, self.levels) for _ in range(RING)] if self.stereo_on else []
        self._lk_tab = [tracker.level_table(p) for p in self.pyrs]
        self._lk_tab_r = [tracker.level_table(p) for p in self.pyrs_r]
        self._det_desc = [detector.levels_desc(p) for p in self.pyrs]
        lvl = np.zeros((RING, 2, self.levels), np.uint64)
        for s in range(RING):
            lvl[s, 0] = [a.data.ptr for a in self.pyrs[s].levels]
            if self.stereo_on:
                lvl[s, 1] = [a.data.ptr for a in self.pyrs_r[s].levels]
        self._lvl = [cp.asarray(lvl[s].reshape(-1)) for s in range(RING)]
        tc = config.tracker
        self.templates = tc.stored_templates
        self.layout = table_layout(self.S, detector.n_cells, self.templates)
        host = np.zeros(self.layout.nbytes, np.uint8)
        hv = self.layout.views(host)
        hv["hdr"][H["next_id"]] = int(first_id)
        hv["cam"][:] = cam_params(camera)
        if self.stereo_on:
            T = np.asarray(T_right_left, np.float64).reshape(4, 4)
            hv["cam_r"][:] = cam_params(camera_right)
            hv["M_rl"][:9] = T[:3, :3].ravel()
            hv["M_rl"][9] = 1.0
            hv["epi"][:9] = essential_rl(T).ravel()
        if self.templates:
            hv["affine"][:] = (1.0, 0.0, 0.0, 1.0)
            hv["gain"][:] = 1.0
        self.initial = host
        self.table = cp.asarray(host)
        self.t = self.layout.views(self.table)
        if self.templates:
            self.bank = cp.zeros((self.S, int(tc.levels), BANK_STRIDE), cp.float32)
            self.bank_valid = cp.zeros((self.S, int(tc.levels)), cp.uint8)
        p0 = self.layout.offset("params")
        self._M = [self.table[p0 + s * PARAMS_BYTES + 4 * _F32_M:p0 + s * PARAMS_BYTES + 4 * (_F32_M + 12)]
                   .view(cp.float32) for s in range(RING)]
        try:
            fe = get_module("frontend", frontend_defines())
            pm = get_module("pyramid")
            self._k_update, self._k_final, self._k_pack = (fe.get_function(n) for n in
                                                           ("table_update", "finalize", "pack_output"))
            self._k_pyr, self._k_halve = pm.get_function("pyramid_frame"), pm.get_function("pyramid_halve")
        except CudaUnavailable:
            raise
        except Exception as exc:
            raise CudaUnavailable(f"frontend kernels failed to load: {exc.__class__.__name__}: {exc}") from exc
        self.ransac = GpuRansac(self.S)      # allocated whether on or not: `ransac` may be switched live
        self.fx = float(camera.fx)
        self._k_lk = tracker.frontend_kernel
        self._k_tpl, self._k_extract = tracker.template_kernel, tracker.extract_kernel
        self._k_tpl_fb = tracker.template_fb_kernel
        self.crf_block_rows = 8             # CRF grid rows: few blocks, so that a gated-off launch is cheap

    def hdr(self, name: str):
        """One header slot as a one-element device array."""
        return _view1(self.t["hdr"], H[name])

    # ------------------------------------------------------------------ launches
    def enqueue_upload(self, s, stereo, hp_dev: int, stream, checked: bool, tracer=None, cams=None) -> None:
        """Pyramid of slot ``s`` (both cameras on stereo frames; ``cams``: only these, ``(0,)`` or
        ``(1,)``) from the frame whose address the frame parameters at ``hp_dev`` (page-locked) hold.
        The left camera's launch also copies the frame parameters to the device. ``tracer``: a
        :class:`~vilib_ros.frontend.gpu.pipeline.FrameTracer` told of each stage, or None."""
        cams = tuple(cams) if cams is not None else ((0, 1) if stereo else (0,))
        launch(self._k_pyr, ((self.W + 127) // 128, (self.H + 31) // 32, len(cams)), (256, 1, 1),
               (np.uint64(hp_dev), self.t["params"][s], self._lvl[s], np.int32(self.levels), np.int32(self.W),
                np.int32(self.H), np.int32(min(self.levels - 1, FUSED_LEVELS)), np.int32(cams[0])),
               stream=stream, checked=checked)
        for pyr in [self.pyrs_r[s] if c else self.pyrs[s] for c in cams]:
            for k in range(FUSED_LEVELS + 1, self.levels):
                src, dst = pyr.levels[k - 1], pyr.levels[k]
                h, w = dst.shape
                launch(self._k_halve, ((w + 31) // 32, (h + 7) // 8, 1), (32, 8, 1),
                       (src, np.int32(src.shape[1]), dst, np.int32(w), np.int32(w), np.int32(h)),
                       stream=stream, checked=checked)
        if tracer:
            tracer.stage("pyramid")

    def _lk(self, tmpl, img, count, tmpl_pos, guess, outs, xy=None, M=None, cam_pred=None, cam_out=None, gate=None,
            epi=None, epi_threshold=0.0, counters=(None, None), levels=None):
        tc = self.config.tracker
        null = np.uint64(0)

        def p(a):
            return null if a is None else a

        warps = self.tracker.warps
        args = (tmpl, img, np.int32(self.W), np.int32(self.H), np.int32(tc.levels if levels is None else levels),
                np.int32(tc.patch16_mask),
                count, tmpl_pos, guess, p(xy), p(M), p(cam_pred), p(cam_out), p(gate), np.int32(tc.max_iterations),
                np.float32(tc.eps), np.float32(tc.min_eigen), np.float32(tc.max_residual), p(epi),
                np.float32(epi_threshold), p(counters[0]), p(counters[1]), *(p(a) for a in outs))
        return self._k_lk, ((self.S + warps - 1) // warps, 1, 1), (32, warps, 1), args

    def _template_cols(self) -> tuple:
        """The per-slot template state for table_update / finalize (null pointers without templates)."""
        if not self.templates:
            return (np.uint64(0),) * 7
        t = self.t
        return (t["tslot"], t["gain"], t["offset"], t["affine"], t["residual"], t["tmpl_age"], t["refresh"])

    def _template_update_args(self) -> tuple:
        tc = self.config.tracker
        null = np.uint64(0)
        if not self.templates:
            return self._template_cols() + (null,) * 4 + (np.int32(0), np.float32(0), np.int32(0))
        t = self.t
        return self._template_cols() + (
            t["lk_residual"], t["lk_gain"], t["lk_offset"], t["lk_affine"] if tc.warp == "affine" else null,
            np.int32(tc.template == "previous"), np.float32(tc.template_refresh_residual),
            np.int32(tc.template_max_age))

    def _lk_templates(self, s, count, fb: bool = False):
        """lk_template_<warp>_<mode>: every live track from its stored template into frame ``s``;
        ``fb``: lk_template_fb_<warp>_<mode>, the forward-backward check into the previous frame's
        slot fused."""
        tc, t = self.config.tracker, self.t
        aff = tc.warp == "affine"
        null = np.uint64(0)
        args = (self.bank, self.bank_valid, t["tslot"], t["gain"], t["offset"], t["affine"], self._lk_tab[s],
                np.int32(self.W), np.int32(self.H), np.int32(tc.levels), np.int32(tc.patch16_mask), count, t["uv"],
                t["xy"], self._M[s], t["cam"], t["cam"], np.int32(tc.max_iterations), np.float32(tc.eps),
                np.float32(tc.min_eigen), np.float32(tc.max_residual), t["lk_pos"], t["lk_status"], t["lk_xy"],
                t["lk_iters"], t["lk_residual"], t["lk_gain"], t["lk_offset"], t["lk_affine"] if aff else null)
        if fb:
            args += (self._lk_tab[(s - 1) % RING], np.int32(self.config.fb_levels_used), t["fb_pos"], t["fb_status"])
        return (self._k_tpl_fb if fb else self._k_tpl, *self.tracker.template_launch(self.S), args)

    def _extract(self, s, count):
        """lk_extract_<mode>: the templates (and their solvers) of the slots flagged ``refresh`` (new, or due) from frame ``s``."""
        tc, t = self.config.tracker, self.t
        warps = self.tracker.warps
        args = (self._lk_tab[s], np.int32(self.W), np.int32(self.H), np.int32(tc.levels), np.int32(tc.patch16_mask),
                count, t["uv"], t["tslot"], t["refresh"], self.bank, self.bank_valid)
        return self._k_extract, ((self.S + warps - 1) // warps, 1, 1), (32, warps, 1), args

    def enqueue_compute(self, s, stereo, stream, checked: bool, out_offsets: tuple, tracer=None,
                        with_stereo: bool = True) -> None:
        """Tracking, RANSAC, table, redetection and result of the frame in slot ``s``; on stereo
        frames then :meth:`enqueue_stereo` unless ``with_stereo`` is false (the caller enqueues it
        after the right camera's pyramid)."""
        t, c, d = self.t, self.config, self.detector
        null = np.uint64(0)
        sp = (s - 1) % RING                 # the previous frame's slot (an empty table after a reset)
        count = self.hdr("count")
        prm = t["params"][s]

        def go(kern, grid, block, args, name):
            launch(kern, grid, block, args, stream=stream, checked=checked)
            if tracer:
                tracer.stage(name)

        fused_fb = self.templates and c.fb_check
        if self.templates:
            go(*self._lk_templates(s, count, fb=fused_fb), name="lk")
        else:
            go(*self._lk(self._lk_tab[sp], self._lk_tab[s], count, t["uv"], t["uv"],
                         (t["lk_pos"], t["lk_status"], t["lk_xy"], t["lk_iters"]), xy=t["xy"], M=self._M[s],
                         cam_pred=t["cam"], cam_out=t["cam"]), name="lk")
        if c.fb_check and not fused_fb:
            go(*self._lk(self._lk_tab[s], self._lk_tab[sp], count, t["lk_pos"], t["uv"],
                         (t["fb_pos"], t["fb_status"], None, None), gate=t["lk_status"], levels=c.fb_levels_used),
               name="fb")
        if c.ransac:
            self.ransac.enqueue(stream, checked, t["hdr"], t["lk_status"], t["uv"], t["xy"], t["lk_xy"], t["fb_pos"],
                                t["fb_status"] if c.fb_check else None, c.fb_threshold, c.ransac_threshold / self.fx,
                                c.ransac_confidence)
            if tracer:
                tracer.stage("ransac")
        rows, cols = d.grid_shape
        dc = c.detector
        go(self._k_update, (1, 1, 1), (1024, 1, 1),
           (t["hdr"], t["cnt"], t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"], t["age"],
            t["lk_pos"], t["lk_status"], t["lk_xy"], t["lk_iters"],
            t["fb_pos"] if c.fb_check else null, t["fb_status"] if c.fb_check else null, np.float32(c.fb_threshold),
            self.ransac.reject if c.ransac else null, prm, t["occ"],
            np.int32(dc.cell_width), np.int32(dc.cell_height), np.int32(rows), np.int32(cols),
            np.float64(c.min_track_fraction * self.S), *self._template_update_args()), "table")
        gate = self.hdr("detect")
        d.enqueue_crf(self._det_desc[s], stream, checked, gate=gate, block_rows=self.crf_block_rows)
        if tracer:
            tracer.stage("crf")
        d.enqueue_nms(stream, checked, occupancy=t["occ"], gate=gate)
        if tracer:
            tracer.stage("nms")
        pack_args = (prm, t["st_pos"], t["st_xy"], np.int32(N_HEADER), np.int32(len(COUNTERS)), *out_offsets)
        go(self._k_final, (1, 1, 1), (1024, 1, 1),
           (t["hdr"], t["cnt"], t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"], t["age"],
            d.out_x, d.out_y, d.out_score, d.out_level, np.int32(d.n_cells), t["cam"], np.int32(self.S),
            np.int32(0 if stereo else 1), *pack_args, *self._template_cols()), "finalize")
        if self.templates:
            go(*self._extract(s, count), name="extract")
        if stereo and with_stereo:
            self.enqueue_stereo(s, stream, checked, out_offsets, tracer)

    def enqueue_stereo(self, s, stream, checked: bool, out_offsets: tuple, tracer=None) -> None:
        """The stereo match of the frame in slot ``s`` (left to right LK with the epipolar check)
        and the packing of its result: after :meth:`enqueue_compute` and both pyramids."""
        t, c = self.t, self.config
        count, prm = self.hdr("count"), t["params"][s]
        ci = COUNTER_INDEX
        launch(*self._lk(self._lk_tab[s], self._lk_tab_r[s], count, t["uv"], t["uv"],
                         (t["st_pos"], t["st_status"], t["st_xy"], None), xy=t["xy"], M=t["M_rl"],
                         cam_pred=t["cam_r"], cam_out=t["cam_r"], epi=t["epi"],
                         epi_threshold=c.stereo_epipolar_threshold,
                         counters=(_view1(t["cnt"], ci["stereo_matched"]), _view1(t["cnt"], ci["stereo_rejected"]))),
               stream=stream, checked=checked)
        if tracer:
            tracer.stage("stereo")
        launch(self._k_pack, ((self.S + 255) // 256, 1, 1), (256, 1, 1),
               (t["hdr"], t["cnt"], prm, t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"], t["age"],
                t["st_pos"], t["st_xy"], np.int32(N_HEADER), np.int32(len(COUNTERS)), *out_offsets),
               stream=stream, checked=checked)
        if tracer:
            tracer.stage("pack")
