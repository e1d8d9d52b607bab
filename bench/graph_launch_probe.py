"""What does launching a CUDA graph cost the host, by its number of kernel nodes (issue 10:
`process()` fell by ~10 us when RANSAC's three kernels became one, more than the frame's GPU time
moved)? Graphs of 1-16 dependent one-block kernels (``chain_step``), with and without programmatic
dependent launch: the host time of ``Graph.launch`` (median of 2,000, the stream drained between
launches so that no queue is full) and the GPU time of the graph behind a spin kernel. Also the
node count of the frontend's own mono and stereo graphs (``cuGraphGetNodes``). Writes
``graph_launch_probe.json`` / ``.md`` to ``--out``.

    python3 bench/graph_launch_probe.py --frames-dir .data/euroc_v101_head --out bench/out
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def node_count(g) -> int | None:
    """Nodes of a CuPy graph (cuGraphGetNodes on its cudaGraph_t), None where it is not exposed."""
    h = getattr(g, "graph", None)
    if h is None:
        return None
    lib = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_size_t(0)
    err = lib.cuGraphGetNodes(ctypes.c_void_p(int(h)), None, ctypes.byref(n))
    return int(n.value) if err == 0 else None


def chain_graph(k, links: int):
    import cupy as cp

    from vilib_ros._cuda import launch

    s = cp.cuda.Stream(non_blocking=True)
    x, trace = cp.zeros(1, cp.int32), cp.zeros(max(links, 1), cp.int32)
    s.begin_capture()
    for i in range(links):
        launch(k, (1, 1, 1), (128, 1, 1), (x, trace, np.int32(i)), stream=s, checked=False)
    return s.end_capture(), s, (x, trace)


def host_launch_us(g, s, reps: int) -> float:
    t = []
    for _ in range(reps + 50):
        t0 = time.perf_counter()
        g.launch(s)
        t.append(time.perf_counter() - t0)
        s.synchronize()
    return float(np.median(t[50:])) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=".data/euroc_v101_head")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()
    from bench.kernels import bench_util
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import graph_times

    k = bench_util().get_function("chain_step")
    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "rows": []}
    for pdl in ("1", "0"):
        os.environ["VILIB_ROS_PDL"] = pdl
        for links in (1, 2, 4, 8, 16):
            g, s, keep = chain_graph(k, links)
            row = {"pdl": pdl == "1", "kernels": links, "nodes": node_count(g),
                   "host_launch_us": host_launch_us(g, s, args.reps),
                   "gpu_us": float(np.median(graph_times(g, s, 500))) * 1e6}
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    os.environ["VILIB_ROS_PDL"] = "1"
    from vilib_ros.bench.frontend import _stamp, _tracker
    from vilib_ros.bench.tracker import load_frames

    frames = load_frames(args.frames_dir)[:20]
    res["frontend_graphs"] = {}
    for stereo in (False, True):
        ft, right = _tracker("cuda", stereo=stereo, frames=frames)
        for i, f in enumerate(frames):
            ft.process(f, _stamp(), **({"image_right": right[i]} if stereo else {}))
        p = ft.pipeline
        counts = {str(key): node_count(g) for key, g in p.graphs._graphs.items()}
        counts.update({f"upload {key}": node_count(g) for key, g in p.graphs_up._graphs.items()})
        res["frontend_graphs"]["stereo" if stereo else "mono"] = counts
        print("stereo" if stereo else "mono", counts, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "graph_launch_probe.json").write_text(json.dumps(res, indent=1))
    L = [f"# Host cost of a graph launch by its kernels ({res['date']})", "",
         f"Machine: {res['device']}; chains of dependent one-block kernels; host: median of {args.reps} "
         "`Graph.launch` calls, the stream drained between them; GPU: the graph behind a spin kernel.", "",
         "| PDL | kernels | nodes | host launch us | GPU us |", "|---|---:|---:|---:|---:|"]
    for r in res["rows"]:
        L.append(f"| {'on' if r['pdl'] else 'off'} | {r['kernels']} | {r['nodes']} | {r['host_launch_us']:.2f} | "
                 f"{r['gpu_us']:.2f} |")
    L += ["", "The frontend's graphs (nodes): " + json.dumps(res["frontend_graphs"])]
    (out / "graph_launch_probe.md").write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
