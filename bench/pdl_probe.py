"""Programmatic dependent launch (issue 10): does letting each kernel of the frame's graph be
scheduled while the one before it still runs shorten the frame?

The frame is a chain of ~10 dependent kernels (pyramid, LK with the check, three RANSAC kernels,
table, gated CRF and NMS, finalize, template extraction), several of them one block. Each edge of
the chain costs a launch latency on top of the kernels' work. With ``VILIB_ROS_PDL=1`` every
launch carries the programmatic-serialisation attribute and every kernel opens with
``PDL_ENTRY`` (``kernels/pdl.cuh``: wait for the predecessor, then let the next be scheduled).

Measured, with and without, in turns:
1. a chain of ``--links`` one-block kernels in one CUDA graph (``chain_step``: each records the
   value its predecessor wrote, so a launch that ran early would show): GPU time per graph;
2. the frontend: mono and stereo ``process()`` from pageable frames (p50 / p99), the GPU time of
   the frame's graph (queued behind a spin kernel), and the tracks of 95 frames against each
   other (they must be the same to the bit).

    python3 bench/pdl_probe.py --frames-dir .data/euroc_v101_head --out bench/out
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

MODES = {"pdl": "1", "no pdl": "0"}


def chain(links: int, repeats: int) -> dict:
    import cupy as cp

    from bench.kernels import bench_util
    from vilib_ros._cuda import launch
    from vilib_ros.bench.frontend import graph_times

    k = bench_util().get_function("chain_step")
    out = {}
    for name, env in MODES.items():
        os.environ["VILIB_ROS_PDL"] = env
        s = cp.cuda.Stream(non_blocking=True)
        x = cp.zeros(1, cp.int32)
        trace = cp.full(links, -1, cp.int32)
        s.begin_capture()
        for i in range(links):
            launch(k, (1, 1, 1), (128, 1, 1), (x, trace, np.int32(i)), stream=s, checked=False)
        g = s.end_capture()
        t = graph_times(g, s, repeats)
        s.synchronize()
        tr = trace.get()
        base = int(x.get()[0]) - links                  # the last replay's first value
        ok = bool(np.array_equal(tr, base + np.arange(links)))
        out[name] = {"graph_p50_us": float(np.median(t)) * 1e6, "graph_p90_us": float(np.percentile(t, 90)) * 1e6,
                     "per_link_us": float(np.median(t)) * 1e6 / links, "ordered": ok,
                     "replays": int(x.get()[0]) // links}
        print("chain", name, json.dumps(out[name]), flush=True)
    return out


def trackers(frames, stereo: bool) -> dict:
    from vilib_ros.bench.frontend import _stamp, _tracker

    fts = {}
    for name, env in MODES.items():
        os.environ["VILIB_ROS_PDL"] = env
        ft, right = _tracker("cuda", stereo=stereo, frames=frames)
        for k in range(60):                             # graphs captured here, with this setting
            kw = {"image_right": right[k % len(frames)]} if stereo else {}
            ft.process(frames[k % len(frames)], _stamp(), **kw)
        fts[name] = (ft, right)
    return fts


def same_tracks(fts, frames) -> dict:
    from vilib_ros.bench.frontend import _stamp

    runs = {}
    for name, (ft, right) in fts.items():
        ft.reset()
        rows = []
        for k, f in enumerate(frames):
            kw = {"image_right": right[k]} if right is not None else {}
            fr = ft.process(f, _stamp(), **kw)
            rows.append((fr.ids.copy(), fr.xy.copy()))
        runs[name] = rows
    a, b = runs.values()
    same = all(np.array_equal(i0, i1) and np.array_equal(x0, x1, equal_nan=True) for (i0, x0), (i1, x1) in zip(a, b))
    return {"identical": bool(same), "tracks": int(sum(len(i) for i, _ in a))}


def latencies(fts, frames, chunk: int, rounds: int) -> dict:
    from vilib_ros.bench.frontend import _stamp

    lat = {name: [] for name in fts}
    k = 0
    for _ in range(rounds):
        for name, (ft, right) in fts.items():
            for _ in range(chunk):
                i = k % len(frames)
                kw = {"image_right": right[i]} if right is not None else {}
                k += 1
                t0 = time.perf_counter()
                ft.process(frames[i], _stamp(), **kw)
                lat[name].append((time.perf_counter() - t0) * 1e6)
    return {n: {"p50_us": float(np.median(v)), "p99_us": float(np.percentile(v, 99))} for n, v in lat.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=".data/euroc_v101_head")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--links", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import run_gpu_exec
    from vilib_ros.bench.tracker import load_frames

    frames = load_frames(args.frames_dir)
    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {frames[0].shape[1]}x{frames[0].shape[0]}, looped; "
                   "stereo: the right frame is the left one shifted by 8 px",
           "chain": chain(args.links, 2000)}
    for mode, stereo in (("mono", False), ("stereo", True)):
        fts = trackers(frames, stereo)
        row = {"process": latencies(fts, frames, args.chunk, args.rounds), "tracks_95_frames": same_tracks(fts, frames)}
        if not stereo:
            row["gpu_frame"] = {}
            for name, (ft, _) in fts.items():
                g = run_gpu_exec(ft, frames, 400)["exec"]
                row["gpu_frame"][name] = {"p50_us": g["p50_us"]}
        res[mode] = row
        print(mode, json.dumps(row), flush=True)
    os.environ["VILIB_ROS_PDL"] = "1"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pdl_probe.json").write_text(json.dumps(res, indent=1))
    c = res["chain"]
    lines = [f"# Programmatic dependent launch ({res['date']})", "",
             f"Machine: {res['device']}; data: {res['data']}; `process()` from pageable frames, {args.rounds} rounds "
             f"of {args.chunk} calls per variant in turns.", "",
             "| | pdl | no pdl |", "|---|---:|---:|",
             f"| chain of {args.links} one-block kernels in a graph, GPU us (p50) | {c['pdl']['graph_p50_us']:.2f} | "
             f"{c['no pdl']['graph_p50_us']:.2f} |",
             f"| the same per link | {c['pdl']['per_link_us']:.2f} | {c['no pdl']['per_link_us']:.2f} |",
             f"| chain ran in order | {c['pdl']['ordered']} | {c['no pdl']['ordered']} |"]
    for mode in ("mono", "stereo"):
        p = res[mode]["process"]
        lines.append(f"| {mode} `process()` p50 / p99 us | {p['pdl']['p50_us']:.1f} / {p['pdl']['p99_us']:.1f} | "
                     f"{p['no pdl']['p50_us']:.1f} / {p['no pdl']['p99_us']:.1f} |")
    gf = res["mono"]["gpu_frame"]
    lines.append(f"| mono GPU frame (graph behind a spin kernel) us p50 | {gf['pdl']['p50_us']:.1f} | "
                 f"{gf['no pdl']['p50_us']:.1f} |")
    for mode in ("mono", "stereo"):
        t = res[mode]["tracks_95_frames"]
        lines.append(f"| {mode}: tracks of 95 frames identical | {t['identical']} ({t['tracks']} tracks) | |")
    (out / "pdl_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
