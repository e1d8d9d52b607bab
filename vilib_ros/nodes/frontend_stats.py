"""The frontend node's counters: skips, events, rates, per-frame times, diagnostics values.

No rclpy here: the node hands it what happened; it builds the ``diagnostics`` key/values and
the JSON summary. Memory is bounded (see :class:`vilib_ros.nodes._common.Stat`).
"""
from __future__ import annotations

import collections
import time

import numpy as np

from vilib_ros.nodes._common import RateMeter, Stat
from vilib_ros.nodes.input_guard import SkipLog

#: Input skipped (each a message or a frame that produced no tracks, or a lost IMU sample).
SKIP_REASONS = ("unsupported_encoding", "zero_size", "step_mismatch", "data_size", "size_mismatch",
                "decode_error", "malformed", "no_calibration", "out_of_order", "frontend_error",
                "frame_gap", "imu_non_finite", "imu_out_of_order", "imu_out_of_range", "stereo_unmatched",
                "unusable_calibration")
#: Things that happened and are worth knowing, but lost no input.
EVENTS = ("time_resets", "imu_time_resets", "imu_gaps", "imu_gap_samples", "imu_incomplete",
          "empty_frame_id", "config_applied_live", "tracker_rebuilt", "tracker_rebuild_failed", "debug_images")


#: The per-frame trace: the image's stamp (ns), then CLOCK_MONOTONIC seconds: the middleware
#: received the image (its ``received_timestamp``; NaN where the RMW gives none), the node's
#: node's previous callback (of any kind) ended, this image's callback began, the IMU was there, ``process()`` returned, the tracks were published.
TRACE_FIELDS = ("stamp_ns", "dds_received", "previous_callback_end", "callback", "imu_ready", "processed", "published")
TRACE_KEEP = 4096


class FrontendStats:
    def __init__(self, warn):
        self.skips = SkipLog(SKIP_REASONS, warn)
        self.events = collections.Counter({e: 0 for e in EVENTS})
        self.rx = RateMeter()
        self.tx = RateMeter()
        self.imu_rx = RateMeter()
        self.latency = Stat()      # receive (the later image of a stereo pair) -> tracks published, ms
        self.process = Stat()      # FeatureTracker.process(), ms
        self.overhead = Stat()     # latency - process: what the node adds, ms
        # where the overhead goes: message -> image, IMU drain + wait, encode + publish (ms); and
        # the callbacks that hold the executor between images: IMU bursts, the diagnostics timer
        # process() split: submit (host work before the device runs) and result (the wait, the frame)
        self.node_stage: dict[str, Stat] = {k: Stat() for k in ("convert", "imu", "publish", "imu_callback",
                                                                 "diagnostics", "submit", "result")}
        self.stage: dict[str, Stat] = collections.defaultdict(Stat)
        self.last_features = 0
        self.last_stats: dict = {}
        # CPU time per frame counts from the first frame published: start-up (imports, kernel
        # compilation, graph capture, JIT) is not spread over the frames
        self._cpu0: float | None = None
        # per frame (the last TRACE_KEEP): stamp and the monotonic times along its way, so that a
        # latency tail can be put on transport, executor or node (see TRACE_FIELDS)
        self.trace = np.zeros((TRACE_KEEP, len(TRACE_FIELDS)), np.float64)
        self.trace_stamp = np.zeros(TRACE_KEEP, np.int64)     # float64 would round ns stamps
        self._n_trace = 0

    def frame_done(self, t_recv: float, t0: float, t1: float, t2: float, frame, t_dds: float = float("nan"),
                   t_prev_end: float = float("nan")) -> None:
        if self._cpu0 is None:
            self._cpu0 = time.process_time()
        k = self._n_trace % TRACE_KEEP
        self.trace[k] = (0.0, t_dds, t_prev_end, t_recv, t0, t1, t2)
        self.trace_stamp[k] = frame.stamp_ns
        self._n_trace += 1
        self.tx.tick()
        self.process.add((t1 - t0) * 1e3)
        self.latency.add((t2 - t_recv) * 1e3)
        self.overhead.add(((t2 - t_recv) - (t1 - t0)) * 1e3)
        for k, v in frame.timings.items():
            self.stage[k[:-2] if k.endswith("_s") else k].add(float(v) * 1e3)
        self.last_features = len(frame)
        self.last_stats = frame.stats

    def diagnostics_values(self, device: str) -> dict:
        lat, proc, ovh = self.latency.window(), self.process.window(), self.overhead.window()
        d = {
            "device": device,
            "images_received": self.rx.count,
            "tracks_published": self.tx.count,
            "imu_received": self.imu_rx.count,
            "input_rate_hz": self.rx.rate(),
            "output_rate_hz": self.tx.rate(),
            "imu_rate_hz": self.imu_rx.rate(),
            "latency_ms_mean": float(np.mean(lat)) if lat else 0.0,
            "latency_ms_max": float(np.max(lat)) if lat else 0.0,
            "process_ms_mean": float(np.mean(proc)) if proc else 0.0,
            "overhead_ms_mean": float(np.mean(ovh)) if ovh else 0.0,
            "features": self.last_features,
        }
        d.update({f"skipped.{k}": v for k, v in sorted(self.skips.counts.items())})
        d.update({f"events.{k}": v for k, v in sorted(self.events.items())})
        for k, st in sorted(self.stage.items()):
            w = st.window()
            d[f"time_ms.{k}"] = float(np.mean(w)) if w else 0.0
        d.update({f"frontend.{k}": v for k, v in sorted(dict(self.last_stats).items())})
        return d

    def trace_rows(self) -> dict:
        """The per-frame trace in frame order, as ``{field: list}`` (stamps as int)."""
        n = min(self._n_trace, TRACE_KEEP)
        shift = -(self._n_trace % TRACE_KEEP)
        rows = np.roll(self.trace, shift, axis=0)[TRACE_KEEP - n:]
        out = {f: [None if not np.isfinite(v) else float(v) for v in rows[:, i]] for i, f in enumerate(TRACE_FIELDS)}
        out["stamp_ns"] = [int(v) for v in np.roll(self.trace_stamp, shift)[TRACE_KEEP - n:]]
        return out

    def summary(self, name: str, device: str) -> dict:
        frames = max(1, self.tx.count - 1)
        cpu = 0.0 if self._cpu0 is None else time.process_time() - self._cpu0
        return {
            "node": name, "device": device,
            "images_received": self.rx.count, "tracks_published": self.tx.count, "imu_received": self.imu_rx.count,
            "skipped": dict(self.skips.counts), "events": dict(self.events),
            "latency_ms": self.latency.summary(), "process_ms": self.process.summary(),
            "overhead_ms": self.overhead.summary(),
            "cpu_s": cpu, "cpu_ms_per_frame": cpu * 1e3 / frames,
            "stages_ms": {k: v.summary() for k, v in self.stage.items()},
            "node_stages_ms": {k: v.summary() for k, v in self.node_stage.items()},
            "frames": self.trace_rows(),
            "frontend_stats": dict(self.last_stats),
        }
