"""Pieces every node shares: the main() wrapper, QoS profiles, diagnostics helpers, taking messages
outside the executor (take_pending, SubscriptionWaiter, received_monotonic)."""
from __future__ import annotations

import contextlib
import faulthandler
import gc
import logging
import os
import signal
import sys
import threading
import time
import traceback

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)

from vilib_ros._cuda import CudaUnavailable
from vilib_ros.interrupts import install_stop_handlers, raise_if_stop_requested, settle_stop

log = logging.getLogger("vilib_ros.nodes")


def sensor_qos(depth: int = 10) -> QoSProfile:
    """Best-effort, keep-last ``depth`` (sensor data QoS with a chosen queue length)."""
    q = QoSProfile(depth=depth)
    q.reliability = qos_profile_sensor_data.reliability
    q.durability = qos_profile_sensor_data.durability
    q.history = HistoryPolicy.KEEP_LAST
    return q


def reliable_qos(depth: int = 10) -> QoSProfile:
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE, history=HistoryPolicy.KEEP_LAST)


def latched_qos() -> QoSProfile:
    """Reliable + transient local, depth 1: late subscribers still get the last message."""
    return QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL, history=HistoryPolicy.KEEP_LAST)


class _StartError(Exception):
    """The node could not be built from its configuration (already reported); ``rc``: exit status."""

    def __init__(self, rc: int):
        super().__init__(rc)
        self.rc = rc


def run_node(factory, args=None) -> int:
    """Initialise rclpy, build the node, spin it (or call its ``run()``), shut down cleanly.

    Ctrl-C (SIGINT) and SIGTERM end the node in every phase, start-up included: both raise
    ``KeyboardInterrupt`` in the main thread (SIGTERM as :class:`Terminated`), chained behind
    rclpy's own handlers, which wake the executor. A stop whose exception Python swallowed (its
    handler ran inside a garbage-collector callback, a ``__del__`` or a weakref callback) is
    re-delivered, and one a library caught ends the node at the next phase boundary: after the
    node is built (its warm-up included) and before the spin (:mod:`vilib_ros.interrupts`). The
    node's ``close()`` (file writing, summaries) runs in every case, then the node is destroyed and
    the context shut down. Returns the process exit code: a ``ValueError``, ``OSError`` or
    ``CudaUnavailable`` while the node is built (a parameter, calibration or device it cannot start
    with) is printed as one line, ``<node>: cannot start: <reason>``, and the code is 2 (another
    exception: its traceback, 1). After the node is built the garbage collector's start-up objects
    are frozen (``gc.freeze``; ``VILIB_ROS_GC_FREEZE=0`` leaves them: for comparison).
    """
    # Both handlers before rclpy.init: rclpy's chain to them. SIGTERM: rclpy's own handler only wakes
    # executors that exist and chains to the previous handler, so that a SIGTERM before the first
    # spin (the kernel's parent-death signal while the node is built) would otherwise be lost and the
    # node spin on as an orphan. SIGINT: Python raises KeyboardInterrupt only where SIGINT was not
    # ignored at start-up, and a shell starts background jobs with it ignored; rclpy's handler alone
    # would shut the context down while the node went on being built.
    if threading.current_thread() is threading.main_thread():
        install_stop_handlers((signal.SIGINT, signal.SIGTERM))
    rclpy.init(args=args)
    node = None
    rc = 0
    try:
        try:
            node = factory()
        except (ValueError, OSError, CudaUnavailable) as exc:
            raise_if_stop_requested()   # a stop swallowed earlier: the failure is its consequence
            # a user's configuration (parameters, calibration files, device:=cuda where CUDA cannot
            # run) the node cannot start with: its message, not a traceback (VILIB_ROS_TRACEBACK=1
            # prints that too)
            if os.environ.get("VILIB_ROS_TRACEBACK", "0") != "0":
                traceback.print_exc()
            name = getattr(factory, "__name__", "node")
            print(f"{name}: cannot start: {exc}", file=sys.stderr)
            return_code = 2
            raise _StartError(return_code) from exc
        raise_if_stop_requested()       # a stop swallowed while the node was built or warmed up
        # everything built so far (modules, the node, its buffers) lives as long as the process:
        # out of the collector's reach, so that a full collection on the hot path scans only what
        # came after (it scanned the ~30-100k start-up objects: tens of ms, the latency tail)
        if os.environ.get("VILIB_ROS_GC_FREEZE", "1") != "0":     # 0: the comparison without it
            gc.collect()
            gc.freeze()
        raise_if_stop_requested()       # (the collection ran finalisers)
        if hasattr(node, "run"):
            rc = int(node.run() or 0)
        else:
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        settle_stop()
    except _StartError as exc:
        rc = exc.rc
    except Exception:  # noqa: BLE001 - report and exit non-zero, never hang
        settle_stop()
        if not rclpy.ok():
            # a stop (SIGINT / SIGTERM: rclpy's handler shuts the context down) that left another
            # exception than KeyboardInterrupt: a callback racing the shutdown (a publish after the
            # context was invalidated), or, while the node was being built, a publisher created on the
            # dead context or numba's compilation cut short. The node is stopping, not failing.
            # Regression: Ctrl-C during a CPU frontend's first start (numba compiling) was a traceback, exit 1.
            when = "while a callback was running" if node is not None else "while starting"
            print(f"stopped {when}: " + traceback.format_exc().splitlines()[-1], file=sys.stderr)
        else:
            traceback.print_exc()
            rc = 1
    finally:
        # rclpy's handler shuts the context down and then chains to Python's, whose
        # KeyboardInterrupt may surface only now: ignore further SIGINTs and retry close().
        # SIGTERM while closing (a supervisor's second, stronger request) ends the process at once,
        # and a watchdog ends it when closing takes longer than CLOSE_LIMIT_S (regression: a
        # recorder_node whose parent died got its one SIGTERM, blocked while closing, and then
        # ignored every further SIGTERM: an orphan that only SIGKILL ended).
        settle_stop()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _exit_while_closing)
        watchdog = threading.Timer(close_limit_s(), _exit_while_closing, args=(None, None))
        watchdog.daemon = True
        watchdog.start()
        _backstop(close_limit_s())
        if node is not None:
            for _attempt in range(3):
                try:
                    if hasattr(node, "close"):
                        node.close()
                    break
                except KeyboardInterrupt:
                    continue
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                    rc = rc or 1
                    break
        watchdog.cancel()
        # The node's work is done (files written). Tearing down its DDS entities has its own, short
        # limit: regression: a recorder_node whose parent had died (both nodes of the pair stopping
        # at once) closed, then spun in destroy_node (rclpy's node handle destruction, inside Fast
        # DDS) for as long as the 120 s close limit let it (2 in 383 parent kills at random moments).
        teardown = threading.Timer(teardown_limit_s(), _exit_after_teardown_limit, args=(rc,))
        teardown.daemon = True
        teardown.start()
        _backstop(teardown_limit_s())
        if node is not None:
            try:
                node.destroy_node()
            except BaseException:  # noqa: BLE001
                pass
        try:
            rclpy.try_shutdown()
        except BaseException:  # noqa: BLE001
            pass
        teardown.cancel()
        with contextlib.suppress(Exception):
            faulthandler.cancel_dump_traceback_later()
    return rc


def _backstop(limit_s: float) -> None:
    """A watchdog that needs no GIL, a few seconds behind the Python timer of the same phase: a
    call that spins in C++ holding the GIL starves that timer's thread, never this one. At its
    end it writes every thread's traceback to stderr (where it hung) and exits with status 1."""
    with contextlib.suppress(Exception):   # stderr without a file descriptor: the timer alone
        faulthandler.dump_traceback_later(limit_s + BACKSTOP_MARGIN_S, exit=True, file=sys.stderr)


#: seconds a node may take to close (files, summaries) before it exits anyway
CLOSE_LIMIT_S = 120.0


def _limit_s(var: str, default: float) -> float:
    """Seconds from the environment variable ``var`` where it is a number > 0, else ``default``."""
    try:
        v = float(os.environ.get(var, default))
    except ValueError:
        return default
    return v if v > 0 else default


def close_limit_s() -> float:
    """:data:`CLOSE_LIMIT_S`, or ``VILIB_ROS_CLOSE_LIMIT_S`` from the environment (> 0)."""
    return _limit_s("VILIB_ROS_CLOSE_LIMIT_S", CLOSE_LIMIT_S)


#: seconds the GIL-free backstop (:func:`_backstop`) waits beyond a phase's own limit
BACKSTOP_MARGIN_S = 3.0

#: seconds the DDS teardown after close() may take (destroy_node, context shutdown) before the
#: process exits without the rest of it
TEARDOWN_LIMIT_S = 5.0


def teardown_limit_s() -> float:
    """:data:`TEARDOWN_LIMIT_S`, or ``VILIB_ROS_TEARDOWN_LIMIT_S`` from the environment (> 0)."""
    return _limit_s("VILIB_ROS_TEARDOWN_LIMIT_S", TEARDOWN_LIMIT_S)


def _say_and_exit(message: str, status: int) -> None:
    try:   # os.write: no buffered stream that could itself be the thing that blocks
        os.write(2, (message + "\n").encode())
    except OSError:
        pass
    os._exit(status)


def _exit_after_teardown_limit(rc: int) -> None:
    _say_and_exit(f"the DDS teardown took more than {teardown_limit_s():g} s after the node closed "
                  f"(its work is done): exit {rc} without the rest of it", rc)


def _exit_while_closing(signum, frame) -> None:
    why = f"signal {signum}" if signum else f"closing took more than {close_limit_s():.0f} s"
    _say_and_exit(f"stopped while closing ({why}): exit 124", 124)


def take_pending(sub, limit: int = 10000, with_info: bool = False):
    """Yield the messages already waiting in subscription ``sub`` (serialized where it is raw),
    at most ``limit``, without going through the executor: it takes one message per subscription
    per turn, and a turn costs more Python than an IMU sample does. ``with_info``: yield
    (message, message info) (the info's ``received_timestamp``, ...)."""
    try:
        handle = sub.handle
        with handle:            # entered once for the burst, not per message (~1 us each)
            take, msg_type, raw = handle.take_message, sub.msg_type, sub.raw
            for _ in range(limit):
                taken = take(msg_type, raw)
                if taken is None:
                    return
                yield (taken[0], taken[1]) if with_info else taken[0]
    except Exception:  # noqa: BLE001 - internal API changed, or destroyed: the executor still delivers
        return


def received_monotonic(info) -> float | None:
    """The middleware's receive time of a message (its message info's ``received_timestamp``,
    system clock, ns) on the CLOCK_MONOTONIC time line (s), or None where the RMW gives none."""
    try:
        rx_ns = int(info["received_timestamp"])
    except (TypeError, KeyError, ValueError):
        return None
    if rx_ns <= 0:
        return None
    return rx_ns * 1e-9 - system_minus_monotonic()


_CLOCK_OFFSET = [-1.0, 0.0]       # [monotonic time it was measured, system - monotonic]


def system_minus_monotonic(max_age_s: float = 0.25) -> float:
    """CLOCK_REALTIME minus CLOCK_MONOTONIC (s), measured at most ``max_age_s`` ago: the tightest of
    8 readings of the system clock bracketed by two monotonic ones. Read as ``time.time() -
    time.monotonic()`` in one go, a preemption between the two calls on a loaded machine shifted the
    result by that long (a middleware receive time then came out after the callback that took the
    message)."""
    now = time.monotonic()
    if now - _CLOCK_OFFSET[0] <= max_age_s:
        return _CLOCK_OFFSET[1]
    best, offset = float("inf"), 0.0
    for _ in range(8):
        m0 = time.monotonic()
        s = time.time()
        m1 = time.monotonic()
        if m1 - m0 < best:
            best, offset = m1 - m0, s - 0.5 * (m0 + m1)
    _CLOCK_OFFSET[0], _CLOCK_OFFSET[1] = now, offset
    return offset


class SubscriptionWaiter:
    """Block until one of ``subs`` has a message waiting, outside the executor: one rcl wait set
    over those subscriptions alone, built once (an executor turn builds a wait set of every
    entity of the node in Python: 0.1-0.3 ms, the cost per frame at 1,000 frames/s). A node's
    callback uses it to take the next message of a stream itself (with :func:`take_pending`)
    while the stream flows, and returns to the executor when it pauses.

    ``wait(timeout_s)`` returns True when a message is waiting (or, where rclpy's internal wait set
    is not available, after sleeping ``min(timeout_s, fallback_sleep_s)``: the caller looks), False
    on timeout."""

    def __init__(self, node, subs, fallback_sleep_s: float = 0.0005):
        self.subs = list(subs)
        self.context = node.context
        self.fallback_sleep_s = float(fallback_sleep_s)
        self._ws = None
        try:
            from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

            with self.context.handle:
                self._ws = _rclpy.WaitSet(len(self.subs), 0, 0, 0, 0, 0, self.context.handle)
        except Exception as exc:  # noqa: BLE001 - internal API changed: sleep and look instead
            log.debug("no rcl wait set (%r): waiting by polling", exc)

    @property
    def native(self) -> bool:
        """Whether it waits on an rcl wait set (else by sleeping)."""
        return self._ws is not None

    def wait(self, timeout_s: float) -> bool:
        if timeout_s <= 0:
            return False
        ws = self._ws
        if ws is not None:
            try:
                with contextlib.ExitStack() as stack:
                    for sub in self.subs:
                        stack.enter_context(sub.handle)
                    stack.enter_context(self.context.handle)
                    ws.clear_entities()
                    for sub in self.subs:
                        ws.add_subscription(sub.handle)
                    ws.wait(int(timeout_s * 1e9))
                    return bool(ws.get_ready_entities("subscription"))
            except Exception as exc:  # noqa: BLE001 - a destroyed subscription, shutdown, API change
                log.debug("rcl wait set failed (%r): waiting by polling from now on", exc)
                self._ws = None
        time.sleep(min(timeout_s, self.fallback_sleep_s))
        return True


class GcPauses:
    """Garbage-collector pauses of this process per generation, since construction or ``reset()``:
    how many collections (``gc.get_stats``); with ``VILIB_ROS_GC_PAUSES=1`` in the environment also
    their total and longest duration in ms, measured by a ``gc.callbacks`` hook.

    The hook is a diagnostic, off by default: it is Python code that runs inside every collection,
    and a signal's handler that runs there has its ``KeyboardInterrupt`` swallowed by Python (the
    stop is then re-delivered, see :mod:`vilib_ros.interrupts`, at the price of a delay). ``close()``
    removes the hook."""

    ENV = "VILIB_ROS_GC_PAUSES"

    def __init__(self, timed: bool | None = None):
        self.timed = os.environ.get(self.ENV, "0") not in ("", "0") if timed is None else bool(timed)
        self._t0 = 0.0
        self.reset()
        if self.timed:
            gc.callbacks.append(self._cb)

    def reset(self) -> None:
        """Forget the pauses so far (a node calls it at its first frame: start-up is not counted)."""
        self._base = [int(g.get("collections", 0)) for g in gc.get_stats()]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = info.get("generation", 0)
        if 0 <= g <= 2:
            ms = (time.perf_counter() - self._t0) * 1e3
            self.total_ms[g] += ms
            if ms > self.max_ms[g]:
                self.max_ms[g] = ms

    def summary(self) -> dict:
        """``{"timed": bool, "gen0": {"count": n[, "total_ms": ..., "max_ms": ...]}, ...}``."""
        now = [int(g.get("collections", 0)) for g in gc.get_stats()]
        out: dict = {"timed": self.timed}
        for g in range(3):
            d = {"count": now[g] - self._base[g]}
            if self.timed:
                d.update(total_ms=round(self.total_ms[g], 3), max_ms=round(self.max_ms[g], 3))
            out[f"gen{g}"] = d
        return out

    def close(self) -> None:
        if self._cb in gc.callbacks:
            gc.callbacks.remove(self._cb)


class RateMeter:
    """Counts events; ``rate()`` is the event rate since the previous call to ``rate()``."""

    def __init__(self):
        self.count = 0
        self._last_count = 0
        self._last_t = time.monotonic()

    def tick(self, n: int = 1) -> None:
        self.count += n

    def rate(self) -> float:
        now = time.monotonic()
        dt = now - self._last_t
        r = (self.count - self._last_count) / dt if dt > 0 else 0.0
        self._last_t, self._last_count = now, self.count
        return r


class Stat:
    """Running count / mean / max / last of a value, plus the last ``keep`` samples (for
    percentiles) and the samples since the last ``window()``; memory is bounded."""

    def __init__(self, keep: int = 4096):
        import collections

        self.n = 0
        self.total = 0.0
        self.max = 0.0
        self.last = 0.0
        self.samples: collections.deque = collections.deque(maxlen=keep)
        self._window: collections.deque = collections.deque(maxlen=keep)

    def add(self, v: float) -> None:
        v = float(v)
        self.n += 1
        self.total += v
        self.max = max(self.max, v)
        self.last = v
        self.samples.append(v)
        self._window.append(v)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def window(self) -> list[float]:
        w = list(self._window)
        self._window.clear()
        return w

    def summary(self) -> dict:
        """n, mean and max over every sample; median / p95 / p99 over the last ``keep``."""
        import numpy as np

        if not self.n:
            return {"n": 0}
        a = np.asarray(self.samples)
        return {"n": int(self.n), "mean": float(self.mean), "median": float(np.median(a)),
                "p95": float(np.percentile(a, 95)), "p99": float(np.percentile(a, 99)), "max": float(self.max)}


def key_values(d: dict) -> list:
    from diagnostic_msgs.msg import KeyValue

    out = []
    for k, v in d.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        out.append(KeyValue(key=str(k), value=str(v)))
    return out


def diagnostic_status(name: str, hardware_id: str, level: int, message: str, values: dict):
    from diagnostic_msgs.msg import DiagnosticStatus

    s = DiagnosticStatus()
    s.name, s.hardware_id, s.message = name, hardware_id, message
    s.level = bytes([level]) if isinstance(s.level, bytes) else level
    s.values = key_values(values)
    return s


def exit_main(factory, args=None, parameter_table=None) -> None:
    """Run the node and exit with its status; ``--print-parameters`` prints the node's
    parameter table (types, defaults, ranges, descriptions) instead, without starting ROS."""
    argv = sys.argv if args is None else args
    if parameter_table is not None and "--print-parameters" in argv:
        from vilib_ros.nodes.params import format_table

        print(format_table(parameter_table()))
        return
    sys.exit(run_node(factory, args))


def write_json(path, obj) -> None:
    """Write ``obj`` as indented JSON to ``path``, creating the folder."""
    import json
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str))
