"""The streamed upload (``vilib_ros.frontend.gpu.streamed_upload``) against copying first, and why its
tile flags each have their own line.

On the GPU machine, in one process, variants in turn (``interleaved``) so that they share the
host's minutes:

* the flag poll alone (``bench/kernels/bench_util.cu`` ``poll_flags``): 90 blocks (the pyramid tiles of
  a 752x480 frame) each make one strong system-scope load of page-locked memory: all of one
  word, one word per band of tiles (4 bands), or one 128-byte line each; CUDA events, median;
* the pyramid kernel alone (events), its flags already released (``streamed``) or not armed
  (``mapped``);
* ``process()`` from pageable frames, mono and stereo, frames looped (34 MB: the host's caches
  cold) and written just before (a fresh message), ``upload='streamed'`` against ``'mapped'``;
* ``GpuFastDetector.detect()`` from pageable frames, the same two uploads.

Usage: ``python3 bench/streamed_upload_probe.py [--frames-dir DIR] [--out DIR] [--n 100] [--rounds 10]``;
prints a table and writes ``streamed_upload_probe.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _p50(v) -> float:
    return float(np.median(np.asarray(v, float)))


def poll_cost(reps: int = 300) -> dict:
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros._cuda import host_device_pointer, pinned_buffer

    k = bench_util().get_function("poll_flags")
    keep: list = []
    flags = pinned_buffer(91 * 128, keep)
    dev = np.uint64(host_device_pointer(flags.ctypes.data))
    out = cp.zeros(90, cp.uint32)
    s = cp.cuda.Stream(non_blocking=True)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    res = {}
    for name, stride, share in (("one word, 90 blocks", 0, 90), ("one line per band (4)", 32, 23),
                                ("one line per tile", 32, 1), ("none (1 block)", 0, 90)):
        blocks = 1 if name.startswith("none") else 90
        ts = []
        for r in range(reps):
            e0.record(s)
            k((blocks, 1, 1), (32, 1, 1), (dev, np.int32(stride), np.int32(share), out), stream=s)
            e1.record(s)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        res[name] = _p50(ts[20:])
    return res


def pyramid_cost(ft, frame, reps: int = 300) -> dict:
    import cupy as cp

    from vilib_ros.frontend.gpu.streamed_upload import StreamedUpload

    p = ft.pipeline
    s = 1
    p._prm_u64[s, 0] = p._img_dev[0][0]
    res = {}
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    for armed in (False, True):
        if armed:
            p._streamer.arm(p._prm_u8[s])
            p._streamer.fill(p._img[0][0], frame)
        else:
            StreamedUpload.disarm(p._prm_u8[s])
            np.copyto(p._img[0][0], frame)
        ts = []
        for r in range(reps):
            e0.record(p.stream)
            p.k.enqueue_upload(s, False, p._prm_dev[s], p.stream, False)
            e1.record(p.stream)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        res["streamed, flags released" if armed else "mapped (not armed)"] = _p50(ts[20:])
    return res


def main(argv=None) -> int:
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import _stats, _tracker, interleaved, process_times
    from vilib_ros.bench.tracker import default_frames_dir, load_frames

    from vilib_ros.frontend.config import DetectorConfig
    from vilib_ros.frontend.gpu.detector import GpuFastDetector

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=default_frames_dir())
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--n", type=int, default=100, help="calls per variant and round")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args(argv)
    frames = load_frames(a.frames_dir)
    W, H = frames[0].shape[1], frames[0].shape[0]
    res = {"device": device_name(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "host": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {W}x{H}, looped", "calls": a.n * a.rounds}
    res["poll_us"] = poll_cost()
    ups = ("streamed", "mapped")
    fts, sts, dets = {}, {}, {}
    for up in ups:
        fts[up], _ = _tracker("cuda")
        fts[up].pipeline.upload = up
        process_times(fts[up], frames, 50)
        sts[up], right = _tracker("cuda", stereo=True, frames=frames)
        sts[up].pipeline.upload = up
        process_times(sts[up], frames, 50, right=right)
        dets[up] = GpuFastDetector(W, H, DetectorConfig(), upload=up)
    res["pyramid_kernel_us"] = pyramid_cost(fts["mapped"], frames[3])

    def det_times(d, n):
        out = []
        for i in range(n):
            t0 = time.perf_counter()
            d.detect(frames[i % len(frames)])
            out.append(time.perf_counter() - t0)
        return out

    runs = {}
    for up in ups:
        runs[f"mono {up}"] = lambda up=up: process_times(fts[up], frames, a.n)[0]
        runs[f"mono {up}, fresh"] = lambda up=up: process_times(fts[up], frames, a.n, fresh=True)[0]
        runs[f"stereo {up}"] = lambda up=up: process_times(sts[up], frames, a.n, right=right)[0]
        runs[f"stereo {up}, fresh"] = lambda up=up: process_times(sts[up], frames, a.n, right=right, fresh=True)[0]
        runs[f"detect {up}"] = lambda up=up: det_times(dets[up], a.n)
    lat = interleaved(runs, a.rounds)
    res["latency"] = {k: _stats(v) for k, v in lat.items()}
    res["timeouts"] = {up: int(fts[up].stats["upload_timeouts"] + sts[up].stats["upload_timeouts"]
                               + dets[up]._streamer.timeouts) for up in ups}
    lines = [f"## Streamed upload against copying first ({res['device']}, {res['date']})", "",
             f"{res['data']}; {res['calls']} calls per row, variants in turn; {res['host']}.", "",
             "| flag poll, 90 blocks (one strong sys-scope load each) | us (median) |", "|---|---:|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in res["poll_us"].items()]
    lines += ["", "| pyramid kernel alone | us (median) |", "|---|---:|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in res["pyramid_kernel_us"].items()]
    lines += ["", "| call | p50 us | p90 us | p99 us |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {v['p50_us']:.1f} | {v['p90_us']:.1f} | {v['p99_us']:.1f} |" for k, v in res["latency"].items()]
    lines += ["", f"Frames whose pyramid gave up waiting (1 s): {res['timeouts']}."]
    md = "\n".join(lines) + "\n"
    print(md)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "streamed_upload_probe.json").write_text(json.dumps(res, indent=1))
    (out / "streamed_upload_probe.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
