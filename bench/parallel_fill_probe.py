"""Would copying the streamed frame with two host threads shorten ``process()`` (issue 10)? In a
streamed upload the host copies the pageable frame band by band into page-locked memory while the
pyramid kernel waits for each band (``streamed_upload.py``); cProfile puts ~42 us per frame in that
copy on an H200 host, and the pyramid cannot finish before the last band is there.

Variants of ``StreamedUpload.fill``, mono ``process()`` on the real EuRoC frames, alternating chunks:
* ``today``: one thread, ``np.copyto`` band by band;
* ``memmove``: one thread, ``ctypes.memmove`` band by band (the same copy through libc);
* ``two threads``: a persistent worker (a ``queue.SimpleQueue`` wakes it) copies the second half of
  the bands with ``ctypes.memmove`` (the GIL released) while the calling thread copies the first
  half; each sets its bands' flags, the caller waits for the worker.
Also each variant's fill time alone (timed by the pipeline's tracer, ``HostTracer.copy_ns``). A
probe: none of this is in the package.
Writes ``parallel_fill_probe.json`` / ``.md`` to ``--out``.

    python3 bench/parallel_fill_probe.py --frames-dir .data/euroc_v101_head --out bench/out
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import queue
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def memmove_fill(self, staging, image):
    value = self._value
    for (y0, y1), flags in zip(self.bounds, self._band_flags):
        ctypes.memmove(staging[y0:y1].ctypes.data, image[y0:y1].ctypes.data, (y1 - y0) * image.shape[1])
        flags[:] = value


class TwoThreads:
    def __init__(self):
        self.jobs, self.done = queue.SimpleQueue(), queue.SimpleQueue()
        threading.Thread(target=self._work, daemon=True).start()

    def _work(self):
        while True:
            job = self.jobs.get()
            for dst, src, nbytes, flags, value in job:
                ctypes.memmove(dst, src, nbytes)
                flags[:] = value
            self.done.put(None)

    def fill(self, up, staging, image):
        value = up._value
        w = image.shape[1]
        bands = list(zip(up.bounds, up._band_flags))
        half = (len(bands) + 1) // 2
        self.jobs.put([(staging[y0:y1].ctypes.data, image[y0:y1].ctypes.data, (y1 - y0) * w, f, value)
                       for (y0, y1), f in bands[half:]])
        for (y0, y1), f in bands[:half]:
            ctypes.memmove(staging[y0:y1].ctypes.data, image[y0:y1].ctypes.data, (y1 - y0) * w)
            f[:] = value
        self.done.get()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=".data/euroc_v101_head")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--chunk", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import HostTracer, _stamp, _tracker
    from vilib_ros.bench.tracker import load_frames
    from vilib_ros.frontend.gpu.streamed_upload import StreamedUpload

    frames = [np.ascontiguousarray(f) for f in load_frames(args.frames_dir)]
    today = StreamedUpload.fill
    two = TwoThreads()
    variants = {"today": today, "memmove": memmove_fill,
                "two threads": lambda self, staging, image: two.fill(self, staging, image)}
    ft, _ = _tracker("cuda", frames=frames)
    for k in range(60):
        ft.process(frames[k % len(frames)], _stamp())
    lat = {n: [] for n in variants}
    fill = {n: [] for n in variants}
    ids = {}
    k = 0
    tr = ft.pipeline.tracer = HostTracer(steps=False)
    for r in range(args.rounds):
        for name, fn in variants.items():
            StreamedUpload.fill = fn
            for _ in range(args.chunk):
                f = frames[k % len(frames)]
                k += 1
                t0 = time.perf_counter()
                ft.process(f, _stamp())
                lat[name].append((time.perf_counter() - t0) * 1e6)
                fill[name].append(tr.copy_ns * 1e-3)
    for name, fn in variants.items():              # the same tracks with each
        StreamedUpload.fill = fn
        ft.reset()
        ids[name] = [ft.process(f, _stamp()).xy.copy() for f in frames[:30]]
    StreamedUpload.fill = today
    same = {n: all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ids["today"], v)) for n, v in ids.items()}
    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "variants": {n: {"process_p50_us": float(np.median(lat[n])), "process_p99_us": float(np.percentile(lat[n], 99)),
                            "fill_p50_us": float(np.median(fill[n])), "same_tracks": same[n]} for n in variants}}
    print(json.dumps(res, indent=1))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "parallel_fill_probe.json").write_text(json.dumps(res, indent=1))
    L = [f"# The streamed copy by one or two host threads ({res['date']})", "",
         f"Machine: {res['device']}; 95 real EuRoC V1_01 frames, looped; mono `process()`, {args.rounds} rounds of "
         f"{args.chunk} calls per variant in turns.", "",
         "| variant | process p50 us | p99 us | fill p50 us | same tracks |", "|---|---:|---:|---:|---|"]
    for n, v in res["variants"].items():
        L.append(f"| {n} | {v['process_p50_us']:.1f} | {v['process_p99_us']:.1f} | {v['fill_p50_us']:.1f} | "
                 f"{v['same_tracks']} |")
    (out / "parallel_fill_probe.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
