"""Left and right images paired by stamp, for the frontend node (no rclpy).

Left and right images come on two topics with no order between them. :class:`StereoPairer`
keeps up to ``max_waiting`` left images waiting for their right image and up to as many right
images waiting for their left one. A left image is processed as soon as its right image is
there, or alone when the right stream has passed its stamp (right images come in stamp
order), when ``timeout_s`` has gone by, when more than ``max_waiting`` wait, or when nobody
publishes right images. The processing time of a pair is counted from the later of its two
images.

:meth:`StereoPairer.right_missing_s` tells how long left images have been processed alone since
the last right image (or since the first left one, where none came): a stereo frontend on a mono
camera, or a right camera that stopped, which the node says in its log and diagnostics.
"""
from __future__ import annotations

import time
from typing import Callable


class StereoPairer:
    def __init__(self, process: Callable, has_right_publisher: Callable[[], bool], timeout_s: float,
                 on_unmatched: Callable[[], None], max_waiting: int = 10,
                 clock: Callable[[], float] = time.monotonic):
        self._process = process               # process(stamp, img, frame_id, t_recv, img_right=None)
        self._has_right = has_right_publisher
        self.timeout_s = float(timeout_s)
        self._unmatched = on_unmatched
        self.max_waiting = int(max_waiting)
        self._clock = clock                   # for right_missing_s
        self.lefts: dict = {}                 # stamp -> (stamp, img, frame_id, t_recv), arrival order
        self.rights: dict = {}                # stamp -> img
        self.rights_received = 0
        self.lefts_alone = 0                  # left images processed alone since the last right image
        self._alone_since: float | None = None   # when the first of them was processed (monotonic s)

    def left(self, stamp: int, img, frame_id: str, t_recv: float) -> None:
        self.lefts[stamp] = (stamp, img, frame_id, t_recv)
        if stamp in self.rights or not self._has_right():
            self._release(stamp, t_recv)      # its right image is here, or there is no right camera
            return
        while len(self.lefts) > self.max_waiting:
            self._release(next(iter(self.lefts)), None)

    def right(self, stamp: int, img, t_recv: float) -> None:
        self.rights[stamp] = img
        self.rights_received += 1
        self.lefts_alone, self._alone_since = 0, None
        while len(self.rights) > self.max_waiting:
            self.rights.pop(min(self.rights))
        if stamp in self.lefts:
            self._release(stamp, t_recv)

    def flush(self) -> None:
        """Process the left images that waited longer than ``timeout_s``."""
        now = time.monotonic()
        old = [s for s, v in self.lefts.items() if now - v[3] > self.timeout_s]
        if old:
            self._release(max(old), None)

    def right_missing_s(self, now: float | None = None) -> float:
        """Seconds since the first of the left images processed alone after the last right image
        (0 while right images come, or before two left images went alone)."""
        if self._alone_since is None or self.lefts_alone < 2:
            return 0.0
        return max(0.0, (self._clock() if now is None else now) - self._alone_since)

    def clear(self) -> None:
        self.lefts.clear()
        self.rights.clear()

    def _release(self, upto: int, t_recv) -> None:
        while self.lefts and next(iter(self.lefts)) <= upto:
            stamp, img, frame_id, t_left = self.lefts.pop(next(iter(self.lefts)))
            right = self.rights.pop(stamp, None)
            if right is None:
                if self._has_right():
                    self._unmatched()
                self.lefts_alone += 1
                if self._alone_since is None:
                    self._alone_since = self._clock()
            t = t_recv if (stamp == upto and t_recv is not None) else t_left
            self._process(stamp, img, frame_id, t, img_right=right)
