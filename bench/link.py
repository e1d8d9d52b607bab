"""``python -m bench link``: the frame's way over PCIe, apart from the frontend.

What a frame costs the link before any kernel works on it, on this machine: host-to-device DMA
(``cudaMemcpyAsync`` from page-locked memory) and a kernel reading page-locked memory directly
(``read_words``, as ``pyramid_frame`` reads a frame with ``upload='mapped'``), timed by CUDA
events:

* by size (one 752x480 frame, four frames, 16 MB, 128 MB): what the link gives per transfer;
* one frame in 2, 4, 8 parts on as many streams (does splitting the upload help?);
* one frame by how recently the host wrote it: untouched since the last read, written just
  before from a source frame that cycles through 95 (cold in the caches: the benchmark's looped
  frames) or from a source written just before (hot: a ROS message just deserialised), into a
  plain and into a write-combined page-locked buffer; the host copy timed beside it.

Writes ``link_probe.json`` / ``.md`` into ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import sys

import numpy as np

H, W = 480, 752
FRAME = H * W


def configure_parser(p) -> None:
    p.add_argument("--out", default="bench/out", help="folder for link_probe.json / .md")
    p.add_argument("--reps", type=int, default=200, help="timed repetitions per row (after 20 warm-up ones)")


class _Probe:
    def __init__(self, reps: int):
        import cupy as cp

        from bench.kernels import bench_util
        from vilib_ros._cuda import pinned_buffer

        self.cp, self.rt, self.reps = cp, cp.cuda.runtime, max(10, int(reps))
        self.keep: list = []
        self.big = pinned_buffer(128 << 20, self.keep)
        self.big[:] = 7
        self.dev = cp.empty(128 << 20, cp.uint8)
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(8)]
        self.ev = [cp.cuda.Event() for _ in range(10)]
        self.read = bench_util().get_function("read_words")
        self.plain = pinned_buffer(FRAME, self.keep).reshape(H, W)
        self.wc = pinned_buffer(FRAME, self.keep, write_combined=True).reshape(H, W)
        rng = np.random.default_rng(0)
        self.frames = [rng.integers(0, 255, (H, W), np.uint8) for _ in range(95)]

    def _time(self, enqueue, reps: int, before=None) -> dict:
        """GPU time of ``enqueue(stream)`` (events around it), ``before(r)`` run on the host first."""
        s0, e0, e1 = self.streams[0], self.ev[0], self.ev[1]
        gpu, host = [], []
        for r in range(reps + 20):
            h = before(r) if before is not None else None
            e0.record(s0)
            enqueue(s0)
            e1.record(s0)
            e1.synchronize()
            if r >= 20:
                gpu.append(self.cp.cuda.get_elapsed_time(e0, e1) * 1e3)
                if h is not None:
                    host.append(h)
        out = {"gpu_p50_us": float(np.median(gpu)), "gpu_p90_us": float(np.percentile(gpu, 90))}
        if host:
            out["host_copy_p50_us"] = float(np.median(host))
        return out

    def dma(self, nbytes: int, host_ptr: int | None = None, parts: int = 1):
        rt, hp, dp = self.rt, self.big.ctypes.data if host_ptr is None else host_ptr, self.dev.data.ptr
        chunk = nbytes // parts

        def enqueue(s0):
            for p in range(parts):
                st = self.streams[p]
                if p:
                    st.wait_event(self.ev[0])
                rt.memcpyAsync(dp + p * chunk, hp + p * chunk, chunk, rt.memcpyHostToDevice, st.ptr)
                if p:
                    self.ev[1 + p].record(st)
            for p in range(1, parts):
                s0.wait_event(self.ev[1 + p])
        return enqueue

    def mapped(self, nbytes: int, host_ptr: int | None = None):
        from vilib_ros._cuda import host_device_pointer

        src = host_device_pointer(self.big.ctypes.data if host_ptr is None else host_ptr)
        n = nbytes // 16

        def enqueue(s0):
            self.read(((n + 255) // 256,), (256,), (src, self.dev, np.int32(n)), stream=s0)
        return enqueue

    def writer(self, dst: np.ndarray, source: str):
        import time

        frames = self.frames

        def before(r):
            f = frames[r % len(frames)]
            if source == "hot":
                f[0, 0] = r & 255
                np.bitwise_xor(f, 0, out=f)          # the whole source written just before
            t = time.perf_counter()
            np.copyto(dst, f)
            return (time.perf_counter() - t) * 1e6
        return before if source != "none" else None


def run_command(args) -> int:
    from vilib_ros._cuda import device_name, resolve_device
    from bench.results import machine, write_results

    if resolve_device("auto") != "cuda":
        print("python -m bench link: needs a CUDA device (CuPy with a GPU)", file=sys.stderr)
        return 2
    pr = _Probe(args.reps)
    rows = []

    def row(what, enqueue, before=None, reps=None):
        r = {"what": what, **pr._time(enqueue, reps or pr.reps, before)}
        rows.append(r)
        print(f"bench-link: {what}: {r['gpu_p50_us']:.1f} us", file=sys.stderr, flush=True)

    for nbytes, name in ((FRAME, "one frame (360,960 B)"), (4 * FRAME, "four frames"), (16 << 20, "16 MB"),
                         (128 << 20, "128 MB")):
        reps = 20 if nbytes > (16 << 20) else None
        row(f"DMA, {name}, untouched", pr.dma(nbytes), reps=reps)
        if nbytes <= (16 << 20):
            row(f"kernel reads mapped memory, {name}, untouched", pr.mapped(nbytes))
    for parts in (2, 4, 8):
        row(f"DMA, one frame in {parts} parts on {parts} streams", pr.dma(FRAME // 64 * 64, parts=parts))
    for label, buf in (("plain", pr.plain), ("write-combined", pr.wc)):
        for source in ("none", "cold", "hot"):
            when = {"none": "untouched", "cold": "written just before from a cold source",
                    "hot": "written just before from a hot source"}[source]
            before = pr.writer(buf, source)
            row(f"DMA, one frame, {label} buffer, {when}", pr.dma(FRAME, buf.ctypes.data), before)
            row(f"kernel reads mapped memory, one frame, {label} buffer, {when}", pr.mapped(FRAME, buf.ctypes.data),
                pr.writer(buf, source))
    for r in rows:
        if "untouched" in r["what"] and "parts" not in r["what"]:
            size = {"one frame": FRAME, "four frames": 4 * FRAME, "16 MB": 16 << 20, "128 MB": 128 << 20}
            nb = next(v for k, v in size.items() if k in r["what"])
            r["gb_per_s"] = nb / r["gpu_p50_us"] / 1e3
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "device": device_name(),
           "machine": machine(), "frame_bytes": FRAME, "reps": pr.reps, "rows": rows}
    md = ["# The frame's way over PCIe (`python -m bench link`)", "",
          f"- device: {res['device']}; host: {res['machine']['cpu']} ({res['machine']['cores']} cores); "
          f"date (UTC): {res['date']}; {pr.reps} timed repetitions per row (CUDA events)",
          "- data: random 752x480 uint8 frames (95, cycled); page-locked, device-mapped host buffers", "",
          "| transfer | GPU p50 us | GPU p90 us | GB/s | host copy p50 us |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        gb = f"{r['gb_per_s']:.1f}" if "gb_per_s" in r else ""
        hc = f"{r['host_copy_p50_us']:.1f}" if "host_copy_p50_us" in r else ""
        md.append(f"| {r['what']} | {r['gpu_p50_us']:.1f} | {r['gpu_p90_us']:.1f} | {gb} | {hc} |")
    write_results(args.out, "link_probe", res, "\n".join(md))
    return 0
