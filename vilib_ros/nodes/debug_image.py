"""The frontend's debug image, drawn and published off the frame path.

:class:`DebugImageWorker` keeps only the newest (image, tracks) pair handed to it and draws
and publishes it in its own thread, at most ``max_rate_hz`` times a second, so a frame never
waits for OpenCV drawing or for a 1 MB bgr8 message to be serialized. No rclpy here: the
``publish`` callable is given by the node.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

import numpy as np


class DebugImageWorker:
    def __init__(self, publish: Callable[[np.ndarray, int, str], None], max_rate_hz: float = 10.0):
        self._publish = publish
        self.max_rate_hz = float(max_rate_hz)
        self._cv = threading.Condition()
        self._item = None
        self._stop = False
        self._last = 0.0
        self.published = 0
        self.dropped = 0          # handed over but replaced by a newer frame or rate-limited
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="debug_image", daemon=True)
        self._thread.start()

    def due(self) -> bool:
        """Would a frame handed over now be drawn (rate limit)?"""
        return self.max_rate_hz > 0 and time.monotonic() - self._last >= 1.0 / self.max_rate_hz

    def offer(self, image: np.ndarray, frame, frame_id: str) -> None:
        """Hand over the newest frame (no copy: ``image`` must not be written afterwards)."""
        if not self.due():
            self.dropped += 1
            return
        with self._cv:
            if self._item is not None:
                self.dropped += 1
            self._item = (image, frame, frame_id)
            self._last = time.monotonic()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._item is None and not self._stop:
                    self._cv.wait()
                if self._stop:
                    return
                item, self._item = self._item, None
            image, frame, frame_id = item
            try:
                self._publish(image, frame, frame_id)
                self.published += 1
            except Exception:  # noqa: BLE001 - a debug output never takes the node down
                self.errors += 1

    def close(self, timeout: float = 2.0) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout)
