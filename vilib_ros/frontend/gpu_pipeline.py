"""The frontend's GPU pipeline: one CUDA graph launch per frame, the track table on the device.

Per frame the host writes the frame into a page-locked slot (nothing when it gets a CuPy array
or page-locked memory), fills the slot's frame parameters (source address, result slot,
rotation prediction, dt), launches the slot's CUDA graph and records one event. The graph
(kernels/pyramid.cu, lk.cu, fast.cu, nms.cu, frontend.cu):

  pyramid_frame (reads the frame: the upload) -> lk_frontend (previous -> current frame, from
  the IMU-predicted position, undistorted result) [-> lk_frontend backward: the forward-backward
  check] -> table_update (status, compaction, velocity, age, cell occupancy, redetection flag)
  -> fast_crf_levels -> nms_cell (both return at once unless the flag is set) -> new_tracks
  (ids, undistortion) [-> lk_frontend stereo with the epipolar check] -> pack_output (writes the
  result slot in page-locked host memory: zero-copy)

and :meth:`GpuPipeline.collect` waits for the event and hands out a TrackFrame whose arrays are
views of that result slot. With RANSAC on, the graph is split around a host RANSAC (a
synchronisation per frame). The decisions are those of :class:`~vilib_ros.frontend.track_table.TrackTable`.

Slots: :data:`RING` frame slots (staging buffer + device pyramid; the previous frame's pyramid
is the LK template) and :data:`RESULT_SLOTS` result slots. A frame's result stays valid until
``RESULT_SLOTS - 1`` further frames have been submitted; a result not yet collected when its
slot comes round again is copied first.
"""
from __future__ import annotations

import numpy as np

from vilib_ros._cuda import (CudaUnavailable, GraphCache, Layout, checked_launches, get_module, host_device_pointer,
                             launch, pinned_buffer)
from vilib_ros.frontend.pyramid import GpuPyramid
from vilib_ros.frontend.stereo import cam_params, essential_rl
from vilib_ros.frontend.track_table import (COUNTER_INDEX, COUNTERS, HEADER, MAX_CAPACITY, MAX_CELLS, N_HEADER,
                                            fb_passed, kernel_defines, ransac_outliers)
from vilib_ros.types import FrameStats, TrackFrame

RING = 4
RESULT_SLOTS = 8
# How the frame gets to the device: 'mapped' = copied into a page-locked slot, read there by the
# pyramid kernel (zero-copy); 'copy' = copied into a page-locked slot, then a DMA copy on the upload
# stream; 'pageable' = a DMA copy straight from the caller's array on the upload stream (the driver
# stages it: its host copy and the transfer overlap).
UPLOADS = ("mapped", "copy", "pageable")
FUSED_LEVELS = 5                # pyramid_frame builds levels 1..5; further ones by pyramid_halve
# FrameParams (kernels/frame.cuh): 128 bytes; word offsets of its fields
PARAMS_BYTES = 128
_U64_SRC, _U64_OUT = 0, 2
_F32_M, _F32_USE_M, _F32_DT, _I32_STEREO = 6, 15, 18, 19
_H = {n: i for i, n in enumerate(HEADER)}


def table_layout(S: int, n_cells: int) -> Layout:
    """The device table: header, counters, the live tracks, cell occupancy, per-frame LK
    scratch, frame parameters and constants (cameras, stereo rotation and essential matrix)."""
    f32, i8 = np.float32, np.int8
    return Layout([("hdr", np.int64, N_HEADER), ("cnt", np.int64, len(COUNTERS)), ("ids", np.int64, S),
                   ("uv", f32, (S, 2)), ("xy", f32, (S, 2)), ("vel", f32, (S, 2)), ("score", f32, S),
                   ("level", np.int32, S), ("age", np.int32, S), ("occ", np.uint8, n_cells),
                   ("lk_pos", f32, (S, 2)), ("lk_status", i8, S), ("lk_xy", f32, (S, 2)), ("lk_iters", np.int32, S),
                   ("fb_pos", f32, (S, 2)), ("fb_status", i8, S), ("st_pos", f32, (S, 2)), ("st_status", i8, S),
                   ("st_xy", f32, (S, 2)), ("params", np.uint8, PARAMS_BYTES), ("cam", f32, 12), ("cam_r", f32, 12),
                   ("M_rl", f32, 12), ("epi", f32, 12)])


def result_layout(S: int) -> Layout:
    """One result slot (page-locked host memory, written by pack_output)."""
    return Layout([("hdr", np.int64, N_HEADER), ("cnt", np.int64, len(COUNTERS)), ("ids", np.int64, S),
                   ("uv", np.float32, (S, 2)), ("xy", np.float64, (S, 2)), ("vel", np.float64, (S, 2)),
                   ("score", np.float32, S), ("level", np.int32, S), ("age", np.int32, S),
                   ("uv_r", np.float32, (S, 2)), ("xy_r", np.float64, (S, 2))])


class _Ticket:
    """A submitted frame until its result is collected."""

    __slots__ = ("slot", "out", "stamp", "stereo", "host", "keep", "frame")

    def __init__(self, slot, out, stamp, stereo, host, keep):
        self.slot, self.out, self.stamp, self.stereo, self.host, self.keep = slot, out, stamp, stereo, host, keep
        self.frame = None


class GpuPipeline:
    device = "cuda"

    def __init__(self, camera, config, detector, tracker, capacity: int, levels: int, first_id: int = 0,
                 camera_right=None, T_right_left=None, upload: str = "pageable"):
        import cupy as cp

        S = int(capacity)
        if S > MAX_CAPACITY:
            raise ValueError(f"the GPU frontend holds at most {MAX_CAPACITY} tracks, got a target of {S}")
        if detector.n_cells > MAX_CELLS:
            raise ValueError(f"the GPU frontend handles at most {MAX_CELLS} detector cells, got {detector.n_cells}")
        if upload not in UPLOADS:
            raise ValueError(f"upload must be one of {UPLOADS}, got {upload!r}")
        self._cp = cp
        self.camera, self.config, self.detector, self.tracker = camera, config, detector, tracker
        self.W, self.H, self.S, self.levels = int(camera.width), int(camera.height), S, int(levels)
        self.stereo_on = camera_right is not None and bool(config.stereo)
        self.upload = upload
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.up_stream = cp.cuda.Stream(non_blocking=True)
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
        # the device table, its constants and first id
        self._tl = table_layout(S, detector.n_cells)
        host = np.zeros(self._tl.nbytes, np.uint8)
        hv = self._tl.views(host)
        hv["hdr"][_H["next_id"]] = int(first_id)
        hv["cam"][:] = cam_params(camera)
        if self.stereo_on:
            T = np.asarray(T_right_left, np.float64).reshape(4, 4)
            hv["cam_r"][:] = cam_params(camera_right)
            hv["M_rl"][:9] = T[:3, :3].ravel()
            hv["M_rl"][9] = 1.0
            hv["epi"][:9] = essential_rl(T).ravel()
        self._table = cp.asarray(host)
        self.t = self._tl.views(self._table)
        p0 = self._tl.offset("params")
        self._M = self._table[p0 + 4 * _F32_M:p0 + 4 * (_F32_M + 12)].view(cp.float32)
        # page-locked host memory: frame staging, frame parameters, result slots, RANSAC exchange
        keep = self._keep = []
        self._img = [pinned_buffer(self.W * self.H, keep).reshape(self.H, self.W) for _ in range(RING)]
        self._img_r = ([pinned_buffer(self.W * self.H, keep).reshape(self.H, self.W) for _ in range(RING)]
                       if self.stereo_on else [])
        prm = pinned_buffer(RING * PARAMS_BYTES, keep)
        self._prm_u64 = prm.view(np.uint64).reshape(RING, -1)
        self._prm_f32 = prm.view(np.float32).reshape(RING, -1)
        self._prm_i32 = prm.view(np.int32).reshape(RING, -1)
        self._rl = result_layout(S)
        nb = self._rl.nbytes
        res = pinned_buffer(RESULT_SLOTS * nb, keep)
        self._out = [self._rl.views(res[o * nb:(o + 1) * nb]) for o in range(RESULT_SLOTS)]
        self._reject = pinned_buffer(max(S, 16), keep)[:S].view(np.int8)
        self._mirror = self._tl.views(pinned_buffer(self._tl.nbytes, keep))
        dptr = {a.ctypes.data: host_device_pointer(a.ctypes.data) for a in
                self._img + self._img_r + [prm, res, self._reject]}
        if not all(dptr.values()):
            raise CudaUnavailable("page-locked host memory is not mapped into the device's address space")
        self._dev = dptr
        self._prm_dev = [dptr[prm.ctypes.data] + PARAMS_BYTES * s for s in range(RING)]
        self._out_dev = [dptr[res.ctypes.data] + nb * o for o in range(RESULT_SLOTS)]
        self._out_offsets = tuple(np.int32(self._rl.offset(n)) for n in
                                  ("hdr", "cnt", "ids", "uv", "xy", "vel", "score", "level", "age", "uv_r", "xy_r"))
        # kernels
        try:
            fe = get_module("frontend", kernel_defines())
            pm = get_module("pyramid")
            self._k_update, self._k_final, self._k_pack = (fe.get_function(n) for n in
                                                           ("table_update", "finalize", "pack_output"))
            self._k_pyr, self._k_halve = pm.get_function("pyramid_frame"), pm.get_function("pyramid_halve")
        except CudaUnavailable:
            raise
        except Exception as exc:
            raise CudaUnavailable(f"frontend kernels failed to load: {exc.__class__.__name__}: {exc}") from exc
        self._k_lk = tracker.frontend_kernel
        self._ev_start = [cp.cuda.Event() for _ in range(RESULT_SLOTS)]
        self._ev_done = [cp.cuda.Event() for _ in range(RESULT_SLOTS)]
        self._ev_input = cp.cuda.Event(disable_timing=True)
        self._ev_up = [cp.cuda.Event(disable_timing=True) for _ in range(RING)]
        self.graphs = GraphCache(self.stream, config.use_graph, name="frontend")
        self.graph_launches = 0
        self.crf_block_rows = 8             # CRF grid rows: few blocks, so that a gated-off launch is cheap
        self.probe = None                   # benchmark: called with each stage's name after it is enqueued
        self._pinned: dict[int, int] = {}   # page-locked frames of pinned_frames(): host -> device address
        self._frames = 0
        self._slot_out = [-1] * RING        # result slot of the last frame computed in each frame slot
        self._pending: dict[int, _Ticket] = {}
        self._counters = np.zeros(len(COUNTERS), np.int64)
        self._next_id = int(first_id)
        self._count = 0
        self._warm_up(host)

    def _warm_up(self, initial: np.ndarray) -> None:
        """Run every kernel once on an empty frame, outside graph capture (module loading must
        not happen inside a capture), then restore the initial table."""
        cp = self._cp
        cp.cuda.Device().synchronize()
        u, f = self._prm_u64[0], self._prm_f32[0]
        u[_U64_SRC] = self._dev[self._img[0].ctypes.data]
        u[_U64_SRC + 1] = self._dev[self._img_r[0].ctypes.data] if self.stereo_on else 0
        u[_U64_OUT] = self._out_dev[0]
        f[_F32_USE_M] = 0.0
        f[_F32_DT] = 0.0
        self._prm_i32[0, _I32_STEREO] = 1 if self.stereo_on else 0
        self._enqueue(0, self.stereo_on, "all", True)
        self.stream.synchronize()
        self._table.set(initial)
        cp.cuda.Device().synchronize()

    # ------------------------------------------------------------------ state
    @property
    def next_id(self) -> int:
        if self._pending:                   # frames in flight may have given out ids
            self.stream.synchronize()
            return int(self.t["hdr"][_H["next_id"]].get())
        return self._next_id

    @property
    def num_tracks(self) -> int:
        return self._count

    def counters(self) -> np.ndarray:
        return self._counters

    @property
    def graph_error(self) -> str | None:
        return self.graphs.error

    def reset(self) -> None:
        """Drop every track (ids go on); frames in flight are finished and discarded."""
        self.stream.synchronize()
        self._pending.clear()
        with self.stream:
            self.t["hdr"][_H["count"]:_H["count"] + 1].fill(0)
        self.stream.synchronize()
        self._count = 0

    def apply_config(self, config) -> None:
        """Take new kernel scalars: the graphs are captured again with them at the next frame."""
        self.stream.synchronize()
        self.config = config
        self.detector.config = config.detector
        self.tracker.config = config.tracker
        self.graphs.clear()

    # ------------------------------------------------------------------ per frame
    def submit(self, image, image_right, stamp_ns: int, R, dt: float, host_stats: dict) -> _Ticket:
        s = self._frames % RING
        o = self._frames % RESULT_SLOTS
        self._frames += 1
        old = self._pending.pop(o, None)
        if old is not None:                 # never collected: copy it out before its slot is reused
            old.frame = self._frame(old).copy()
        if self._slot_out[s] >= 0:          # the frame that last used this slot has read it
            self._ev_done[self._slot_out[s]].synchronize()
        self._slot_out[s] = o
        stereo = image_right is not None and self.stereo_on
        if self.upload != "mapped" and self._frames > RING - 1:
            # the DMA into slot s waits for the last frame that reads it (as the previous frame)
            self.up_stream.wait_event(self._ev_done[(self._frames - RING) % RESULT_SLOTS])
        src = self._source(image, self._img, s, self.pyrs[s])
        src_r = self._source(image_right, self._img_r, s, self.pyrs_r[s]) if stereo else 0
        if self.upload != "mapped":
            self._ev_up[s].record(self.up_stream)
            self.stream.wait_event(self._ev_up[s])
        u, f = self._prm_u64[s], self._prm_f32[s]
        u[_U64_SRC] = src
        u[_U64_SRC + 1] = src_r
        u[_U64_OUT] = self._out_dev[o]
        if R is None:
            f[_F32_USE_M] = 0.0
        else:
            f[_F32_M:_F32_M + 9] = np.asarray(R, np.float64).T.ravel()
            f[_F32_USE_M] = 1.0
        f[_F32_DT] = dt
        self._prm_i32[s, _I32_STEREO] = 1 if stereo else 0
        tk = _Ticket(s, o, int(stamp_ns), stereo, host_stats, (image, image_right))   # alive until collected
        if self.config.ransac:
            self._run_ransac(s, o, stereo)
        else:
            self._run(s, o, stereo, "all", record_start=True, record_done=True)
        host_stats["graph_launches"] = self.graph_launches
        self._pending[o] = tk
        return tk

    def pinned_frames(self, count: int) -> list[np.ndarray]:
        """``count`` page-locked frame buffers that :meth:`submit` reads without a host copy."""
        out = []
        for _ in range(int(count)):
            a = pinned_buffer(self.W * self.H, self._keep).reshape(self.H, self.W)
            self._pinned[a.ctypes.data] = host_device_pointer(a.ctypes.data)
            out.append(a)
        return out

    def _source(self, image, staging, s, pyr) -> int:
        """Device-accessible address of the frame for the pyramid kernel (see ``upload``)."""
        cp = self._cp
        if isinstance(image, np.ndarray):
            host = image.ctypes.data
            d = self._pinned.get(host, 0) if image.flags.c_contiguous else 0
            if not d and (self.upload != "pageable" or not image.flags.c_contiguous):
                np.copyto(staging[s], image)  # the one host copy, into the page-locked slot
                host = staging[s].ctypes.data
                d = self._dev[host]
            if self.upload == "mapped":
                return d
            cp.cuda.runtime.memcpyAsync(pyr.levels[0].data.ptr, host, self.W * self.H,
                                        cp.cuda.runtime.memcpyHostToDevice, self.up_stream.ptr)
            return pyr.levels[0].data.ptr
        # a CuPy array: read on the device, after the work queued on the caller's stream
        self._ev_input.record(cp.cuda.get_current_stream())
        self.stream.wait_event(self._ev_input)
        return int(image.data.ptr)

    def _run(self, s, o, stereo, phase, record_start=False, record_done=False) -> None:
        st = self.stream
        g = None if self.probe else self.graphs.get((s, stereo, phase), lambda: self._enqueue(s, stereo, phase, False))
        if record_start:
            self._ev_start[o].record(st)
        if g is not None:
            g.launch(st)
            self.graph_launches += 1
            if checked_launches():
                st.synchronize()
        else:
            self._enqueue(s, stereo, phase, True)
        if record_done:
            self._ev_done[o].record(st)

    def _run_ransac(self, s, o, stereo) -> None:
        """Phase A (pyramid, LK, FB, table copied to the host), RANSAC here, phase B (the rest)."""
        c = self.config
        self._run(s, o, stereo, "A", record_start=True)
        self.stream.synchronize()
        m = self._mirror
        n = int(m["hdr"][_H["count"]])
        ok = m["lk_status"][:n] == 0
        if c.fb_check:
            ok &= fb_passed(m["fb_pos"][:n], m["fb_status"][:n], m["uv"][:n], c.fb_threshold)
        out = ransac_outliers(m["xy"][:n][ok], m["lk_xy"][:n][ok], c.ransac_threshold / float(self.camera.fx),
                              c.ransac_confidence)
        self._reject[:] = 0
        if out is not None:
            self._reject[np.flatnonzero(ok)[out]] = 1
        self._run(s, o, stereo, "B", record_done=True)

    def _lk(self, tmpl, img, count, tmpl_pos, guess, outs, xy=None, M=None, cam_pred=None, cam_out=None, gate=None,
            epi=None, epi_threshold=0.0, counters=(None, None)):
        tc = self.config.tracker
        null = np.uint64(0)

        def p(a):
            return null if a is None else a

        warps = self.tracker.warps
        args = (tmpl, img, np.int32(self.W), np.int32(self.H), np.int32(tc.levels), np.int32(tc.patch16_mask),
                count, tmpl_pos, guess, p(xy), p(M), p(cam_pred), p(cam_out), p(gate), np.int32(tc.max_iterations),
                np.float32(tc.eps), np.float32(tc.min_eigen), np.float32(tc.max_residual), p(epi),
                np.float32(epi_threshold), p(counters[0]), p(counters[1]), *(p(a) for a in outs))
        return ((self.S + warps - 1) // warps, 1, 1), (32, warps, 1), args

    def _enqueue(self, s, stereo, phase, checked) -> None:
        """The frame's kernels on :attr:`stream` (``phase``: 'all', or 'A' / 'B' around RANSAC)."""
        st, t, c = self.stream, self.t, self.config
        null = np.uint64(0)
        sp = (s - 1) % RING                 # the previous frame's slot (empty table after a reset)
        count = t["hdr"][_H["count"]:_H["count"] + 1]
        probe = self.probe or (lambda name: None)

        def go(kern, grid, block, args, name=None):
            launch(kern, grid, block, args, stream=st, checked=checked)
            if name:
                probe(name)

        if phase in ("all", "A"):
            ncam = 2 if stereo else 1
            go(self._k_pyr, ((self.W + 127) // 128, (self.H + 31) // 32, ncam), (256, 1, 1),
               (np.uint64(self._prm_dev[s]), t["params"], self._lvl[s], np.int32(self.levels), np.int32(self.W),
                np.int32(self.H), np.int32(min(self.levels - 1, FUSED_LEVELS))), "pyramid")
            for pyr in ([self.pyrs[s]] + ([self.pyrs_r[s]] if stereo else [])):
                for k in range(FUSED_LEVELS + 1, self.levels):
                    src, dst = pyr.levels[k - 1], pyr.levels[k]
                    h, w = dst.shape
                    go(self._k_halve, ((w + 31) // 32, (h + 7) // 8, 1), (32, 8, 1),
                       (src, np.int32(src.shape[1]), dst, np.int32(w), np.int32(w), np.int32(h)))
            go(self._k_lk, *self._lk(self._lk_tab[sp], self._lk_tab[s], count, t["uv"], t["uv"],
                                     (t["lk_pos"], t["lk_status"], t["lk_xy"], t["lk_iters"]), xy=t["xy"], M=self._M,
                                     cam_pred=t["cam"], cam_out=t["cam"]), name="lk")
            if c.fb_check:
                go(self._k_lk, *self._lk(self._lk_tab[s], self._lk_tab[sp], count, t["lk_pos"], t["uv"],
                                         (t["fb_pos"], t["fb_status"], None, None), gate=t["lk_status"]), name="fb")
        if phase == "A":
            cp = self._cp
            cp.cuda.runtime.memcpyAsync(self._mirror["hdr"].ctypes.data, self._table.data.ptr, self._tl.nbytes,
                                        cp.cuda.runtime.memcpyDeviceToHost, st.ptr)
            return
        rows, cols = self.detector.grid_shape
        dc = c.detector
        go(self._k_update, (1, 1, 1), (1024, 1, 1),
           (t["hdr"], t["cnt"], t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"], t["age"],
            t["lk_pos"], t["lk_status"], t["lk_xy"], t["lk_iters"],
            t["fb_pos"] if c.fb_check else null, t["fb_status"] if c.fb_check else null, np.float32(c.fb_threshold),
            np.uint64(self._dev[self._reject.ctypes.data]) if phase == "B" else null, t["params"], t["occ"],
            np.int32(dc.cell_width), np.int32(dc.cell_height), np.int32(rows), np.int32(cols),
            np.float64(c.min_track_fraction * self.S)), "table")
        d = self.detector
        gate = t["hdr"][_H["detect"]:_H["detect"] + 1]
        d.enqueue_crf(self._det_desc[s], st, checked, gate=gate, block_rows=self.crf_block_rows)
        probe("crf")
        d.enqueue_nms(st, checked, occupancy=t["occ"], gate=gate)
        probe("nms")
        pack_args = (t["params"], t["st_pos"], t["st_xy"], np.int32(N_HEADER), np.int32(len(COUNTERS)),
                     *self._out_offsets)
        go(self._k_final, (1, 1, 1), (1024, 1, 1),
           (t["hdr"], t["cnt"], t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"], t["age"],
            d.out_x, d.out_y, d.out_score, d.out_level, np.int32(d.n_cells), t["cam"], np.int32(self.S),
            np.int32(0 if stereo else 1), *pack_args), "finalize")
        if stereo:
            ci = COUNTER_INDEX
            go(self._k_lk, *self._lk(self._lk_tab[s], self._lk_tab_r[s], count, t["uv"], t["uv"],
                                     (t["st_pos"], t["st_status"], t["st_xy"], None), xy=t["xy"], M=t["M_rl"],
                                     cam_pred=t["cam_r"], cam_out=t["cam_r"], epi=t["epi"],
                                     epi_threshold=c.stereo_epipolar_threshold,
                                     counters=(t["cnt"][ci["stereo_matched"]:ci["stereo_matched"] + 1],
                                               t["cnt"][ci["stereo_rejected"]:ci["stereo_rejected"] + 1])),
               name="stereo")
            go(self._k_pack, ((self.S + 255) // 256, 1, 1), (256, 1, 1),
               (t["hdr"], t["cnt"], t["params"], t["ids"], t["uv"], t["xy"], t["vel"], t["score"], t["level"],
                t["age"], *pack_args[1:]), "pack")

    # ------------------------------------------------------------------ results
    def collect(self, tk: _Ticket) -> TrackFrame:
        """The frame's TrackFrame (waits for it): views of its result slot."""
        if tk.frame is not None:
            return tk.frame
        fr = self._frame(tk)
        if self._pending.get(tk.out) is tk:
            del self._pending[tk.out]
        return fr

    def _frame(self, tk: _Ticket) -> TrackFrame:
        cp = self._cp
        o = tk.out
        self._ev_done[o].synchronize()
        v = self._out[o]
        n = int(v["hdr"][_H["count"]])
        np.copyto(self._counters, v["cnt"])
        self._next_id = int(v["hdr"][_H["next_id"]])
        self._count = n
        tk.keep = None
        fr = TrackFrame(stamp_ns=tk.stamp, ids=v["ids"][:n], uv=v["uv"][:n], xy=v["xy"][:n], velocity=v["vel"][:n],
                        score=v["score"][:n], level=v["level"][:n], age=v["age"][:n],
                        timings={"gpu_s": cp.cuda.get_elapsed_time(self._ev_start[o], self._ev_done[o]) * 1e-3},
                        stats=FrameStats(COUNTER_INDEX, v["cnt"], tk.host))
        if tk.stereo:
            fr.uv_right = v["uv_r"][:n]
            fr.xy_right = v["xy_r"][:n]
        return fr

