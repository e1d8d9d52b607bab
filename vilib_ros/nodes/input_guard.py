"""What the nodes do with input they cannot trust: counted skips, bounded warnings, IMU checks.

* :class:`SkipLog` - counts skipped input per reason (a fixed set, declared up front) and
  warns once per (topic, reason), or once per (topic, reason, detail) for up to
  ``max_keys`` details; echoed text is truncated. Hostile input (thousands of distinct
  encodings of 100 KB each) therefore grows neither the log nor the memory.
* :class:`TimeJump` - classifies a stamp against the previous one of its stream: in order,
  a small step back (``out_of_order``: skip it), or a time reset (a jump back, or forward
  beyond ``threshold_ns``: a looped bag, a restarted driver, a clock jump).
* :class:`ImuQueue` - the nodes' IMU ring (no allocation per sample): rejects
  non-finite samples, samples beyond the sensor's range and stamps going backwards,
  counts gaps in the stamps (longer than ``gap_factor`` median periods) and time resets,
  and returns the samples between two stamps as arrays.

No rclpy here.
"""
from __future__ import annotations

import math
import threading
from typing import Callable

import numpy as np

from vilib_ros.nodes.cdr import decode_imu_batch

_MAX_ECHO = 120


def truncate(text, limit: int = _MAX_ECHO) -> str:
    """``text`` as str, at most ``limit`` characters (``...`` and the dropped length appended)."""
    s = str(text)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s) - limit} more characters)"


class SkipLog:
    """Counters of skipped input per reason and once-only warnings (bounded)."""

    def __init__(self, reasons, warn: Callable[[str], None], max_keys: int = 32):
        self.counts: dict[str, int] = {r: 0 for r in reasons}
        self._warn = warn
        self._warned: set = set()
        self._max_keys = int(max_keys)
        self._suppressed = False

    def count(self, reason: str, n: int = 1) -> None:
        if reason not in self.counts:
            raise KeyError(f"undeclared skip reason {reason!r}")
        self.counts[reason] += n

    def skip(self, reason: str, topic: str, detail: str, key_detail: str | None = None) -> None:
        """Count one ``reason`` and warn once per (topic, reason[, key_detail])."""
        self.count(reason)
        key = (topic, reason) if key_detail is None else (topic, reason, truncate(key_detail, 64))
        if key in self._warned:
            return
        if len(self._warned) >= self._max_keys:
            if not self._suppressed:
                self._suppressed = True
                self._warn(f"more than {self._max_keys} kinds of bad input: further warnings suppressed "
                           "(every skip is still counted in diagnostics)")
            return
        self._warned.add(key)
        self._warn(f"{topic}: {truncate(detail, 400)} -- skipped (counted as '{reason}' in diagnostics; "
                   "warned once)")

    def total(self, exclude=()) -> int:
        return sum(v for k, v in self.counts.items() if k not in exclude)


IN_ORDER, OUT_OF_ORDER, RESET = "in_order", "out_of_order", "reset"


class TimeJump:
    """Classify each stamp of one stream against the previous accepted one.

    A stamp after the previous one (by at most ``threshold_ns``) is in order; one before it
    by at most ``threshold_ns`` (or equal) is out of order (skip it); a jump back or forward
    by more than ``threshold_ns`` is a time reset (start again from this stamp).
    """

    def __init__(self, threshold_ns: int):
        self.threshold_ns = int(threshold_ns)
        self.last: int | None = None

    def check(self, t: int) -> str:
        if self.last is None:
            return IN_ORDER
        d = int(t) - self.last
        if d > self.threshold_ns or d < -self.threshold_ns:
            return RESET
        return IN_ORDER if d > 0 else OUT_OF_ORDER

    def accept(self, t: int) -> None:
        self.last = int(t)

    def clear(self) -> None:
        self.last = None


def imu_reached(stamp_ns: int, first_t: int | None, last_t: int | None, threshold_ns: int) -> bool:
    """Whether IMU samples from ``first_t`` to ``last_t`` (the ring) reach a frame at ``stamp_ns``
    on the frame's own time line: the newest sample is at or after the frame, and the ring holds
    the frame's time (or the newest sample is less than a time jump ahead of it). A ring still
    on an earlier time line (a replay restarted, its IMU not yet) does not reach the frame.

    ``stamp <= last < stamp + threshold`` alone would not do: a backend more than the jump
    threshold behind its IMU (a replay far ahead) would wait out ``imu_wait_s`` on every frame."""
    if last_t is None or last_t < stamp_ns:
        return False
    return last_t < stamp_ns + threshold_ns or (first_t is not None and first_t <= stamp_ns)


class ImuQueue:
    """Thread-safe ring of IMU samples (t_ns, gyro xyz, acc xyz) with input checks.

    ``add`` returns the reason a sample was rejected ('' when accepted):
    ``imu_non_finite``, ``imu_out_of_range`` (``|gyro| > gyro_range`` rad/s or
    ``|acc| > accel_range`` m/s^2 in any axis), ``imu_out_of_order``. A time reset (a jump
    beyond ``jump_threshold_ns``) empties the ring and is counted in ``resets``; gaps longer
    than ``gap_factor`` x the median sample period are counted in ``gaps`` (and
    ``gap_samples``: the samples missing in them); a jump forward beyond the threshold counts
    in both.
    """

    def __init__(self, capacity: int = 8192, gyro_range: float = 35.0, accel_range: float = 160.0,
                 jump_threshold_ns: int = 1_000_000_000, gap_factor: float = 2.5, keep_ns: int = 1_000_000_000):
        self.cap = int(capacity)
        self.keep_ns = int(keep_ns)
        self._t = np.zeros(self.cap, np.int64)
        self._g = np.zeros((self.cap, 6), np.float64)      # gyro xyz, acc xyz
        self._n = 0            # samples stored (<= cap), newest at index _n - 1 after _compact
        self.gyro_range = float(gyro_range)
        self.accel_range = float(accel_range)
        self.jump = TimeJump(jump_threshold_ns)
        self.gap_factor = float(gap_factor)
        self._periods = np.zeros(32, np.int64)
        self._np = 0
        self._period: int | None = None
        self.resets = 0
        self.gaps = 0
        self.gap_samples = 0
        self.lock = threading.Lock()

    @property
    def last_t(self) -> int | None:
        return self.jump.last

    @property
    def first_t(self) -> int | None:
        """The oldest sample held (None when empty)."""
        with self.lock:
            return int(self._t[0]) if self._n else None

    def reached(self, stamp_ns: int) -> bool:
        """The IMU has reached ``stamp_ns`` on that stamp's time line: see :func:`imu_reached`."""
        return imu_reached(stamp_ns, self.first_t, self.last_t, self.jump.threshold_ns)

    def add(self, t: int, gyro, acc) -> str:
        g = (float(gyro[0]), float(gyro[1]), float(gyro[2]))
        a = (float(acc[0]), float(acc[1]), float(acc[2]))
        vals = g + a
        if not (math.isfinite(vals[0]) and math.isfinite(vals[1]) and math.isfinite(vals[2])
                and math.isfinite(vals[3]) and math.isfinite(vals[4]) and math.isfinite(vals[5])):
            return "imu_non_finite"
        gr, ar = self.gyro_range, self.accel_range
        if not (-gr <= g[0] <= gr and -gr <= g[1] <= gr and -gr <= g[2] <= gr
                and -ar <= a[0] <= ar and -ar <= a[1] <= ar and -ar <= a[2] <= ar):
            return "imu_out_of_range"
        t = int(t)
        with self.lock:
            kind = self.jump.check(t)
            if kind == OUT_OF_ORDER:
                return "imu_out_of_order"
            if kind == RESET:
                if t > self.jump.last and self._period:      # forward: a hole in the stream as well
                    self.gaps += 1
                    self.gap_samples += max(1, int(round((t - self.jump.last) / self._period)) - 1)
                self.resets += 1
                self._n = 0
                self._np = 0
                self._period = None
            elif self.jump.last is not None:
                self._gap_check(t - self.jump.last)
            self.jump.accept(t)
            if self._n == self.cap:       # full: keep the newer half
                h = self.cap // 2
                self._t[:h] = self._t[self.cap - h:]
                self._g[:h] = self._g[self.cap - h:]
                self._n = h
            self._t[self._n] = t
            self._g[self._n] = vals
            self._n += 1
        return ""

    def add_serialized(self, msgs) -> list | None:
        """Serialized ``sensor_msgs/Imu`` messages of a burst (two or more) decoded with one call
        (:func:`vilib_ros.nodes.cdr.decode_imu_batch`) and added with :meth:`add_batch`: the stamps
        added, or None where that declines (one message, sizes differ, or a sample :meth:`add` would
        reject or reset on), nothing added: then the caller decodes and adds them one by one, which
        says what is wrong with which."""
        if len(msgs) < 2:
            return None
        got = decode_imu_batch(msgs)
        if got is None or not self.add_batch(*got):
            return None
        return got[0]

    def add_batch(self, t, rows) -> bool:
        """Add K samples (``t``: K stamps in ns, ``rows``: K rows of gyro xyz, acc xyz) at once, as K
        calls of :meth:`add` would, where every one of them would be accepted without a time reset:
        finite, in range, stamps increasing, no jump beyond the threshold, room in the ring. Returns
        False and changes nothing otherwise: the caller adds them one by one, which rejects, counts
        and resets sample by sample. Gaps are counted as :meth:`add` counts them. Plain Python over
        the burst and two array writes (NumPy's cost per call is what a burst of 10 is made of)."""
        k = len(t)
        if k == 0:
            return True
        gr, ar = self.gyro_range, self.accel_range
        for r in rows:      # NaN fails every comparison: rejected with the out-of-range ones
            if not (-gr <= r[0] <= gr and -gr <= r[1] <= gr and -gr <= r[2] <= gr
                    and -ar <= r[3] <= ar and -ar <= r[4] <= ar and -ar <= r[5] <= ar):
                return False
        ts = [int(x) for x in t]
        thr = self.jump.threshold_ns
        with self.lock:
            last = self.jump.last
            prev = ts[0] if last is None else last
            for ti in ts[0 if last is not None else 1:]:
                if not 0 < ti - prev <= thr:
                    return False
                prev = ti
            if self._n + k > self.cap:
                return False
            prev = last
            for ti in ts:
                if prev is not None:
                    self._gap_check(ti - prev)
                prev = ti
            self.jump.accept(ts[-1])
            self._t[self._n:self._n + k] = ts
            self._g[self._n:self._n + k] = rows
            self._n += k
        return True

    def _gap_check(self, dt: int) -> None:
        if self._np >= 8:
            if self._np % 16 == 8 or self._period is None:     # the median, refreshed every 16 samples
                self._period = int(np.median(self._periods[: min(self._np, self._periods.size)]))
            period = self._period
            if period > 0 and dt > self.gap_factor * period:
                self.gaps += 1
                self.gap_samples += max(1, int(round(dt / period)) - 1)
                return
        self._periods[self._np % self._periods.size] = dt
        self._np += 1

    def clear(self) -> None:
        with self.lock:
            self._n = 0
            self._np = 0
            self._period = None
            self.jump.clear()

    def between(self, t0: int, t1: int):
        """(t (K,), samples (K, 6): gyro xyz, acc xyz) with t0 < t <= t1 (copies); samples older
        than ``t1 - keep_ns`` are dropped afterwards."""
        with self.lock:
            t = self._t[: self._n]
            i0, i1 = np.searchsorted(t, t0, "right"), np.searchsorted(t, t1, "right")
            out = (t[i0:i1].copy(), self._g[i0:i1].copy())
            drop = int(np.searchsorted(t, t1 - self.keep_ns, "left"))
            if drop > self.cap // 2:
                keep = self._n - drop
                self._t[:keep] = self._t[drop: self._n]
                self._g[:keep] = self._g[drop: self._n]
                self._n = keep
        return out

    def gyro_between(self, t0: int, t1: int) -> np.ndarray | None:
        """(K, 4) rows (t_ns, wx, wy, wz) with t0 <= t <= t1 (a copy), or None."""
        t, s = self.between(t0 - 1, t1)
        if not t.size:
            return None
        out = np.empty((t.size, 4))
        out[:, 0], out[:, 1:] = t, s[:, :3]
        return out
