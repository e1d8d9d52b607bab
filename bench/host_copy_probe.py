"""Why the host copy of a frame costs more inside ``process()`` than alone: each hypothesis measured.

The frontend's one host copy per frame (a pageable 752x480 frame into its page-locked, device-mapped
staging slot) took 39 us inside ``process()`` and 15 us alone in the same benchmark call. This script
times the same copy (``np.copyto``, median / p90 of ``N`` copies, perf_counter_ns) under each
condition that differs between the two, in one process on the GPU machine:

* the source: the 95 real frames cycled (34 MB, beyond the host's caches: what the benchmarks
  do), one frame again and again (hot), a buffer written just before the copy (what a ROS message
  that was just deserialised gives), the sources in transparent huge pages, misaligned sources;
* the destination: one slot, 4 slots in turn (the staging ring), a slot the GPU has just read
  through its mapped address (what the pyramid kernel does every frame), a slot after 64 MB of
  other writes (evicted), a write-combined slot (``cudaHostAllocWriteCombined``);
* what comes between copies: a ~100 us GPU wait (spin kernel + event synchronize);
* the copy itself: ``np.copyto`` against ``ctypes.memmove``; glibc's non-temporal store
  threshold lowered below the frame size (``GLIBC_TUNABLES``, a second process);
* ``process()`` itself: its "source" step (``GpuPipeline.tracer`` marks) with cycled, hot and
  just-written frames.

Usage (GPU machine): ``python3 bench/host_copy_probe.py [--out DIR] [--n 400]``; prints a table,
writes ``host_copy_probe.json`` (and ``host_copy_probe_nt.json`` from the child process).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NT_TUNABLE = "glibc.cpu.x86_non_temporal_threshold=0x10000"
_ns = time.perf_counter_ns


def load_frames():
    import cv2

    root = Path(os.environ.get("VILIB_ROS_EUROC", ".data/euroc_v101_head")) / "mav0/cam0/data"
    return [cv2.imread(str(p), 0) for p in sorted(root.glob("*.png"))]


def stats(ts):
    a = np.asarray(ts, np.float64) * 1e-3
    return {"p50_us": round(float(np.median(a)), 2), "p90_us": round(float(np.percentile(a, 90)), 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--child", action="store_true", help="the second process (non-temporal tunable set)")
    a = ap.parse_args()
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros._cuda import device_name, host_device_pointer, pinned_buffer

    frames = load_frames()
    nf, shape, size = len(frames), frames[0].shape, frames[0].size
    N = a.n
    keep = []
    dst = pinned_buffer(size, keep).reshape(shape)
    ring = [pinned_buffer(size, keep).reshape(shape) for _ in range(4)]
    rt = cp.cuda.runtime
    wc_mem = cp.cuda.PinnedMemory(size, rt.hostAllocPortable | rt.hostAllocMapped | rt.hostAllocWriteCombined)
    keep.append(wc_mem)
    wc = np.frombuffer(cp.cuda.PinnedMemoryPointer(wc_mem, 0), np.uint8, size).reshape(shape)
    dst_dev = host_device_pointer(dst.ctypes.data)
    msg = np.empty(shape, np.uint8)
    # all frames in one transparent-huge-page mapping
    mm = mmap.mmap(-1, nf * size + (2 << 20))
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        mm.madvise(mmap.MADV_HUGEPAGE)
    big = np.frombuffer(mm, np.uint8)
    huge = [big[k * size:(k + 1) * size].reshape(shape) for k in range(nf)]
    for h, f in zip(huge, frames):
        h[...] = f
    # misaligned sources: frame data starting 1 and 64 bytes past a page boundary
    raw = np.empty(nf * (size + 4096) + 8192, np.uint8)
    base = (-raw.ctypes.data) % 4096

    def at(off):
        out = []
        for k in range(nf):
            o = base + k * (size + 4096) + off
            v = raw[o:o + size].reshape(shape)
            v[...] = frames[k]
            out.append(v)
        return out

    src_page, src_64, src_1 = at(0), at(64), at(1)
    evict = np.ones(64 << 20, np.uint8)
    spin = bench_util().get_function("gpu_spin")
    reader = cp.RawKernel(r"""
extern "C" __global__ void read_mapped(unsigned long long addr, int n, unsigned int* sink) {
    // one thread per 16 bytes of the page-locked frame, read through its mapped address (as the pyramid kernel does)
    const uint4* p = (const uint4*)addr;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n / 16) { uint4 v = p[i]; if ((v.x ^ v.y ^ v.z ^ v.w) == 0x12345678u) atomicAdd(sink, 1u); }
}""", "read_mapped")
    sink = cp.zeros(1, cp.uint32)
    st = cp.cuda.Stream(non_blocking=True)
    ev = cp.cuda.Event(disable_timing=True)
    cycles = int(os.environ.get("PROBE_SPIN_CYCLES", 190_000))      # ~100 us at ~1.9 GHz

    def gpu_read():
        reader(((size // 16 + 255) // 256,), (256,), (np.uint64(dst_dev), np.int32(size), sink), stream=st)
        ev.record(st)
        ev.synchronize()

    def gpu_wait():
        spin((1, 1, 1), (1, 1, 1), (np.int64(cycles),), stream=st)
        ev.record(st)
        ev.synchronize()

    def evict_all():
        evict[::64] += 1

    def fresh(k):                           # a message buffer written just before the copy
        np.copyto(msg, frames[k % nf])
        return msg

    def copy_case(pick_src, pick_dst, before=None, fn=np.copyto):
        ts = []
        for k in range(N + 20):
            if before is not None:
                before()
            s, d = pick_src(k), pick_dst(k)
            t0 = _ns()
            fn(d, s)
            t1 = _ns()
            if k >= 20:
                ts.append(t1 - t0)
        return stats(ts)

    def memmove(d, s):
        ctypes.memmove(d.ctypes.data, s.ctypes.data, s.size)

    cold = lambda k: frames[k % nf]           # noqa: E731
    hot = lambda k: frames[0]                 # noqa: E731
    one = lambda k: dst                       # noqa: E731
    res = {"device": device_name(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""), "n": N, "frames": nf,
           "frame_bytes": int(size), "host_cpus": os.cpu_count()}
    try:
        res["thp"] = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        pass
    cases = res["copy"] = {}
    order = [
        ("cold src, one dst, back to back (the benchmark's 'copyto_cold')", lambda: copy_case(cold, one)),
        ("hot src (one frame again), one dst", lambda: copy_case(hot, one)),
        ("src written just before (a fresh ROS message), one dst", lambda: copy_case(fresh, one)),
        ("cold src, 4 dst slots in turn", lambda: copy_case(cold, lambda k: ring[k % 4])),
        ("cold src, dst just read by the GPU (mapped)", lambda: copy_case(cold, one, gpu_read)),
        ("fresh src, dst just read by the GPU (mapped)", lambda: copy_case(fresh, one, gpu_read)),
        ("cold src, after a 100 us GPU wait (dst not read)", lambda: copy_case(cold, one, gpu_wait)),
        ("cold src, dst evicted (64 MB written before)", lambda: copy_case(cold, one, evict_all)),
        ("cold src, write-combined dst", lambda: copy_case(cold, lambda k: wc)),
        ("fresh src, write-combined dst", lambda: copy_case(fresh, lambda k: wc)),
        ("cold src, memmove", lambda: copy_case(cold, one, fn=memmove)),
        ("cold src, memmove, dst just read by the GPU", lambda: copy_case(cold, one, gpu_read, fn=memmove)),
        ("cold src in huge pages, one dst", lambda: copy_case(lambda k: huge[k % nf], one)),
        ("cold src page-aligned", lambda: copy_case(lambda k: src_page[k % nf], one)),
        ("cold src at page + 64", lambda: copy_case(lambda k: src_64[k % nf], one)),
        ("cold src at page + 1", lambda: copy_case(lambda k: src_1[k % nf], one)),
        ("cold src, one dst, back to back (again, last)", lambda: copy_case(cold, one)),
    ]
    for name, fn in order:
        cases[name] = fn()
        print(f"{name:66s} {cases[name]['p50_us']:7.2f} / {cases[name]['p90_us']:7.2f} us", flush=True)
    # process() itself: the "source" step (the copy + slot and parameter writes) and the whole call
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.bench.frontend import HostTracer
    from vilib_ros.frontend.gpu.pipeline import STEPS

    ft = FeatureTracker(euroc_cam0(), FrontendConfig(), device="cuda")
    p = ft.pipeline
    pr = res["process"] = {}
    stamp = [10**12]

    def proc_case(pick, label):
        p.tracer = HostTracer()
        marks = p.tracer.marks
        src_t, tot = [], []
        try:
            for k in range(N + 30):
                img = pick(k)
                marks.clear()
                stamp[0] += 50_000_000
                t0 = _ns()
                ft.process(img, stamp[0])
                t1 = _ns()
                if k >= 30 and len(marks) == len(STEPS) - 1:
                    src_t.append(marks[1] - marks[0])
                    tot.append(t1 - t0)
        finally:
            p.tracer = None
        pr[label] = {"source_step": stats(src_t), "process": stats(tot)}
        print(f"process() {label:56s} source {pr[label]['source_step']['p50_us']:7.2f} us, "
              f"whole {pr[label]['process']['p50_us']:7.2f} us", flush=True)

    proc_case(cold, "cold frames (the benchmark)")
    proc_case(fresh, "frame written just before (a fresh ROS message)")
    proc_case(hot, "one frame again (hot)")
    proc_case(cold, "cold frames (again, last)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("host_copy_probe_nt.json" if a.child else "host_copy_probe.json")).write_text(json.dumps(res, indent=1))
    if not a.child and "GLIBC_TUNABLES" not in os.environ:
        print(f"--- the same in a child process with GLIBC_TUNABLES={NT_TUNABLE} (non-temporal stores)", flush=True)
        env = dict(os.environ, GLIBC_TUNABLES=NT_TUNABLE)
        subprocess.run([sys.executable, __file__, "--child", "--out", a.out, "--n", str(N)], env=env, check=False)


if __name__ == "__main__":
    main()
