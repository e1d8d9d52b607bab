"""The estimator behind a queue: in a child process (:class:`EstimatorProcess`) or in this one
(:class:`EstimatorInline`), with one interface, so that a caller (``backend_node``) hands frames
over and publishes the results when they come back.

Why a child process: gtsam holds the GIL through an update (measured: a Python thread beside a
3 s optimisation ran only after it), so in one process the node's own work per frame (decoding
the tracks message, the IMU, three publishes: ~0.5 ms on the 2-core machine, ~0.8 ms on the GPU
machine's host) adds to the estimator's. With the estimator in a child the two overlap: the
node's throughput is set by the slower of the two, not their sum. Same estimator, same inputs in
the same order: the same estimates (``test_backend_runner``).

Interface (both classes):

* ``add_imu_batch(ts, data)``: IMU samples, queued with the next request (no reply);
* ``add_frame(frame, covariance=False, landmarks=False)``: one reply per call, in order:
  ``{"kind": "frame", "stamp_ns", "state" (VioState or None), "covariance" (StateCovariance or
  None: on keyframes, when asked), "landmarks" ((M, 3) or None: on keyframes, when asked),
  "frame_ms", "error" (str or None), "counters"}``;
* ``propagate(stamps)``: one reply ``{"kind": "propagated", "states": [VioState or None, ...]}``;
* ``results()``: the replies arrived so far (oldest first), without waiting;
* ``reset()``: the smoothed trajectory ``(t_ns, p, q_xyzw)`` of the estimator so far, which is
  replaced by a fresh one (waits for the child to get there);
* ``close()``: ``{"trajectory", "counters"}`` of the estimator, which ends (waits likewise);
* ``counters()``: the estimator's counters as of the newest reply; ``mode``; ``error``: why the
  child process is gone (None while it runs).

The child is ``python -m vilib_ros.backend.runner`` with two pipes (``multiprocessing``'s
``Connection`` framing and pickling, no ``multiprocessing`` start-up, semaphores or resource
tracker). It ignores SIGINT (the node ends it with ``close()`` after its own Ctrl-C), asks the
kernel for SIGTERM when its parent dies, and ends when its input pipe closes.
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

import numpy as np


class BackendFrame:
    """What the estimator reads of a :class:`~vilib_ros.types.TrackFrame` (stamp, ids, xy,
    xy_right): the frame as it crosses to another process (4 arrays pickled instead of 9 and
    two dicts)."""

    __slots__ = ("stamp_ns", "ids", "xy", "xy_right")

    def __init__(self, stamp_ns: int, ids: np.ndarray, xy: np.ndarray, xy_right: np.ndarray | None = None):
        self.stamp_ns, self.ids, self.xy, self.xy_right = int(stamp_ns), ids, xy, xy_right

    @classmethod
    def of(cls, fr) -> "BackendFrame":
        return cls(fr.stamp_ns, fr.ids, fr.xy, fr.xy_right)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getstate__(self):
        return self.stamp_ns, self.ids, self.xy, self.xy_right

    def __setstate__(self, st):
        self.stamp_ns, self.ids, self.xy, self.xy_right = st


def resolved_mode(config, cam1) -> str:
    """The estimator's mode for this configuration ('auto': stereo with a right camera)."""
    return config.mode if config.mode != "auto" else ("stereo" if cam1 is not None else "mono")


class _Server:
    """The estimator's side of the protocol: one request in, its reply (if any) out."""

    def __init__(self, config, cam0, cam1, imu_noise):
        self.args = (config, cam0, cam1, imu_noise)
        self.est = self._new()

    def _new(self):
        from vilib_ros.backend import VioEstimator

        return VioEstimator(*self.args)

    def handle(self, msg) -> dict | None:
        kind, imu = msg[0], msg[1]
        est = self.est
        err = None
        for ts, data in imu:
            try:
                est.add_imu_batch(ts, data)
            except Exception as exc:  # noqa: BLE001 - counted by the caller, the estimator goes on
                err = f"estimator failed on {len(ts)} IMU samples: {exc!r}"
        if kind == "frame":
            frame, want_cov, want_lm = msg[2], msg[3], msg[4]
            t0 = time.perf_counter()
            state = cov = lm = None
            try:
                state = est.add_frame(frame)
                if state is not None and state.is_keyframe:
                    cov = est.state_covariance() if want_cov else None
                    lm = est.landmarks() if want_lm else None
            except Exception as exc:  # noqa: BLE001 - the estimator recovers on the next frame
                err = f"estimator failed on frame {frame.stamp_ns}: {exc!r}"
            return {"kind": "frame", "stamp_ns": frame.stamp_ns, "state": state, "covariance": cov,
                    "landmarks": lm, "frame_ms": (time.perf_counter() - t0) * 1e3, "error": err,
                    "counters": est.counters()}
        if kind == "propagate":
            states = []
            try:
                states = [est.propagate(t) for t in msg[2]]
            except Exception as exc:  # noqa: BLE001
                err = f"IMU propagation failed: {exc!r}"
            return {"kind": "propagated", "states": states, "error": err}
        if kind == "reset":
            traj = est.trajectory(True)
            self.est = self._new()
            return {"kind": "reset", "trajectory": traj, "counters": self.est.counters()}
        if kind == "close":
            return {"kind": "closed", "trajectory": est.trajectory(True), "counters": est.counters()}
        return None if err is None else {"kind": "imu_error", "error": err}


class EstimatorInline:
    """The estimator in this process, behind the interface of :class:`EstimatorProcess` (replies
    are ready as soon as a request returns)."""

    def __init__(self, config, cam0, cam1=None, imu_noise=None, notify=None):
        self.mode = resolved_mode(config, cam1)
        self._server = _Server(config, cam0, cam1, imu_noise)
        self._imu: list = []
        self._out: collections.deque = collections.deque()
        self._counters = self._server.est.counters()
        self.error = None

    def _call(self, msg) -> None:
        self._imu = []
        r = self._server.handle(msg)
        if r is not None:
            self._out.append(r)

    def add_imu_batch(self, ts, data) -> None:
        if len(ts):
            self._imu.append((ts, data))

    def add_frame(self, frame, covariance: bool = False, landmarks: bool = False) -> None:
        self._call(("frame", self._imu, frame, covariance, landmarks))

    def propagate(self, stamps) -> None:
        self._call(("propagate", self._imu, list(stamps)))

    def results(self) -> list[dict]:
        out = list(self._out)
        self._out.clear()
        for r in out:
            self._counters = r.get("counters", self._counters)
        return out

    def reset(self):
        r = self._server.handle(("reset", self._imu))
        self._imu, self._counters = [], r["counters"]
        for old in self._out:               # replies of the old estimator: its counters are not the new one's
            old.pop("counters", None)
        return r["trajectory"]

    def close(self) -> dict:
        r = self._server.handle(("close", self._imu))
        self._imu = []
        return r

    def counters(self) -> dict:
        return dict(self._counters)


class EstimatorProcess(EstimatorInline):
    """The estimator in a child process (module docstring). ``notify()`` is called from a
    receiver thread whenever a reply arrives (a ROS guard condition's ``trigger``)."""

    def __init__(self, config, cam0, cam1=None, imu_noise=None, notify=None):
        import pickle

        self.mode = resolved_mode(config, cam1)
        self._imu, self._counters, self.error, self._closed = [], {}, None, False
        self._notify = notify or (lambda: None)
        self._out: collections.deque = collections.deque()
        self._cond = threading.Condition()
        r_req, w_req = os.pipe()
        r_rep, w_rep = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-m", "vilib_ros.backend.runner", str(r_req), str(w_rep),
                                      str(os.getpid())], pass_fds=(r_req, w_rep), stdin=subprocess.DEVNULL)
        os.close(r_req)
        os.close(w_rep)
        self._req = Connection(w_req, readable=False)
        self._rep = Connection(r_rep, writable=False)
        self._req.send_bytes(pickle.dumps((config, cam0, cam1, imu_noise)))
        self._thread = threading.Thread(target=self._receive, name="vilib_ros-estimator-replies", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        try:
            while True:
                r = self._rep.recv()
                with self._cond:
                    if r.get("kind") == "ready":
                        self._counters = r["counters"]
                    elif r.get("kind") == "died":       # could not start: reported once, below
                        self.error = r["error"]
                    else:
                        self._closed = self._closed or r.get("kind") == "closed"
                        self._out.append(r)
                    self._cond.notify_all()
                self._notify()
        except (EOFError, OSError):
            pass
        code = self.proc.wait()
        with self._cond:
            if any(r.get("kind") == "closed" for r in self._out) or self._closed:
                self._cond.notify_all()
                return                      # ended by close(): not an error
            if self.error is None:
                self.error = f"the estimator process ended (exit code {code})"
            self._out.append({"kind": "died", "error": self.error})
            self._cond.notify_all()
        self._notify()

    def _call(self, msg) -> None:
        self._imu = []
        if self.error is not None:
            return
        try:
            self._req.send(msg)
        except (BrokenPipeError, OSError):
            pass            # the receiver reports the exit

    def results(self) -> list[dict]:
        with self._cond:
            out = list(self._out)
            self._out.clear()
        for r in out:
            self._counters = r.get("counters", self._counters)
        return out

    def _request(self, kind: str, reply: str, timeout_s: float) -> dict | None:
        """Send ``kind`` and wait for its reply (earlier replies stay queued for :meth:`results`)."""
        self._call((kind, self._imu))
        end = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for k, r in enumerate(self._out):
                    if r.get("kind") == reply:
                        for old in list(self._out)[:k]:      # earlier replies: the old estimator's counters
                            old.pop("counters", None)
                        del self._out[k]
                        return r
                    if r.get("kind") == "died":
                        return None
                left = end - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    return None

    def reset(self):
        r = self._request("reset", "reset", 600.0)
        if r is None:
            return np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 4))
        self._counters = r["counters"]
        return r["trajectory"]

    def close(self, timeout_s: float = 600.0) -> dict:
        r = self._request("close", "closed", timeout_s)
        try:
            self._req.close()
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if r is None:
            raise RuntimeError(self.error or "the estimator process gave no final trajectory")
        return r


def _serve(fd_in: int, fd_out: int, parent: int) -> int:
    """The child process: requests from ``fd_in``, replies to ``fd_out`` (module docstring)."""
    import logging
    import pickle

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)     # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:
            return 1
    logging.basicConfig(level=logging.INFO, format="[estimator process] %(levelname)s %(name)s: %(message)s")
    req, rep = Connection(fd_in, writable=False), Connection(fd_out, readable=False)
    try:
        server = _Server(*pickle.loads(req.recv_bytes()))
    except Exception as exc:  # noqa: BLE001 - the parent reports it and records only
        rep.send({"kind": "died", "error": f"the estimator could not start: {exc!r}"})
        return 1
    rep.send({"kind": "ready", "counters": server.est.counters()})
    while True:
        try:
            msg = req.recv()
        except (EOFError, OSError):
            return 0
        r = server.handle(msg)
        if r is not None:
            rep.send(r)
        if msg[0] == "close":
            return 0


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
