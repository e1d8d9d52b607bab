"""The input half of :class:`vilib_ros.nodes.frontend_node.FrontendNode`: images and IMU taken
from their subscriptions, decoded, checked and handed to the node's ``_process``.

Images: each one read from its serialized message (or a CompressedImage), its middleware receive
time noted for the frame trace, then processed (mono) or paired (stereo); while images stream, the
image callback takes the next ones itself (``INLINE_IMAGES``, ``INLINE_WAIT_S``). IMU: bursts
decoded at once, bad samples counted and warned about; before an image is processed the IMU is
drained until it covers the image's stamp (``imu_wait_s``). Stamps: out-of-order images skipped,
time resets and frame gaps counted. No state of its own: it works on the node's attributes
(``st``, ``imu``, ``clock``, ``p``, the subscriptions and waiters made in the node's constructor).
"""
from __future__ import annotations

import time

from vilib_ros.nodes._common import received_monotonic, take_pending
from vilib_ros.nodes.cdr import CdrError, decode_image, decode_imu
from vilib_ros.nodes.conversions import ImageConversionError, compressed_to_mono8, image_to_mono8, stamp_to_ns
from vilib_ros.nodes.input_guard import OUT_OF_ORDER, RESET

#: Rounds of images an image callback takes itself before it returns to the executor (the
#: timers -- diagnostics, stereo flush -- and parameter requests wait at most this many frames)
INLINE_IMAGES = 16
#: How long an image callback waits for the next image before it returns to the executor: while
#: images stream faster than this (a 200 Hz camera's included) the node takes them on its own wait
#: set, without an executor turn per frame (its wait set rebuilt in Python, and its wake-up)
INLINE_WAIT_S = 0.006


class FrontendInput:
    """Mixed into FrontendNode (which defines ``_process``): image, IMU and stamp intake."""

    def _convert(self, msg, topic: str):
        """(stamp, mono8 image, frame_id) of an image message (raw bytes or CompressedImage), or None."""
        try:
            if isinstance(msg, bytes):
                raw = decode_image(msg)
                return raw.stamp_ns, image_to_mono8(raw), raw.frame_id
            return stamp_to_ns(msg.header.stamp), compressed_to_mono8(msg), msg.header.frame_id
        except ImageConversionError as exc:
            enc = None
            if exc.reason == "unsupported_encoding" and isinstance(msg, bytes):
                enc = decode_image(msg).encoding
            self.st.skips.skip(exc.reason, topic, str(exc), key_detail=enc)
        except CdrError as exc:
            self.st.skips.skip("malformed", topic, f"cannot read the image message: {exc}")
        except Exception as exc:  # noqa: BLE001 - malformed message of any kind
            self.st.skips.skip("data_size", topic, f"cannot read image: {exc!r}")
        return None

    def _on_imu(self, msg: bytes) -> None:
        """An IMU message and every one already waiting behind it: one executor turn per burst
        (a player sends the samples up to an image together), not one per sample."""
        t = time.monotonic()
        self._take_pending_imu(msg)
        self._cb_end = time.monotonic()
        self.st.node_stage["imu_callback"].add((self._cb_end - t) * 1e3)

    def _add_imu_burst(self, msgs: list) -> None:
        """Serialized IMU messages, in arrival order: decoded with one ``np.frombuffer`` and queued
        in one call where all of them are fine (the common case: at 1,000 frames/s 10,000 a
        second); one by one otherwise, which rejects, counts and warns sample by sample."""
        if self.imu.add_serialized(msgs) is not None:
            self.st.imu_rx.tick(len(msgs))
            return
        for m in msgs:
            self._add_imu(m)

    def _add_imu(self, msg: bytes) -> None:
        """A serialized IMU message (raw subscription): decoded without building the message."""
        try:
            t, g, a = decode_imu(msg)
        except CdrError as exc:
            self.st.skips.skip("malformed", "imu", f"cannot read the IMU message: {exc}")
            return
        resets = self.imu.resets
        why = self.imu.add(t, g, a)
        if why:
            self.st.skips.skip(why, "imu", f"IMU sample at {t} rejected ({why.replace('_', ' ')}: gyro {list(g)}, "
                               f"acc {list(a)}, previous stamp {self.imu.last_t})")
            return
        if self.imu.resets != resets:
            self.st.events["imu_time_resets"] += 1
            self.get_logger().warning(f"IMU time reset: stamp {t} jumped from the previous one by more than "
                                      f"{self.p['time_jump_threshold_s']} s (looped bag, restarted driver?)")
        self.st.imu_rx.tick()

    def _on_image(self, msg, topic: str, info=None) -> None:
        """An image, then (up to INLINE_IMAGES rounds) the next images on the image topics, taken
        here in arrival order per topic, waiting up to INLINE_WAIT_S for each (and queueing the IMU
        that comes meanwhile): the executor's turn per message (the wait set rebuilt in Python) is
        paid once per INLINE_IMAGES frames while images stream (or queue behind a slow one), not per
        frame."""
        self._one_image(msg, topic, info)
        rounds, deadline = 0, time.monotonic() + INLINE_WAIT_S
        while rounds < INLINE_IMAGES:
            took = False
            for sub, name in self._image_subs:
                for raw, inf in take_pending(sub, 1, with_info=True):
                    self._one_image(raw, name, inf)
                    took = True
            if took:
                rounds += 1
                deadline = time.monotonic() + INLINE_WAIT_S
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not self._stream_waiter.wait(left):
                return
            # IMU that came while waiting is queued now, off the next image's path
            self._take_pending_imu()
            self._cb_end = time.monotonic()

    def _one_image(self, msg, topic: str, info) -> None:
        t_recv = time.monotonic()
        self._prev_cb_end = self._cb_end
        try:
            self._take_image(msg, topic, info, t_recv)
        finally:
            self._cb_end = time.monotonic()

    def _take_image(self, msg, topic: str, info, t_recv: float) -> None:
        if topic == "image":
            self.st.rx.tick()
        got = self._convert(msg, topic)
        if got is None:
            return
        self.st.node_stage["convert"].add((time.monotonic() - t_recv) * 1e3)
        stamp, img, frame_id = got
        self._note_dds_received(stamp, info)
        if topic == "image_right":
            self.pairs.right(stamp, img, t_recv)
        elif self.stereo:
            self.pairs.left(stamp, img, frame_id, t_recv)
        else:
            self._process(stamp, img, frame_id, t_recv)

    def _note_dds_received(self, stamp: int, info) -> None:
        """The middleware's receive time of an image (its message info, system clock) on the
        monotonic clock, kept per stamp until the frame is processed (the later of a stereo pair)."""
        t = received_monotonic(info)
        if t is None:
            return
        self._dds_rx[stamp] = max(t, self._dds_rx.get(stamp, t))
        while len(self._dds_rx) > 64:                     # frames that were skipped or never paired
            del self._dds_rx[next(iter(self._dds_rx))]

    def _take_pending_imu(self, first: bytes | None = None) -> None:
        """Queue ``first`` and every IMU message already waiting in the subscription.

        The executor takes one message per subscription per turn, so behind images that take
        most of a frame period to process the IMU queue would grow and overflow; draining it
        here, before an image is processed, also makes the gyro up to the image's stamp
        available to the tracker's motion prediction.
        """
        msgs = [] if first is None else [first]
        msgs.extend(take_pending(self.sub_imu))
        if msgs:
            self._add_imu_burst(msgs)

    def _wait_for_imu(self, stamp: int) -> None:
        """Drain the IMU until it covers ``stamp`` (bounded by imu_wait_s, and only while the IMU
        is less than 1 s of sensor time behind the image: an IMU that stopped is not waited for);
        a frame processed without it is counted as imu_incomplete. The test is on stamps, not on
        when the last sample arrived: a replay that waits for this node's tracks before sending
        the next IMU samples and image pauses the IMU for as long as a frame takes here."""
        self._take_pending_imu()
        deadline = time.monotonic() + self.p["imu_wait_s"]
        if self.imu.last_t is None:
            if self.count_publishers(self.sub_imu.topic_name) == 0:
                return                  # nobody publishes IMU: camera-only
            # IMU is published but none has arrived yet (start-up: its first samples can be later
            # than the first images): wait for it as for any other frame
            while self.imu.last_t is None and time.monotonic() < deadline:
                self._imu_waiter.wait(deadline - time.monotonic())
                self._take_pending_imu()
            if self.imu.last_t is None:
                self.st.events["imu_incomplete"] += 1
                return
        while self.imu.last_t < stamp and time.monotonic() < deadline and stamp - self.imu.last_t < 1_000_000_000:
            self._imu_waiter.wait(deadline - time.monotonic())
            self._take_pending_imu()
        if self.imu.last_t < stamp:
            self.st.events["imu_incomplete"] += 1

    def _check_stamp(self, stamp: int) -> bool:
        kind = self.clock.check(stamp)
        if kind == OUT_OF_ORDER:
            self.st.skips.skip("out_of_order", "image", f"stamp {stamp} is not after the previous image's "
                               f"{self.clock.last}")
            return False
        if kind == RESET:
            self.st.events["time_resets"] += 1
            self.get_logger().warning(
                f"time reset: image stamp jumped from {self.clock.last} to {stamp} (more than "
                f"{self.p['time_jump_threshold_s']} s back or forward): tracks start again")
            self.tracker.reset()
            self.periods.clear()
        elif self.clock.last is not None:
            dt = stamp - self.clock.last
            if len(self.periods) >= 3:
                period = sorted(self.periods)[len(self.periods) // 2]
                if dt > 1.5 * period:
                    self.st.skips.count("frame_gap", max(1, int(round(dt / period)) - 1))
                    return True
            self.periods = (self.periods + [dt])[-20:]
        return True
