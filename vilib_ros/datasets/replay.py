"""The replay of a dataset: which events a player publishes, in which order, images decoded ahead.

:func:`replay_events` selects the events of a replay from :meth:`Dataset.iter_events`: IMU
samples from ``imu_margin_s`` before the first image to the last image, the images of the
cameras published, at most ``max_frames`` cam0 images. The order is the dataset's time order,
IMU first at equal stamps, so every IMU sample up to an image's stamp precedes the image.

:class:`Prefetcher` runs that sequence in a worker thread, up to ``depth`` images ahead of the
consumer, with the images decoded in order by ``workers`` decoders (:mod:`.decoders`): processes
writing into shared memory where the images are plain files (ASL folders), so that decoding
takes nothing from the interpreter lock of the process that publishes them; threads where the
dataset allows parallel loads; the worker thread itself for a bag (one reader). A player
publishing at a high rate then does not wait for one decoder. A frame that cannot be read
(:class:`~.common.FrameError`) arrives as a ``("skip", cam, t_ns, index, reason, message)``
event instead of an image: the player counts it and goes on. No rclpy here.
"""
from __future__ import annotations

import queue
import threading
import sys
from typing import Iterator

import numpy as np

from .common import Dataset, FrameError


def replay_events(ds: Dataset, max_frames: int = 0, imu_margin_s: float = 0.5,
                  cameras: int = 1, loops: int = 1) -> tuple[int, Iterator[tuple]]:
    """``(number of cam0 images, iterator of events)`` for a replay of ``ds``.

    Events are ``("imu", t_ns, gyro, acc)`` and ``("image", cam, t_ns, index)`` for cameras
    ``0 .. cameras-1``: IMU from ``imu_margin_s`` before the first cam0 image to the last one
    replayed, images of the other cameras within the same span. ``loops`` > 1 replays the span
    again and again with every stamp shifted by the span plus one frame period per loop, so time
    runs on without a jump (for soak tests: the content jumps back, the clock does not)."""
    stamps0 = ds.image_stamps(0)
    n = len(stamps0) if max_frames <= 0 else min(len(stamps0), int(max_frames))
    if n == 0:
        return 0, iter(())
    t_first, t_last = int(stamps0[0]), int(stamps0[n - 1])
    t_imu0 = t_first - int(imu_margin_s * 1e9)
    period = int(np.median(np.diff(stamps0[:n]))) if n > 1 else 50_000_000
    loops = max(1, int(loops))

    def one_loop(k: int):
        offset = k * (t_last - t_first + period)
        imu_from = t_imu0 if k == 0 else t_first - period + 1
        for ev in ds.iter_events():
            if ev[0] == "imu":
                if imu_from <= ev[1] <= t_last:
                    yield ("imu", ev[1] + offset, ev[2], ev[3]) if offset else ev
                continue
            cam, t = ev[1], ev[2]
            if cam >= cameras or t < t_first:
                continue
            if t > t_last:
                if cam == 0:
                    return
                continue
            yield ("image", cam, t + offset, ev[3]) if offset else ev

    def gen():
        for k in range(loops):
            yield from one_loop(k)

    return n * loops, gen()


_END = object()

#: The GIL switch interval for a process whose threads decode images beside a busy main thread. A
#: decode thread leaves OpenCV's decoder (which releases the GIL) and then waits for the GIL until
#: the main thread is asked to drop it: Python's default interval, 5 ms, is about a 752x480 PNG's
#: decode time again, so with the consumer's thread busy in Python decoded images wait that long.
#: Decoder processes (an ASL folder) need none of it.
DECODE_SWITCH_INTERVAL_S = 0.0005


def hand_gil_to_decoders() -> float:
    """Lower this process's GIL switch interval to :data:`DECODE_SWITCH_INTERVAL_S` (never raise
    it); returns the interval before. For processes that decode images on threads (the player, the
    offline runner, where the images are not plain files)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, DECODE_SWITCH_INTERVAL_S))
    return before


class _Image:
    """An image event whose decoding was submitted: the event and the decoders' ticket."""

    __slots__ = ("ev", "ticket")

    def __init__(self, ev, ticket):
        self.ev, self.ticket = ev, ticket


class Prefetcher:
    """A dataset opened and read in a worker thread, its images decoded a bounded number ahead of
    the consumer.

    ``Prefetcher(open_fn)`` opens the dataset in the worker (``open_fn()``; an error is raised
    here) and exposes it as ``ds`` for its plain data (cameras, stamps, IMU arrays): every
    reader call (``load_image``, ``close``) stays in the worker, as the sqlite3 reader of ROS 2
    bags requires. The images are decoded by ``workers`` decoders (None: the default of the kind)
    of the kind ``kind`` (:func:`~.decoders.open_decoders`: "auto", "processes", "threads"):
    processes writing into shared memory where they are plain files (an ASL folder), threads where
    the dataset allows parallel loads, else the worker thread itself; ``decoders`` says which
    (``kind``, ``workers``, ``describe()``). ``start(events)`` hands it the events
    to replay (:func:`replay_events`); iterating yields ``("imu", t, gyro, acc)``, ``("image",
    cam, t, index, img)`` and, for a frame that cannot be read, ``("skip", cam, t, index, reason,
    message)``, in order. Another error (the dataset became unreadable) is raised in the consumer.
    ``close()`` stops the worker and the decoders and closes the dataset."""

    def __init__(self, open_fn, depth: int = 8, workers: int | None = None, kind: str = "auto"):
        from .decoders import KINDS

        if kind not in KINDS:
            raise ValueError(f"decoders must be one of {', '.join(KINDS)}; got {kind!r}")
        self._open_fn = open_fn
        self._kind = kind
        # ``depth`` images ahead (the IMU between them is not counted: 10-20 samples per image)
        self._depth = max(1, int(depth))
        self._slots = threading.Semaphore(self._depth)
        self._workers = None if workers is None else max(1, int(workers))
        self._q: queue.Queue = queue.Queue()
        self._go: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self.ds: Dataset | None = None
        self.decoders = None
        self._thread = threading.Thread(target=self._work, name="vilib_ros_prefetch", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._open_error is not None:
            self._thread.join()
            raise self._open_error

    def start(self, events: Iterator[tuple]) -> None:
        self._go.put(events)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _work(self) -> None:
        from .decoders import open_decoders

        try:
            self.ds = self._open_fn()
            ds = self.ds
            # bags (one sqlite3 / file reader) decode in this thread, where they were opened
            self.decoders = open_decoders(ds, range(ds.num_cameras), per_job=1, capacity=self._depth,
                                          kind=self._kind,
                                          workers=self._workers if getattr(ds, "parallel_loads", False) else 0)
        except BaseException as exc:  # noqa: BLE001 - raised in the constructor
            self._open_error = exc
            if self.ds is not None:
                try:
                    self.ds.close()
                except Exception:  # noqa: BLE001
                    pass
            self._ready.set()
            return
        self._ready.set()
        dec = self.decoders
        try:
            events = None
            while events is None and not self._stop.is_set():
                try:
                    events = self._go.get(timeout=0.1)
                except queue.Empty:
                    continue
            # Images go into the queue as tickets, in order: the consumer waits on the one it
            # needs and nothing else.
            for ev in events or ():
                if ev[0] == "image":
                    while not self._slots.acquire(timeout=0.1):
                        if self._stop.is_set():
                            return
                    item = _Image(ev, dec.submit(((ev[1], ev[3]),)))
                else:
                    item = ev
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(("error", exc))
        finally:
            if not self._stop.is_set():      # the consumer still collects the images queued
                self._stop.wait()
            dec.close()
            try:
                ds.close()
            except Exception:  # noqa: BLE001
                pass

    def __iter__(self):
        while True:
            item = self._q.get()
            if isinstance(item, _Image):
                img = item.ticket.result()[0]    # an error of the reader is raised here, in order
                _, cam, t, index = item.ev
                item = (("skip", cam, t, index, img.reason, str(img)) if isinstance(img, FrameError)
                        else ("image", cam, t, index, img))
            if item is _END:
                return
            if item[0] == "error":
                raise item[1]
            if item[0] in ("image", "skip"):
                self._slots.release()
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)


class ReplayClock:
    """The wall-clock time (``time.monotonic()`` seconds) at which to publish an event of data stamp
    ``t_ns`` at a replay ``rate`` (> 0) that may change mid-replay.

    At a constant rate the target is the first event's wall time plus the data time since it,
    scaled (a replay that fell behind publishes without waiting until it is on time again). A
    change of rate re-anchors the timeline at the previous event's scheduled time, so the events
    after it follow at the new rate. Regression: the player computed every target from the first
    event at the rate of the moment, so a rate lowered mid-replay (``ros2 param set /player_node
    rate 1.0`` after 1000) paused the replay for the span already replayed, scaled, and a rate
    raised published everything up to "now" in one burst."""

    def __init__(self):
        self.rate = 0.0
        self._anchor = None        # (wall time, data stamp) the targets are counted from
        self._last = None          # the previous event's (scheduled wall time, data stamp)

    def target(self, t_ns: int, rate: float, now: float) -> float:
        """When to publish the event at ``t_ns`` (``now``: the current monotonic time)."""
        if not rate > 0.0:
            raise ValueError(f"ReplayClock needs a rate > 0, got {rate}")
        if self._anchor is None:
            self._anchor = (now, int(t_ns))
        elif rate != self.rate:
            self._anchor = self._last
        self.rate = rate
        t = self._anchor[0] + (int(t_ns) - self._anchor[1]) * 1e-9 / rate
        self._last = (t, int(t_ns))
        return t
