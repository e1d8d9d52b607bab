"""Warnings that the same cause can give on every frame or sample (a misconfigured limit, a stream of
bad input): said the first time, then at most once every ``period_s`` per kind, with how many were
held back meanwhile. What they are about is counted where they arise all the same."""
from __future__ import annotations

import collections
import logging
import time


class ThrottledWarnings:
    """``warn(kind, msg, *args)``: ``logger.warning(msg, *args)`` the first time for ``kind``, then at
    most once every ``period_s``, the count held back appended."""

    def __init__(self, logger: logging.Logger, period_s: float = 10.0):
        self.log = logger
        self.period_s = float(period_s)
        self._last: dict = {}
        self._held: collections.Counter = collections.Counter()

    def __call__(self, kind: str, msg: str, *args) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.period_s:
            self._held[kind] += 1
            return
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        if held:
            msg += f" ({held} more like it in the last {now - last:.0f} s)"
        self.log.warning(msg, *args)
