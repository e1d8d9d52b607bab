"""Why the backend runs slower inside the whole VIO than alone (issue 12).

``bench-vio`` runs the backend twice on the same tracks: inside the offline runner (the GPU
frontend in the parent process beside it) and alone (``replay_backend``). On the H100 machine
(2026-11-28 01:36, ``vio_bench.json``) the per-keyframe median was 1.4-1.6x higher inside the run
in four rows of five (mono 6.80 against 4.97 ms), although the child's CPU time equalled its busy
time (it was never waiting for a core). This probe runs, in turns on the same rendered sequence:

* ``default``: the offline runner as it is;
* ``blocking``: the frontend's CUDA events created with blocking sync (its thread sleeps while the
  GPU works instead of spinning on a core);
* ``pinned``: the backend child pinned to one CPU, the parent to the CPUs that share no core with it
  (``/sys/.../thread_siblings_list``);
* ``blocking+pinned``;
* ``alone``: the backend alone on the tracks of the ``default`` run.

Per row: whole-VIO frames/s, backend keyframe median / mean, busy and CPU seconds, the frontend's
per-frame median. Writes ``vio_contention_probe.json`` / ``.md`` into ``--out``.

    python3 bench/vio_contention_probe.py --out bench/out [--modes mono,stereo] [--repeat 2]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def siblings(cpu: int) -> set:
    p = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    if not p.exists():
        return {cpu}
    out = set()
    for part in p.read_text().strip().split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


@contextlib.contextmanager
def blocking_events(on: bool):
    if not on:
        yield
        return
    import cupy as cp

    orig = cp.cuda.Event

    def ev(block=False, disable_timing=False, interprocess=False):
        return orig(block=True, disable_timing=disable_timing, interprocess=interprocess)

    cp.cuda.Event = ev
    try:
        yield
    finally:
        cp.cuda.Event = orig


@contextlib.contextmanager
def pinned(on: bool):
    from vilib_ros import offline

    if not on:
        yield
        return
    cpus = sorted(os.sched_getaffinity(0))
    child = cpus[-1]
    parent = set(cpus) - siblings(child)
    orig_init = offline._Backend.__init__
    saved = os.sched_getaffinity(0)

    def init(self, *a, **kw):
        orig_init(self, *a, **kw)
        os.sched_setaffinity(self.proc.pid, {child})

    offline._Backend.__init__ = init
    os.sched_setaffinity(0, parent)
    try:
        yield
    finally:
        offline._Backend.__init__ = orig_init
        os.sched_setaffinity(0, saved)


def row(label, r, be, fe_s=None):
    kf = np.asarray(be["kf_ms"], float)
    out = {"variant": label, "keyframe_ms_median": float(np.median(kf)), "keyframe_ms_mean": float(kf.mean()),
           "busy_s": float(be["busy_s"]), "cpu_s": float(be["cpu_s"]), "keyframes": int(len(kf))}
    if r is not None:
        out |= {"frames_per_s": r["frames"] / r["wall_s"], "wall_s": r["wall_s"],
                "frontend_ms_median": float(np.median(r["frontend_s"]) * 1e3)}
    else:
        out |= {"wall_s": be["wall_s"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--modes", default="mono,stereo")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--cache", default=".data/bench_cache")
    ap.add_argument("--device", default="cuda", help="frontend device (cpu: no 'blocking' rows)")
    args = ap.parse_args()
    from vilib_ros.bench.accuracy import rendered
    from vilib_ros.bench.results import machine
    from vilib_ros.datasets import open_dataset
    from vilib_ros.offline import process, replay_backend
    from vilib_ros.synthetic import SequenceConfig

    Path(args.cache).mkdir(parents=True, exist_ok=True)
    path = rendered(SequenceConfig(duration_s=args.duration, seed=0, name=f"synthetic{args.duration:g}"),
                    Path(args.cache), None)
    ds = open_dataset(path)
    cpus = sorted(os.sched_getaffinity(0))
    topo = {c: sorted(siblings(c)) for c in cpus}
    print("cpus", len(cpus), "siblings of the last:", topo[cpus[-1]], flush=True)
    rows = []
    variants = [("default", False, False), ("blocking", True, False), ("pinned", False, True),
                ("blocking+pinned", True, True)]
    if args.device != "cuda":
        variants = [v for v in variants if not v[1]]
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        for rep in range(args.repeat):
            tracks = None
            for name, blk, pin in variants:
                with blocking_events(blk), pinned(pin):
                    r = process(ds, args.device, stereo=(mode == "stereo"), backend_config={"mode": mode}, preload=True)
                x = row(name, r, r["backend"]) | {"mode": mode, "round": rep + 1}
                rows.append(x)
                print(json.dumps(x), flush=True)
                if name == "default":
                    tracks = r["tracks"]
            solo = replay_backend(ds, tracks, mode == "stereo", {"mode": mode})
            x = row("alone", None, solo) | {"mode": mode, "round": rep + 1}
            rows.append(x)
            print(json.dumps(x), flush=True)
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(),
           "cpus": len(cpus), "siblings_of_last_cpu": topo[cpus[-1]],
           "data": f"synthetic generator, {args.duration:g} s stereo-inertial, seed 0, rendered, frames preloaded",
           "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vio_contention_probe.json").write_text(json.dumps(res, indent=1))
    md = ["# The backend inside the whole VIO and alone (bench/vio_contention_probe.py)", "",
          f"- date (UTC): {res['date']}; host: {res['machine']['cpu']} ({len(cpus)} CPUs; the last one's "
          f"siblings: {res['siblings_of_last_cpu']}); data: {res['data']}", "",
          "| mode | round | variant | whole VIO frames/s | backend keyframe ms (median / mean) | busy s | CPU s | "
          "frontend ms per frame (median) |", "|---|---:|---|---:|---|---:|---:|---:|"]
    for x in rows:
        fps = f"{x['frames_per_s']:.0f}" if "frames_per_s" in x else "-"
        fe = f"{x['frontend_ms_median']:.3f}" if "frontend_ms_median" in x else "-"
        md.append(f"| {x['mode']} | {x['round']} | {x['variant']} | {fps} | {x['keyframe_ms_median']:.2f} / "
                  f"{x['keyframe_ms_mean']:.2f} | {x['busy_s']:.2f} | {x['cpu_s']:.2f} | {fe} |")
    (out / "vio_contention_probe.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
