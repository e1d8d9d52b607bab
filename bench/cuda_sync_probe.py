"""Does the frontend's spinning CUDA synchronisation slow the backend beside it in the whole VIO?

On the H100 host of 2026-11-28 01:29-01:36 UTC the same backend work took 0.88-1.4 s from run to run
at the same CPU time (it ran slower, it did not wait for a core). A guess: the frontend's context spins a vCPU while the GPU works (CUDA's default scheduling
with few contexts), and that vCPU shares a physical core with the backend's. This script runs one
whole-VIO stereo run (``vilib_ros.bench.vio.run_mode``: the offline runner, then the backend alone on
its tracks) with the frontend's primary context left at the default (``spin``) or set to block on
synchronisation (``block``, ``CU_CTX_SCHED_BLOCKING_SYNC``) or to yield (``yield``) before the
context exists, and prints one ``RESULT`` line (frames/s, backend busy in the run and alone, the
frontend's busy time and per-frame times, the causal ATE).

Usage (GPU machine; run the arms in turns, each in a process of its own):
``for f in spin block block spin; do python3 bench/cuda_sync_probe.py $f; done``
The 60 s synthetic sequence is rendered into ``--cache`` (default /tmp/vio_cache) on first use.
Findings: ``bench/results/cuda_sync_probe_2026-11-28.md``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
from pathlib import Path

CU_CTX_SCHED = {"spin": None, "yield": 2, "block": 4}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=sorted(CU_CTX_SCHED))
    ap.add_argument("--cache", default="/tmp/vio_cache")
    ap.add_argument("--workers", type=int, default=0, help="render processes (default: CPU count)")
    args = ap.parse_args()
    flags = CU_CTX_SCHED[args.mode]
    cu = None
    if flags is not None:
        cu = ctypes.CDLL("libcuda.so.1")
        if cu.cuInit(0) != 0 or cu.cuDevicePrimaryCtxSetFlags(0, flags) != 0:
            raise SystemExit("cannot set the primary context's scheduling flags")
    import os

    from vilib_ros.bench.accuracy import rendered
    from vilib_ros.bench.vio import run_mode
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SequenceConfig

    path = rendered(SequenceConfig(duration_s=60.0, seed=0, name="synthetic60"), Path(args.cache),
                    args.workers or os.cpu_count())
    r = run_mode(open_dataset(path), "cuda", "stereo")
    out = {"mode": args.mode, "frames_per_s": r["frames_per_s"], "backend_busy_s": r["backend_busy_s"],
           "backend_alone_busy_s": r["backend_alone"]["busy_s"], "frontend_busy_s": r["frontend_busy_s"],
           "frontend": r["frontend"], "ate_causal_m": r["ate_causal_m"]}
    if cu is not None:
        f, active = ctypes.c_uint(0), ctypes.c_int(0)
        cu.cuDevicePrimaryCtxGetState(0, ctypes.byref(f), ctypes.byref(active))
        out["context_flags"] = f.value          # what the context ran with
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
