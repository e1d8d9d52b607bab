"""The input half of :class:`vilib_ros.nodes.backend_node.BackendNode`: IMU and tracks taken
from their subscriptions, checked and handed to the estimator in stamp order.

IMU: bursts decoded at once into the node's ring (bad samples counted and warned about); the
estimator gets, with each frame, the samples up to that frame's stamp and the first one at or after
it, never more before it is initialised (so a replay gives the same estimate however the IMU and the
tracks interleave on arrival), and the rest at once while ``odometry_imu`` is subscribed. Tracks: each message read
into a TrackFrame, its stamp checked (out of order skipped; a hole bridged by the IMU counted as a
gap; a jump back or forward restarts the estimator), then queued until the IMU covers it
(``imu_wait_s``) and processed; while tracks stream, the tracks callback takes the next ones itself
(``INLINE_TRACKS``, ``INLINE_WAIT_S``, ``INLINE_BUDGET_S``). No state of its own: it works on the
node's attributes (``imu``, ``frame_clock``, ``pending``, ``skips``, ``p``, the subscriptions and
waiters made in the node's constructor).
"""
from __future__ import annotations

import time

import numpy as np

from vilib_ros.nodes._common import take_pending
from vilib_ros.nodes.cdr import CdrError, decode_imu
from vilib_ros.nodes.conversions import pointcloud_to_trackframe
from vilib_ros.nodes.input_guard import OUT_OF_ORDER, RESET

#: Tracks messages a tracks callback takes itself (waiting for each up to INLINE_WAIT_S) before it
#: returns to the executor, whose turn (the wait set of every entity rebuilt in Python, ~0.15 ms)
#: is then paid once per burst; INLINE_BUDGET_S bounds the callback so the timers still run
INLINE_TRACKS = 32
INLINE_WAIT_S = 0.004
INLINE_BUDGET_S = 0.1


class BackendInput:
    """Mixed into BackendNode (which defines ``_process_frame``, ``_processed``, ``_time_reset``,
    ``_odometry``): IMU and tracks intake."""

    def _on_imu(self, msg: bytes) -> None:
        """This IMU message and every one already waiting: into the node's ring (checks, gaps, time
        resets), frames waiting for it processed (each takes its IMU from the ring, see _feed_imu)."""
        self._imu_taken(self._take_pending_imu(msg))

    def _imu_taken(self, added: list[int], defer: bool = False) -> None:
        """After IMU samples (these stamps) went into the ring: frames waiting for them processed;
        while someone subscribes ``odometry_imu`` (and the estimator is initialised), into the
        estimator at once and ``odometry_imu`` at each stamp. The estimator's frames come out the
        same either way: it holds each frame's own samples when it takes the frame. ``defer``
        (a tracks callback that goes on to the next frame): where no frame waits and nobody
        subscribes ``odometry_imu``, they stay in the ring for the next frame to feed (the same
        samples in the same order; one estimator call per frame instead of two)."""
        if not added or self.estimator is None:
            return
        if defer and not self.pending and not (self.p["publish_odometry_imu"]
                                               and self.pub_odom_imu.get_subscription_count() > 0):
            return
        t = added[-1]
        last = self.frame_clock.last
        propagating = self.p["publish_odometry_imu"] and self.pub_odom_imu.get_subscription_count() > 0
        # ahead of the frames only for odometry_imu, and only once initialised: the initialisation
        # decides on the IMU it holds, so it gets no more than each frame's own (see _feed_imu)
        if propagating and self.estimator.initialised and self.fed_until is not None and t > self.fed_until \
                and last is not None and abs(t - last) < self.frame_clock.threshold_ns:
            self._feed_imu(t)
        self._drain()
        if not propagating:
            return
        for ti in added:
            try:
                s = self.estimator.propagate(ti)
                cov = self.estimator.predicted_covariance(s) \
                    if s is not None and self.p["odometry_covariance"] else None
            except Exception as exc:  # noqa: BLE001
                self.skips.skip("estimator_error", "imu", f"IMU propagation failed: {exc!r}")
                return
            if s is not None:
                self.pub_odom_imu.publish(self._odometry(s, cov))

    def _take_pending_imu(self, first: bytes | None = None) -> list[int]:
        """``first`` and every IMU message already waiting in the subscription into the ring (the
        executor takes one message per turn; a turn costs ~0.3 ms of Python here, more than a
        sample): the stamps added. A burst is decoded and queued in one call where all of it is
        fine (the common case), one by one otherwise (which rejects, counts and warns per sample)."""
        msgs = [] if first is None else [first]
        msgs.extend(take_pending(self.sub_imu))
        added = self.imu.add_serialized(msgs)
        if added is not None:
            self.imu_rx.tick(len(msgs))
            return added
        return [t for raw in msgs for t in self._add_imu(raw)]

    def _add_imu(self, msg: bytes) -> list[int]:
        """One serialized IMU message into the ring: ``[stamp]``, or ``[]`` when it was rejected."""
        try:
            t, g, a = decode_imu(msg)
        except CdrError as exc:
            self.skips.skip("imu_malformed", "imu", f"cannot read the IMU message: {exc}")
            return []
        resets = self.imu.resets
        why = self.imu.add(t, g, a)
        if why:
            self.skips.skip(why, "imu", f"IMU sample at {t} rejected ({why.replace('_', ' ')}, previous stamp "
                            f"{self.imu.last_t})")
            return []
        if self.imu.resets != resets:
            self.get_logger().warning(f"IMU time reset: stamp {t} jumped by more than "
                                      f"{self.p['time_jump_threshold_s']} s")
        self.imu_rx.tick()
        return [t]

    def _feed_imu(self, upto: int) -> None:
        """Hand the estimator the ring's samples after the last one it got, up to ``upto`` and the
        first one at or after it (after a time reset: from 2 s before ``upto``, which the
        initialisation needs).

        A frame at ``upto`` is thus estimated on exactly these samples, however far the IMU has run
        ahead of the tracks when the frame is processed: the sample at or after its stamp (which the
        estimator interpolates the frame's instant with) and none beyond, which the estimator's
        initialisation counts as IMU after the first frame (with them it would initialise a frame
        or two earlier or later, as the IMU happens to arrive, and publish another number of
        odometry messages for the same replay). Samples beyond the frames go in from
        :meth:`_imu_taken` once the estimator is initialised (``odometry_imu`` propagates on them)."""
        start = self.fed_until if self.fed_until is not None else upto - 2_000_000_000
        if start >= upto:
            return                  # it holds the sample at or after upto already
        ts, data = self.imu.between(start, upto)
        if not ts.size or ts[-1] < upto:
            # none at upto itself: the first one after it
            nt, nd = self.imu.between(upto, upto + self.frame_clock.threshold_ns)
            if nt.size:
                ts, data = np.concatenate([ts, nt[:1]]), np.concatenate([data, nd[:1]])
        try:
            self.estimator.add_imu_batch(ts, data)
        except Exception as exc:  # noqa: BLE001 - never die on one batch
            self.skips.skip("estimator_error", "imu", f"estimator failed on {len(ts)} IMU samples: {exc!r}")
        if ts.size:
            self.fed_until = int(ts[-1])
        elif self.fed_until is None:
            self.fed_until = start

    def _on_tracks(self, msg) -> None:
        """A tracks message, then the next ones taken here in order, waiting up to INLINE_WAIT_S for
        each on a wait set of the tracks subscription (and of the IMU's where a frame waits for its
        IMU or odometry_imu is subscribed: that IMU goes into the ring and the estimator at once,
        frames waiting for it processed): one executor turn per burst of up to INLINE_TRACKS frames
        (or INLINE_BUDGET_S), not per frame or IMU message."""
        self._one_tracks(msg)
        n, t_end = 1, time.monotonic() + INLINE_BUDGET_S
        deadline = time.monotonic() + INLINE_WAIT_S
        while n < INLINE_TRACKS:
            took = False
            for raw in take_pending(self.sub_tracks, 1):
                self._one_tracks(raw)
                n += 1
                took = True
            now = time.monotonic()
            if took:
                if now > t_end:
                    return
                deadline = now + INLINE_WAIT_S
                continue
            if now >= deadline:
                return
            # IMU is needed at once only by a frame waiting for it, or by odometry_imu; otherwise it
            # stays queued until the next frame takes it (one wake-up and one estimator call per
            # frame, not per IMU message: the estimator gets the same samples in the same order)
            imu_now = bool(self.pending) or (self.p["publish_odometry_imu"]
                                             and self.pub_odom_imu.get_subscription_count() > 0)
            if not (self._stream_waiter if imu_now else self._tracks_waiter).wait(deadline - now):
                return
            if imu_now:
                self._imu_taken(self._take_pending_imu())

    def _one_tracks(self, msg) -> None:
        added = self._take_pending_imu()        # the IMU up to this frame, if it is here already
        try:
            self._take_tracks(msg)
        finally:
            self._imu_taken(added, defer=True)

    def _take_tracks(self, msg) -> None:
        try:
            frame = pointcloud_to_trackframe(msg)
        except Exception as exc:  # noqa: BLE001
            self.skips.skip("bad_tracks", "tracks", str(exc))
            return
        kind = self.frame_clock.check(frame.stamp_ns)
        if kind == OUT_OF_ORDER:
            self.skips.skip("tracks_out_of_order", "tracks", f"stamp {frame.stamp_ns} not after "
                            f"{self.frame_clock.last}")
            return
        if kind == RESET and frame.stamp_ns > self.frame_clock.last and self.imu.resets == self._imu_resets \
                and self.imu.last_t is not None and self.imu.last_t > self.frame_clock.last:
            # forward, and the IMU went on without a jump: a hole in the tracks (frontend restarted,
            # camera dropped out), bridged by the IMU -- not a clock jump
            self.tracks_gaps += 1
        elif kind == RESET:
            self._time_reset(frame.stamp_ns, self.frame_clock.last)
        self._imu_resets = self.imu.resets
        self.frame_clock.accept(frame.stamp_ns)
        self.frames_rx.tick()
        if self.estimator is None:
            self._processed(frame.stamp_ns)
            return
        if not self.p["stereo"]:
            frame.uv_right = frame.xy_right = None
        self.pending.append((time.monotonic(), frame))
        self._drain()

    def _drain(self) -> None:
        now = time.monotonic()
        while self.pending:
            t_rx, frame = self.pending[0]
            if not self.imu.reached(frame.stamp_ns) and now - t_rx < self.p["imu_wait_s"]:
                return
            self.pending.popleft()
            self._process_frame(frame)
            self._processed(frame.stamp_ns)
