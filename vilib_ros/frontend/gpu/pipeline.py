"""The frontend's GPU pipeline: the host side of a frame, one to three CUDA graph launches and one event.

Per frame the host fills the slot's frame parameters in page-locked memory (source address,
result slot, rotation prediction, dt), launches the slot's graphs (:mod:`vilib_ros.frontend.gpu.frame`)
and records one event; :meth:`GpuPipeline.collect` waits for it and hands out a TrackFrame whose
arrays are views of the frame's result slot in page-locked memory (written by the kernels:
zero-copy). With frames in flight (submit-ahead) the upload graph goes on the upload stream and
the compute graph on the compute stream, so the compute part of frame k overlaps the upload of
frame k+1; with none (``process()``: every earlier frame collected) upload and compute are one
graph on the compute stream, three CUDA calls on the host. A stereo pair of pageable frames with
none in flight (``upload='mapped'``) goes in three graphs instead: the left camera's pyramid and the
mono part first, the host copying the right frame meanwhile, then the right pyramid on the upload
stream (its read over PCIe overlapping the left part's kernels), then the stereo match and the
packing: the right frame's host copy and transfer are off the frame's critical path.

How the frame gets to the device (``upload``):

* ``'streamed'`` (default): as ``'mapped'``, but a frame with nothing in flight is launched
  before its host copy, which then goes in bands that the pyramid kernel waits for
  (:mod:`vilib_ros.frontend.gpu.streamed_upload`): the copy and the device's read overlap;
* ``'mapped'``: a pageable frame is copied into a page-locked slot and the pyramid
  kernel reads it there (zero-copy); frames from :meth:`GpuPipeline.pinned_frames` are read in
  place;
* ``'copy'``: the frame is copied into a page-locked slot, then a DMA copy to the device;
* ``'pageable'``: a DMA copy straight from the caller's array (the driver stages it);
* a CuPy array is read in place on the device.

Slots: :data:`~vilib_ros.frontend.gpu.frame.RING` frame slots (staging buffer, device pyramid,
frame parameters) and :data:`RESULT_SLOTS` result slots. With nothing in flight the frame is copied
into the first staging buffer every time, whatever its frame slot: one buffer the host's caches
keep, where four in turn would each be cold. A frame's result stays valid until
``RESULT_SLOTS - 1`` further frames have been submitted; a result not yet collected when its
slot comes round again is copied first. RANSAC runs on the device inside the compute graph
(:mod:`vilib_ros.frontend.gpu.ransac`): no synchronisation within a frame. The decisions are
those of :class:`~vilib_ros.frontend.track_table.TrackTable`.

Benchmarks hang one optional :class:`FrameTracer` on :attr:`GpuPipeline.tracer` (None by
default): the host steps of a frame (:data:`STEPS`), the streamed copy's duration, and with
``stages`` every stage enqueued on its own (no graph) with a call after each.
"""
from __future__ import annotations

from time import perf_counter_ns as _ns

import numpy as np

from vilib_ros._cuda import (CudaUnavailable, GraphCache, checked_launches, host_device_pointer, pinned_buffer,
                             pinned_frames)
from vilib_ros.frontend.config import COUNTER_INDEX, COUNTERS, check_capacity
from vilib_ros.frontend.gpu.frame import H, PARAMS_BYTES, RING, FrameKernels, result_layout
from vilib_ros.frontend.gpu.streamed_upload import UPLOADS, StreamedUpload
from vilib_ros.types import FrameStats, TrackFrame

RESULT_SLOTS = 8
#: what the host does between the marks of a :class:`FrameTracer` (one name per interval; the
#: first starts, and the last ends, outside the pipeline)
STEPS = ("checks", "source", "launch", "between", "wait", "frame", "return")
# FrameParams (kernels/frame.cuh): word offsets of its fields
_U64_SRC, _U64_OUT = 0, 2
_F32_M, _F32_USE_M, _F32_DT, _I32_STEREO = 6, 15, 18, 19
_H_COUNT, _H_NEXT_ID = H["count"], H["next_id"]
_RESULT_COLUMNS = ("hdr", "cnt", "ids", "uv", "xy", "vel", "score", "level", "age", "uv_r", "xy_r")


def _set_motion(f32, R, dt: float) -> None:
    """The rotation prediction ``R`` (or none) and ``dt`` into one slot's FrameParams (its float32 words)."""
    if R is None:
        f32[_F32_USE_M] = 0.0
    else:
        f32[_F32_M:_F32_M + 9] = np.asarray(R, np.float64).T.ravel()
        f32[_F32_USE_M] = 1.0
    f32[_F32_DT] = dt


class FrameTracer:
    """What a benchmark learns from :attr:`GpuPipeline.tracer` (this class does nothing: a
    benchmark overrides what it wants).

    :meth:`mark` is called after each host step of a frame (the intervals are :data:`STEPS`),
    :meth:`copied` with the streamed upload's host copy. With :attr:`stages` the frame's kernels
    are enqueued one by one on the compute stream (no CUDA graph, upload and compute on one
    stream) and :meth:`stage` is called with each stage's name after it is enqueued."""

    stages = False

    def mark(self) -> None:
        """A host step of the frame is done."""

    def copied(self, ns: int) -> None:
        """The streamed upload's host copy took ``ns`` nanoseconds."""

    def stage(self, name: str) -> None:
        """The stage ``name`` is enqueued (with :attr:`stages`)."""


class _Ticket:
    """A submitted frame until its result is collected."""

    __slots__ = ("slot", "out", "stamp", "stereo", "host", "keep", "frame")

    def __init__(self, slot, out, stamp, stereo, host, keep):
        self.slot, self.out, self.stamp, self.stereo, self.host, self.keep = slot, out, stamp, stereo, host, keep
        self.frame = None


class GpuPipeline:
    device = "cuda"

    def __init__(self, camera, config, detector, tracker, capacity: int, levels: int, first_id: int = 0,
                 camera_right=None, T_right_left=None, upload: str = "streamed"):
        import cupy as cp

        S = int(capacity)
        check_capacity(S, detector.n_cells)
        if upload not in UPLOADS:
            raise ValueError(f"upload must be one of {UPLOADS}, got {upload!r}")
        self._cp = cp
        self.camera, self.config, self.detector, self.tracker = camera, config, detector, tracker
        self.upload = upload
        self.k = FrameKernels(camera, config, detector, tracker, S, levels, first_id, camera_right, T_right_left)
        self.W, self.H, self.S, self.stereo_on = self.k.W, self.k.H, S, self.k.stereo_on
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.up_stream = cp.cuda.Stream(non_blocking=True)
        # page-locked host memory: frame staging, frame parameters, result slots
        keep = self._keep = []
        n_img = self.W * self.H
        self._img = [[pinned_buffer(n_img, keep).reshape(self.H, self.W) for _ in range(RING)]
                     for _ in range(2 if self.stereo_on else 1)]
        prm = pinned_buffer(RING * PARAMS_BYTES, keep)
        self._prm_u64 = prm.view(np.uint64).reshape(RING, -1)
        self._prm_f32 = prm.view(np.float32).reshape(RING, -1)
        self._prm_i32 = prm.view(np.int32).reshape(RING, -1)
        self._prm_u8 = prm.reshape(RING, -1)
        self._streamer = StreamedUpload(self.W, self.H, keep)
        self._deferred = None               # (staging, frame): the streamed copy still to make
        self._rl = result_layout(S)
        nb = self._rl.nbytes
        res = pinned_buffer(RESULT_SLOTS * nb, keep)
        self._out = [self._rl.views(res[o * nb:(o + 1) * nb]) for o in range(RESULT_SLOTS)]
        self._out_cols = [tuple(v[n] for n in _RESULT_COLUMNS) for v in self._out]     # per slot, built once
        self._elapsed = cp.cuda.get_elapsed_time
        self._dev = {a.ctypes.data: host_device_pointer(a.ctypes.data)
                     for a in [x for cam in self._img for x in cam] + [prm, res]}
        if not all(self._dev.values()):
            raise CudaUnavailable("page-locked host memory is not mapped into the device's address space")
        self._prm_dev = [self._dev[prm.ctypes.data] + PARAMS_BYTES * s for s in range(RING)]
        self._img_dev = [[self._dev[a.ctypes.data] for a in cam] for cam in self._img]
        self._out_dev = [self._dev[res.ctypes.data] + nb * o for o in range(RESULT_SLOTS)]
        self._checked = checked_launches()
        self._out_offsets = tuple(np.int32(self._rl.offset(n)) for n in _RESULT_COLUMNS)
        self._ev_start = [cp.cuda.Event() for _ in range(RESULT_SLOTS)]
        self._ev_done = [cp.cuda.Event() for _ in range(RESULT_SLOTS)]
        self._ev_up = [cp.cuda.Event(disable_timing=True) for _ in range(RING)]
        self._ev_input = cp.cuda.Event(disable_timing=True)
        self.graphs = GraphCache(self.stream, config.use_graph, name="frontend")
        self.graphs_up = GraphCache(self.up_stream, config.use_graph, name="frontend upload")
        self.graph_launches = 0
        self.tracer: FrameTracer | None = None      # benchmarks (module docstring)
        self._pinned: dict[int, int] = {}   # frames of pinned_frames(): host -> device address
        self._frames = 0
        self._slot_out = [-1] * RING        # result slot of the last frame uploaded into each frame slot
        self._stage_out = [-1] * RING       # result slot of the last frame copied into each staging buffer
        self._pending: dict[int, _Ticket] = {}
        self._counters = np.zeros(len(COUNTERS), np.int64)
        self._next_id = int(first_id)
        self._count = 0
        self._warm_up()

    def _warm_up(self) -> None:
        """Every kernel once on an empty frame, outside graph capture (module loading must not
        happen inside a capture), then the initial table again."""
        cp = self._cp
        cp.cuda.Device().synchronize()
        for cam in range(len(self._img)):
            self._prm_u64[0, _U64_SRC + cam] = self._dev[self._img[cam][0].ctypes.data]
        self._prm_u64[0, _U64_OUT] = self._out_dev[0]
        self._prm_i32[0, _I32_STEREO] = 1 if self.stereo_on else 0
        self.k.enqueue_upload(0, self.stereo_on, self._prm_dev[0], self.stream, True)
        self.k.enqueue_compute(0, self.stereo_on, self.stream, True, self._out_offsets)
        self.stream.synchronize()
        self.k.table.set(self.k.initial)
        cp.cuda.Device().synchronize()

    # ------------------------------------------------------------------ state
    @property
    def next_id(self) -> int:
        if self._pending:                   # frames in flight may have given out ids
            self.stream.synchronize()
            return int(self.k.hdr("next_id").get()[0])
        return self._next_id

    @property
    def num_tracks(self) -> int:
        return self._count

    def counters(self) -> np.ndarray:
        return self._counters

    @property
    def upload_timeouts(self) -> int:
        """Streamed frames whose pyramid stopped waiting for the host's copy (1 s)."""
        return self._streamer.timeouts

    @property
    def graph_error(self) -> str | None:
        return self.graphs.error or self.graphs_up.error

    def reset(self) -> None:
        """Drop every track (ids go on); frames in flight are finished and discarded."""
        self.up_stream.synchronize()
        self.stream.synchronize()
        self._pending.clear()
        with self.stream:
            self.k.hdr("count").fill(0)
        self.stream.synchronize()
        self._count = 0

    def apply_config(self, config) -> None:
        """Take new kernel scalars: the graphs are captured again with them at the next frame."""
        self.up_stream.synchronize()
        self.stream.synchronize()
        self.config = self.k.config = config
        self.detector.config = config.detector
        self.tracker.config = config.tracker
        self.graphs.clear()
        self.graphs_up.clear()

    def pinned_frames(self, count: int) -> list[np.ndarray]:
        """``count`` page-locked frame buffers that :meth:`submit` reads without a host copy."""
        return pinned_frames(count, self.H, self.W, self._keep, self._pinned)

    # ------------------------------------------------------------------ per frame
    def submit(self, image, image_right, stamp_ns: int, R, dt: float, host_stats: dict) -> _Ticket:
        tracer = self.tracer
        if tracer:
            tracer.mark()                   # STEPS[0]: the interface's checks done
        staged = tracer if tracer and tracer.stages else None
        s, o, k = self._frames % RING, self._frames % RESULT_SLOTS, self._frames
        self._frames += 1
        # Nothing in flight (every earlier frame collected, as process() does): the GPU is idle, so
        # upload and compute go as ONE graph on the compute stream (3 CUDA calls on the host instead
        # of 8: there is no earlier frame for the upload to overlap with). Otherwise the upload graph
        # on the upload stream overlaps the compute of the frames before it.
        pending = self._pending
        alone = not pending and staged is None
        if pending:
            old = pending.pop(o, None)
            if old is not None:             # never collected: copy it out before its slot is reused
                old.frame = self._frame(old).copy()
        if not alone:                       # the uploads that last read this slot's parameters and staging are done
            for last in (self._slot_out[s], self._stage_out[s]):
                if last >= 0:
                    self._ev_done[last].synchronize()
        self._slot_out[s] = o
        st = 0 if alone else s              # the staging buffer (module docstring)
        self._stage_out[st] = o
        stereo = image_right is not None and self.stereo_on
        up = self.stream if (staged or alone) else self.up_stream
        if k >= RING - 1 and up is not self.stream:
            # slot s is the previous frame of frame k - (RING - 1): the upload waits for it
            up.wait_event(self._ev_done[(k - RING + 1) % RESULT_SLOTS])
        u = self._prm_u64[s]
        self._deferred = None
        u[_U64_SRC] = self._source(image, 0, s, st, up, stream_ok=alone)
        # process() on a stereo pair of pageable frames: the right frame is copied while the left
        # camera's part of the frame already runs (module docstring)
        split = alone and stereo and self.upload in ("mapped", "streamed") and type(image_right) is np.ndarray \
            and not (self._pinned and image_right.ctypes.data in self._pinned)
        if self._deferred is None:
            StreamedUpload.disarm(self._prm_u8[s])
        else:                               # streamed: the left camera
            self._streamer.arm(self._prm_u8[s])
        if split:
            u[_U64_SRC + 1] = self._img_dev[1][st]
        else:
            u[_U64_SRC + 1] = self._source(image_right, 1, s, st, up) if stereo else 0
        u[_U64_OUT] = self._out_dev[o]
        _set_motion(self._prm_f32[s], R, dt)
        self._prm_i32[s, _I32_STEREO] = 1 if stereo else 0
        tk = _Ticket(s, o, int(stamp_ns), stereo, host_stats, (image, image_right))   # alive until collected
        if tracer:
            tracer.mark()                   # slot, frame source (the host copy), parameters
        self._ev_start[o].record(up)
        if split:
            self._launch_split(s, st, image_right)
        elif alone:
            self._launch(self.graphs, ("frame", s, stereo), up, lambda checked: self._enqueue_frame(s, stereo, checked),
                         self._deferred)
        else:
            self._launch(self.graphs_up, ("up", s, stereo), up, lambda checked: self.k.enqueue_upload(
                s, stereo, self._prm_dev[s], up, checked, tracer=staged))
            if up is not self.stream:
                self._ev_up[s].record(up)
                self.stream.wait_event(self._ev_up[s])
            self._launch(self.graphs, (s, stereo), self.stream, lambda checked: self.k.enqueue_compute(
                s, stereo, self.stream, checked, self._out_offsets, tracer=staged))
        self._ev_done[o].record(self.stream)
        if tracer:
            tracer.mark()                   # events and graph launch
        if self._checked:                   # the graphs' kernels: a fault shows here
            self.stream.synchronize()
        host_stats["graph_launches"] = self.graph_launches
        host_stats["upload_timeouts"] = self._streamer.timeouts
        pending[o] = tk
        return tk

    def _launch_split(self, s, st, image_right) -> None:
        """A stereo frame with nothing in flight, in three graphs: the left camera's pyramid and
        the whole mono part on the compute stream (streamed: the left frame copied after it is
        launched); meanwhile the host copies the right frame into its staging buffer, then the
        right camera's pyramid goes on the upload stream (its PCIe read overlaps the left part's
        kernels); the stereo match and the packing follow both. The right frame is not streamed:
        launching its pyramid first would leave its blocks polling their flags over PCIe through
        both copies, which slows the host's copies."""
        k, main, side = self.k, self.stream, self.up_stream
        self._launch(self.graphs, ("left", s), main, lambda checked: (
            k.enqueue_upload(s, True, self._prm_dev[s], main, checked, cams=(0,)),
            k.enqueue_compute(s, True, main, checked, self._out_offsets, with_stereo=False)), self._deferred)
        np.copyto(self._img[1][st], image_right)    # the right frame's one host copy, the left part running
        self._launch(self.graphs_up, ("right", s), side, lambda checked: k.enqueue_upload(
            s, True, self._prm_dev[s], side, checked, cams=(1,)))
        self._ev_up[s].record(side)
        main.wait_event(self._ev_up[s])
        self._launch(self.graphs, ("stereo", s), main, lambda checked: k.enqueue_stereo(
            s, main, checked, self._out_offsets))

    def _enqueue_frame(self, s, stereo, checked) -> None:
        """Upload and compute of the frame in slot ``s``, both on the compute stream."""
        self.k.enqueue_upload(s, stereo, self._prm_dev[s], self.stream, checked)
        self.k.enqueue_compute(s, stereo, self.stream, checked, self._out_offsets)

    def _source(self, image, cam, s, st, up, stream_ok: bool = False) -> int:
        """Device-accessible address of one camera's frame for the pyramid kernel of frame slot ``s``
        (see ``upload``); a host copy goes into staging buffer ``st``, or with ``stream_ok`` (the
        left camera, nothing in flight, graphs on) is left in :attr:`_deferred` for after the launch."""
        if not isinstance(image, np.ndarray):       # a CuPy array: read on the device, after the caller's work
            self._ev_input.record(self._cp.cuda.get_current_stream())
            up.wait_event(self._ev_input)
            return int(image.data.ptr)
        staging = self._img[cam][st]
        d = 0
        if self._pinned:                            # frames of pinned_frames() are read in place
            d = self._pinned.get(image.ctypes.data, 0) if image.flags.c_contiguous else 0
        upload = self.upload
        if upload in ("mapped", "streamed"):
            if d:
                return d
            if upload == "streamed" and stream_ok and cam == 0 and self.graphs.enabled and self.graphs.error is None:
                self._deferred = (staging, image)   # copied by _launch, after the launch
            else:
                np.copyto(staging, image)           # the one host copy, into the page-locked slot
            return self._img_dev[cam][st]
        level0 = (self.k.pyrs_r[s] if cam else self.k.pyrs[s]).levels[0].data.ptr
        host = image.ctypes.data
        if not d and (upload == "copy" or not image.flags.c_contiguous):
            np.copyto(staging, image)               # the one host copy, into the page-locked slot
            host = staging.ctypes.data
        self._cp.cuda.runtime.memcpyAsync(level0, host, self.W * self.H, self._cp.cuda.runtime.memcpyHostToDevice,
                                          up.ptr)
        return level0

    def _launch(self, cache, key, stream, enqueue, deferred=None) -> None:
        """The graph for ``key`` (captured from ``enqueue`` the first time), else the kernels.
        ``deferred``: (staging, frame) of a streamed upload, copied after the graph's launch (before
        the kernels when they are launched one by one: a checked launch waits for its kernel)."""
        tracer = self.tracer
        g = None if tracer and tracer.stages else cache.get(key, lambda: enqueue(False))
        if g is None:
            if deferred is not None:
                self._fill(deferred)
            enqueue(True)
            return
        try:
            g.launch(stream)
            self.graph_launches += 1
        finally:
            if deferred is not None:
                self._fill(deferred)

    def _fill(self, deferred) -> None:
        """The streamed upload's host copy of (staging, frame), timed for a tracer."""
        tracer = self.tracer
        t0 = _ns() if tracer else 0
        self._streamer.fill(*deferred)
        if tracer:
            tracer.copied(_ns() - t0)

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
        o = tk.out
        ev_done = self._ev_done[o]
        tracer = self.tracer
        if tracer:
            tracer.mark()                   # submit's return, result() up to the wait
        ev_done.synchronize()
        if tracer:
            tracer.mark()                   # the wait for the GPU
        hdr, cnt, ids, uv, xy, vel, score, level, age, uv_r, xy_r = self._out_cols[o]
        n = int(hdr[_H_COUNT])
        if self._streamer.take_timeouts():
            tk.host["upload_timeouts"] = self._streamer.timeouts
        self._counters[:] = cnt
        self._next_id = int(hdr[_H_NEXT_ID])
        self._count = n
        tk.keep = None
        fr = TrackFrame(tk.stamp, ids[:n], uv[:n], xy[:n], vel[:n], score[:n], level[:n], age[:n],
                        uv_r[:n] if tk.stereo else None, xy_r[:n] if tk.stereo else None,
                        {"gpu_s": self._elapsed(self._ev_start[o], ev_done) * 1e-3},
                        FrameStats(COUNTER_INDEX, cnt, tk.host))
        if tracer:
            tracer.mark()                   # the TrackFrame (views of the result slot)
        return fr
