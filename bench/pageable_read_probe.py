"""Can the GPU read the caller's pageable frame itself, instead of the host copying it first?

``process()`` copies every pageable frame (a ROS image's buffer) into a page-locked slot that the
pyramid kernel reads over PCIe: 43-56 us of a ~130 us mono frame on the H100/H200 hosts, the largest
host step left (issue 10). Two ways to skip the copy, each timed here against it on the same frames:

* **the GPU reads pageable memory directly** (``cudaDevAttrPageableMemoryAccess``: HMM on x86 with
  the open kernel modules, or ATS): the kernel dereferences the NumPy array's own pointer;
* **the frame's pages registered for the frame** (``cudaHostRegister`` ... ``cudaHostUnregister``),
  the kernel reading them through their device address.

Every variant does the same per frame: a fresh frame (one of the 95 real EuRoC frames copied into a
new NumPy array, as a message's deserialisation writes it; not timed), then what reaches the GPU
(timed: host work + a kernel that reads all 752x480 bytes + the wait for it). The kernel sums the
frame's bytes into one word per block; each variant's sums are checked against NumPy's, so a variant
that reads stale or wrong bytes fails loudly instead of looking fast.

Usage (GPU machine): ``python3 bench/pageable_read_probe.py [--n 400] [--out DIR]``; prints the
device's attributes and a table, writes ``pageable_read_probe.json``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vilib_ros.bench.tracker import load_frames  # noqa: E402

# Thread mapping: one thread per 16 bytes of the frame (uint4 loads, coalesced), a block of 256
# threads sums its 4 KB into one word (warp shuffles, then shared memory).
_SRC = r"""
extern "C" __global__ void read_sum(const uint4* __restrict__ src, int n16, unsigned int* __restrict__ out)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int s = 0;
    if (i < n16) {
        const uint4 v = src[i];
        const unsigned int w[4] = {v.x, v.y, v.z, v.w};
        #pragma unroll
        for (int k = 0; k < 4; ++k)
            s += (w[k] & 255u) + ((w[k] >> 8) & 255u) + ((w[k] >> 16) & 255u) + (w[k] >> 24);
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    __shared__ unsigned int part[8];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int t = 0;
        for (int k = 0; k < (int)(blockDim.x >> 5); ++k) t += part[k];
        out[blockIdx.x] = t;
    }
}
"""

ATTRS = {  # cudaDeviceAttr numbers (CUDA runtime API)
    "pageableMemoryAccess": 88,
    "concurrentManagedAccess": 89,
    "canUseHostPointerForRegisteredMem": 91,
    "pageableMemoryAccessUsesHostPageTables": 100,
    "hostRegisterSupported": 99,
    "hostRegisterReadOnlySupported": 113,
}


def main():
    import cupy as cp
    from cupy.cuda import runtime

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--n", type=int, default=400)
    a = ap.parse_args()
    frames = load_frames(os.environ.get("VILIB_ROS_EUROC", ".data/euroc_v101_head"))
    h, w = frames[0].shape
    nbytes = h * w
    assert nbytes % 16 == 0
    n16 = nbytes // 16
    threads = 256
    blocks = -(-n16 // threads)
    dev = cp.cuda.Device()
    attrs = {}
    for k, v in ATTRS.items():
        try:
            attrs[k] = int(runtime.deviceGetAttribute(v, dev.id))
        except Exception as exc:                     # noqa: BLE001 - report what the runtime said
            attrs[k] = f"error: {exc}"
    try:
        drv = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except OSError:
        drv = "?"
    print("device", runtime.getDeviceProperties(dev.id)["name"].decode(), "|", drv)
    print("kernel", os.uname().release)
    for k, v in attrs.items():
        print(f"  {k}: {v}")

    k = cp.RawKernel(_SRC, "read_sum")
    out = cp.zeros(blocks, cp.uint32)
    out_h = np.zeros(blocks, np.uint32)
    stream = cp.cuda.Stream(non_blocking=True)
    pinned_mem = cp.cuda.alloc_pinned_memory(nbytes)
    slot = np.frombuffer(pinned_mem, np.uint8, nbytes).reshape(h, w)
    # unified addressing (canUseHostPointerForRegisteredMem): a page-locked or registered host
    # pointer is also its device address
    slot_dptr = slot.ctypes.data

    def launch(ptr):
        k((blocks,), (threads,), (np.uint64(ptr), np.int32(n16), out), stream=stream)   # a pointer: 8 bytes

    def check(img):
        out.get(stream=stream, out=out_h)
        stream.synchronize()
        return int(out_h.sum(dtype=np.uint64)) == int(img.sum(dtype=np.uint64))

    def v_copy(img):            # today's path: the host copies into the page-locked slot, the GPU reads it
        np.copyto(slot, img)
        launch(slot_dptr)
        stream.synchronize()

    def v_register(img):        # the frame's own pages registered for this frame
        ptr = img.ctypes.data
        runtime.hostRegister(ptr, nbytes, 2)                     # cudaHostRegisterMapped
        try:
            launch(ptr)
            stream.synchronize()
        finally:
            runtime.hostUnregister(ptr)

    def v_pageable(img):        # the GPU dereferences the pageable pointer (HMM / ATS)
        launch(img.ctypes.data)
        stream.synchronize()

    variants = {"copy into the page-locked slot (today)": v_copy,
                "cudaHostRegister of the frame, per frame": v_register}
    if attrs.get("pageableMemoryAccess") == 1:
        variants["GPU reads the pageable frame (HMM/ATS)"] = v_pageable
    res = {}
    order = list(variants)
    times = {n: [] for n in order}
    fresh = {n: [] for n in order}
    bad = {n: 0 for n in order}
    errors = {}
    for rnd in range(4):                            # chunks in turns, so the host's drift hits all alike
        for n in order if rnd % 2 == 0 else order[::-1]:
            if n in errors:
                continue
            f = variants[n]
            for i in range(a.n // 4):
                t_a = time.perf_counter_ns()
                img = frames[(i + rnd) % len(frames)].copy()      # the fresh message
                t_b = time.perf_counter_ns()
                try:
                    f(img)
                except Exception as exc:           # noqa: BLE001 - a refused variant is a result
                    errors[n] = repr(exc)
                    break
                t_c = time.perf_counter_ns()
                if not check(img):
                    bad[n] += 1
                times[n].append(t_c - t_b)
                fresh[n].append(t_b - t_a)
    print(f"\n{'variant':45s} {'p50 us':>8s} {'p90 us':>8s} {'fresh copy p50':>15s} {'wrong sums':>10s}")
    for n in order:
        if n in errors and not times[n]:
            print(f"{n:45s} refused: {errors[n]}")
            res[n] = {"error": errors[n]}
            continue
        t = np.asarray(times[n]) * 1e-3
        fr = np.asarray(fresh[n]) * 1e-3
        res[n] = {"p50_us": float(np.median(t)), "p90_us": float(np.percentile(t, 90)),
                  "fresh_copy_p50_us": float(np.median(fr)), "n": len(t), "wrong_sums": bad[n],
                  "error": errors.get(n)}
        print(f"{n:45s} {res[n]['p50_us']:8.1f} {res[n]['p90_us']:8.1f} {res[n]['fresh_copy_p50_us']:15.1f} "
              f"{bad[n]:10d}")
    doc = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "device": runtime.getDeviceProperties(dev.id)["name"].decode(), "driver": drv,
           "host_kernel": os.uname().release, "attributes": attrs,
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {w}x{h}, each copied into a new array before the "
                   "timed step", "variants": res}
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "pageable_read_probe.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
