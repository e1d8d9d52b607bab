"""Is the tail of a synchronous ``process()`` (p99 - p50: 29-38 us in the per-frame tables of
2026-11-28) Python's cyclic garbage collector? Issue 10's target is p99 <= 150 us.

Mono ``process()`` on the real EuRoC frames (pageable, looped), in alternating chunks: the collector
as it is, disabled (``gc.disable()``), and with the start-up objects frozen (``gc.freeze()``, as the
nodes do). Also counts the GC-tracked allocations one ``process()`` leaves to generation 0 and the
collections (and their durations, ``gc.callbacks``) during the enabled chunks. Writes
``gc_tail_probe.json`` / ``.md`` into ``--out``.

    python3 bench/gc_tail_probe.py --frames-dir .data/euroc_v101_head --out bench/out
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=".data/euroc_v101_head")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--chunk", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import _stamp, _tracker
    from vilib_ros.bench.tracker import load_frames

    frames = load_frames(args.frames_dir)
    ft, _ = _tracker("cuda")
    assert ft.device == "cuda"
    for k in range(100):
        ft.process(frames[k % len(frames)], _stamp())
    gc.collect()
    coll = []                                   # (generation, seconds) of the collections in enabled chunks
    t_start = {}

    def cb(phase, info):
        if phase == "start":
            t_start["t"] = time.perf_counter()
        else:
            coll.append((info["generation"], time.perf_counter() - t_start.get("t", time.perf_counter())))

    lat = {"gc as it is": [], "gc disabled": [], "gc frozen": []}
    allocs = []
    k = 0
    for _ in range(args.rounds):
        for name in lat:
            if name == "gc disabled":
                gc.disable()
            else:
                gc.enable()
                if name == "gc frozen":
                    gc.freeze()
                else:
                    gc.unfreeze()
                gc.callbacks.append(cb)
            for _ in range(args.chunk):
                img = frames[k % len(frames)]
                k += 1
                c0 = gc.get_count()[0]
                t0 = time.perf_counter()
                ft.process(img, _stamp())
                t1 = time.perf_counter()
                lat[name].append(t1 - t0)
                if name == "gc disabled":
                    allocs.append(gc.get_count()[0] - c0)
            if cb in gc.callbacks:
                gc.callbacks.remove(cb)
            gc.enable()
    gc.unfreeze()

    def st(v):
        v = np.asarray(v) * 1e6
        return {"p50_us": float(np.percentile(v, 50)), "p90_us": float(np.percentile(v, 90)),
                "p99_us": float(np.percentile(v, 99)), "max_us": float(v.max()), "n": int(v.size)}

    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "device": device_name(),
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames, looped, pageable, mono process()",
           "variants": {n: st(v) for n, v in lat.items()},
           "gc_tracked_allocations_per_process": float(np.median(allocs)) if allocs else None,
           "collections_in_enabled_chunks": {str(g): {"n": sum(1 for x, _ in coll if x == g),
                                                      "median_us": float(np.median([s for x, s in coll if x == g]) * 1e6)
                                                      if any(x == g for x, _ in coll) else None}
                                             for g in (0, 1, 2)},
           "frames_in_enabled_chunks": 2 * args.chunk * args.rounds}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gc_tail_probe.json").write_text(json.dumps(res, indent=1))
    md = ["# process() tail and the garbage collector (bench/gc_tail_probe.py)", "",
          f"- device: {res['device']}; date (UTC): {res['date']}; data: {res['data']}; chunks of {args.chunk} calls "
          f"in turns, {args.rounds} rounds", "",
          "| variant | p50 us | p90 us | p99 us | max us |", "|---|---:|---:|---:|---:|"]
    for n, s in res["variants"].items():
        md.append(f"| {n} | {s['p50_us']:.1f} | {s['p90_us']:.1f} | {s['p99_us']:.1f} | {s['max_us']:.1f} |")
    md += ["", f"GC-tracked allocations left in generation 0 per process(): {res['gc_tracked_allocations_per_process']}",
           f"collections during the {res['frames_in_enabled_chunks']} calls with the collector on: "
           + json.dumps(res["collections_in_enabled_chunks"])]
    (out / "gc_tail_probe.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
