"""Images decoded ahead of their consumer, in order, outside this process's interpreter lock where
they are plain image files.

:func:`open_decoders` picks, for a dataset:

* :class:`DecoderProcesses` where the images are plain files (an ASL folder whose cameras' image
  sizes are known) and the machine has CPUs for them (:data:`MIN_CPUS_FOR_PROCESSES`; or where
  asked for): ``workers`` processes decode them with OpenCV straight into a ring of frame
  slots in shared memory. This process sends each job (the files of one frame and the slot to
  fill) down a pipe and receives the images' shapes back: no pixels are pickled, and no thread of
  this process decodes, so the consumer's thread never hands the interpreter lock to a decoder.
  The consumer copies a slot's images out when it takes them (one ``memcpy`` per image), and the
  slot is free again at once: what the consumer keeps (the CPU frontend keeps the previous frame
  for tracking) is its own. The decoder processes ignore Ctrl-C (SIGINT is blocked while they
  start, so none is delivered to them): :meth:`DecoderProcesses.close` ends them, and they end by
  themselves when this process is gone (their pipe reads end of file).
* :class:`DecoderThreads` otherwise: ``ds.load_image`` on ``workers`` threads where the dataset
  allows it (``Dataset.parallel_loads``), else on one thread (a bag's reader is one file or
  database cursor: concurrent reads corrupt it); ``workers=0`` reads in the calling thread.

Both take jobs, ``((cam, index), ...)`` (the images of one frame), with ``submit(job)``, at most
``capacity`` not yet collected, and return a ticket; ``ticket.result()`` is the job's images in
order, each a ``uint8`` array or the :class:`~.common.FrameError` that says why that frame cannot
be read. Another error of a decoder is raised there. ``decode_s`` sums the time the decoders spent
on jobs; ``busy_s`` is that per decoder (the reader's busy time against a run's wall time). No
rclpy here.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .common import Dataset, FrameError


#: Decoder processes need CPUs of their own: on a machine with fewer, decoding outside the
#: interpreter lock only takes CPU time from the frontend and the backend, and threads, whose decoded
#: images wait for the frontend's thread to let go of the lock, are used instead ("auto").
MIN_CPUS_FOR_PROCESSES = 4

#: what :func:`open_decoders` (and the ``decoders`` option of its callers) accepts
KINDS = ("auto", "processes", "threads")


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        return os.cpu_count() or 1


def default_workers(processes: bool) -> int:
    """Decoders for a replay. Processes: half of this process's CPUs, at least 2 and at most 8 (the
    other half is the frontend's, the backend's and the system's). Threads: the CPU count, at least
    4 and at most 8 (they decode outside the lock and wait for it only to hand the image over)."""
    n = cpus()
    return max(2, min(8, n // 2)) if processes else max(4, min(8, n))


def start_without_sigint(proc) -> None:
    """``proc.start()`` with SIGINT blocked in this thread: the child inherits the blocked signal
    (fork and exec keep the signal mask), so a Ctrl-C at the terminal, which goes to every process
    of the foreground group, reaches this process only, which ends its children in order. A child
    that needs no Ctrl-C of its own (decoders, the offline backend) thus prints no traceback."""
    if not hasattr(signal, "pthread_sigmask"):
        proc.start()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ---------------------------------------------------------------------------------------------
# decoder processes
# ---------------------------------------------------------------------------------------------
def _attach(name: str):
    from multiprocessing import shared_memory

    try:        # Python >= 3.13: the creator alone tracks (and unlinks) the block
        return shared_memory.SharedMemory(name=name, track=False)
    except TypeError:
        return shared_memory.SharedMemory(name=name)


def decode_checked(path: str, size: tuple[int, int] | None) -> np.ndarray:
    """The image file at ``path`` as :class:`~.asl.AslDataset` reads it: ``uint8`` HxW, a
    :class:`FrameError` for a missing, empty, corrupt or unsupported file, and ``size_mismatch``
    where it is not ``size`` (``(width, height)``: the camera's first readable image)."""
    from .asl import decode_image_file

    img = decode_image_file(path)
    if size is not None and (img.shape[1], img.shape[0]) != tuple(size):
        raise FrameError("size_mismatch", f"{path}: size {img.shape[1]}x{img.shape[0]} "
                                          f"differs from the camera's other images ({size[0]}x{size[1]})")
    return img


def _decoder_main(conn, names: list[str], area: int) -> None:
    """A decoder process: jobs ``(job id, slot, ((path, (w, h)), ...))`` from ``conn``, each image
    written into the slot at ``j * area`` bytes; replies ``(job id, [shape or (reason, message)],
    seconds, error)``. Ends on ``None`` or when the other end is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import cv2

    cv2.setNumThreads(1)
    slots = [_attach(n) for n in names]
    try:
        conn.send((-1, None, 0.0, None))        # ready
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None:
                return
            job_id, slot, files = job
            t0 = time.perf_counter()
            out, err = [], None
            try:
                for j, (path, size) in enumerate(files):
                    try:
                        img = decode_checked(path, size)
                    except FrameError as exc:
                        out.append((exc.reason, str(exc)))
                        continue
                    if img.nbytes > area:       # never with the sizes checked above: the slot's bound
                        out.append(("size_mismatch", f"{path}: size {img.shape[1]}x{img.shape[0]} is larger "
                                                     "than the cameras' first images"))
                        continue
                    dst = np.ndarray(img.shape, np.uint8, buffer=slots[slot].buf, offset=j * area)
                    dst[...] = img
                    del dst
                    out.append(img.shape)
            except Exception as exc:  # noqa: BLE001 - handed to the consumer, raised there
                err = exc
            msg = (job_id, out, time.perf_counter() - t0, err)
            try:
                conn.send(msg)
            except (OSError, EOFError):
                return
            except Exception:  # noqa: BLE001 - an error that does not pickle goes as its text
                conn.send(msg[:3] + (RuntimeError(f"{type(err).__name__}: {err}"),))
    finally:
        for s in slots:
            s.close()


class _SlotTicket:
    """One job of :class:`DecoderProcesses`; :meth:`result` collects it (once)."""

    __slots__ = ("_ring", "job_id", "slot", "_images")

    def __init__(self, ring: "DecoderProcesses", job_id: int, slot: int):
        self._ring, self.job_id, self.slot, self._images = ring, job_id, slot, None

    def result(self) -> list:
        if self._images is None:
            self._images = self._ring._collect(self)
        return self._images

    def cancel(self) -> bool:
        return False


class DecoderProcesses:
    """``workers`` decoder processes filling ``capacity`` frame slots in shared memory, each of
    ``per_job`` images of at most the largest camera's size (:func:`open_decoders` says when)."""

    kind = "processes"

    def __init__(self, ds: Dataset, cameras, per_job: int, workers: int, capacity: int):
        import multiprocessing as mp
        from multiprocessing import shared_memory

        self._path = ds.image_path
        self._sizes = {c: tuple(ds.image_size(c)) for c in cameras}
        self.workers, self.capacity = max(1, int(workers)), max(1, int(capacity))
        self.area = max(w * h for w, h in self._sizes.values())
        self.decode_s = 0.0
        self.jobs = 0
        self._lock = threading.Lock()
        self._free = list(range(self.capacity))[::-1]
        self._done: dict = {}
        self._next = 0
        self._closed = False
        self._shm, self._conns, self._procs, self._started = [], [], [], []
        try:
            self._shm = [shared_memory.SharedMemory(create=True, size=max(1, per_job) * self.area)
                         for _ in range(self.capacity)]
            ctx = mp.get_context("spawn")
            names = [s.name for s in self._shm]
            for w in range(self.workers):
                mine, theirs = ctx.Pipe(duplex=True)
                p = ctx.Process(target=_decoder_main, args=(theirs, names, self.area), daemon=True,
                                name=f"vilib_ros-decoder-{w}")
                start_without_sigint(p)
                theirs.close()
                self._conns.append(mine)
                self._procs.append(p)
                self._started.append(False)
        except BaseException:
            self.close()
            raise

    @property
    def busy_s(self) -> float:
        return self.decode_s / self.workers

    def describe(self) -> str:
        return f"{self.workers} decoder process{'es' if self.workers > 1 else ''} into shared memory"

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every decoder has started (imports done, shared memory attached)."""
        t_end = time.monotonic() + timeout
        for w, conn in enumerate(self._conns):
            while not self._started[w]:
                if conn.poll(min(1.0, max(0.0, t_end - time.monotonic()))):
                    msg = self._recv_one(w)
                    if msg is not None:
                        self._done[msg[0]] = msg
                elif not self._procs[w].is_alive() or time.monotonic() > t_end:
                    raise RuntimeError(f"decoder process {w} did not start (exit code {self._procs[w].exitcode})")

    def _recv_one(self, w: int):
        """One message of decoder ``w``: None for its "ready"."""
        try:
            msg = self._conns[w].recv()
        except (EOFError, OSError):
            raise RuntimeError(f"decoder process {w} ended (exit code {self._procs[w].exitcode})") from None
        if msg[0] == -1:
            self._started[w] = True
            return None
        return msg

    def submit(self, job) -> _SlotTicket:
        """Queue ``job`` (``((cam, index), ...)``); a free slot is required (at most ``capacity``
        jobs not yet collected)."""
        files = tuple((str(self._path(cam, index)), self._sizes.get(cam)) for cam, index in job)
        with self._lock:
            if self._closed:
                raise RuntimeError("the decoders are closed")
            if not self._free:
                raise RuntimeError(f"more than {self.capacity} decoded frames not yet collected")
            slot, job_id = self._free.pop(), self._next
            self._next += 1
            self._conns[job_id % self.workers].send((job_id, slot, files))
        return _SlotTicket(self, job_id, slot)

    def _collect(self, t: _SlotTicket) -> list:
        w = t.job_id % self.workers
        while t.job_id not in self._done:
            msg = self._recv_one(w)
            if msg is not None:
                self._done[msg[0]] = msg
        _, out, seconds, err = self._done.pop(t.job_id)
        self.decode_s += seconds
        self.jobs += 1
        try:
            if err is not None:
                raise err
            buf = self._shm[t.slot].buf
            images = []
            for j, item in enumerate(out):
                if isinstance(item[0], str):
                    images.append(FrameError(*item))
                else:
                    images.append(np.ndarray(item, np.uint8, buffer=buf, offset=j * self.area).copy())
            return images
        finally:
            with self._lock:
                self._free.append(t.slot)

    def close(self) -> None:
        """Stop the decoders (a second call does nothing) and free the shared memory."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for c in self._conns:
            try:
                c.send(None)
            except (OSError, ValueError):
                pass
        t_end = time.monotonic() + 5.0
        for p in self._procs:
            p.join(timeout=max(0.0, t_end - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
        for c in self._conns:
            c.close()
        for s in self._shm:
            s.close()
            try:
                s.unlink()
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------------------------------------
# decoder threads
# ---------------------------------------------------------------------------------------------
class DecoderThreads:
    """``ds.load_image`` on ``workers`` threads (one where the dataset does not allow parallel
    loads; ``workers=0``: in the calling thread, at ``submit``)."""

    kind = "threads"

    def __init__(self, ds: Dataset, workers: int, capacity: int):
        self.ds = ds
        workers = max(0, int(workers))
        self.workers = workers if getattr(ds, "parallel_loads", False) else min(1, workers)
        self.capacity = max(1, int(capacity))
        self._times: list[float] = []      # appended from the threads (atomic)
        self._pool = (ThreadPoolExecutor(self.workers, thread_name_prefix="vilib_ros-decode")
                      if self.workers else None)

    @property
    def decode_s(self) -> float:
        return float(sum(self._times))

    @property
    def jobs(self) -> int:
        return len(self._times)

    @property
    def busy_s(self) -> float:
        return self.decode_s / max(1, self.workers)

    def describe(self) -> str:
        if not self.workers:
            return "the reading thread"
        return f"{self.workers} decoder thread{'s' if self.workers > 1 else ''}"

    def _load(self, job) -> list:
        t0 = time.perf_counter()
        out = []
        try:
            for cam, index in job:
                try:
                    out.append(self.ds.load_image(cam, index))
                except FrameError as exc:
                    out.append(exc)
        finally:
            self._times.append(time.perf_counter() - t0)
        return out

    def submit(self, job):
        if self._pool is not None:
            return self._pool.submit(self._load, job)
        f: Future = Future()
        try:
            f.set_result(self._load(job))
        except Exception as exc:  # noqa: BLE001 - raised by result(), as from a thread
            f.set_exception(exc)
        return f

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Threads start at once."""

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def open_decoders(ds: Dataset, cameras, per_job: int = 1, workers: int | None = None, capacity: int = 16,
                  kind: str = "auto"):
    """The decoders for ``ds``'s images of ``cameras``, jobs of ``per_job`` images, at most
    ``capacity`` ahead. ``kind``: "processes" gives :class:`DecoderProcesses` where the images are
    plain files of known size (an ASL folder, on a system with POSIX shared memory), "threads"
    :class:`DecoderThreads`, "auto" processes where they can be had and this machine has
    :data:`MIN_CPUS_FOR_PROCESSES` CPUs or more, else threads. ``workers`` decoders (None:
    :func:`default_workers` of the kind); 0: in the calling thread (threads only)."""
    from .asl import AslDataset

    if kind not in KINDS:
        raise ValueError(f"decoders must be one of {', '.join(KINDS)}; got {kind!r}")
    cameras = tuple(cameras)
    files = (type(ds) is AslDataset and os.name == "posix" and workers != 0
             and all(ds.image_size(c) is not None for c in cameras))
    if files and (kind == "processes" or (kind == "auto" and cpus() >= MIN_CPUS_FOR_PROCESSES)):
        return DecoderProcesses(ds, cameras, per_job, default_workers(True) if workers is None else workers,
                                capacity)
    return DecoderThreads(ds, default_workers(False) if workers is None else workers, capacity)
