"""Soak the node path: ``vilib-ros run`` over N frames, the RSS of every node sampled throughout.

The dataset (default: a generated 5 s mono sequence, rendered into the output folder once) is
replayed ``--loops`` times with the clock running on (player ``loops``), in backpressure mode,
so nothing may be lost. Every ``--period`` seconds the resident set size (VmRSS) of each node
process is read from /proc. At the end: RSS of every node at start (after its first 5% of
frames) and at the end, the slope over the second half, and the frames lost
(player sent - frontend received, frontend published - recorder / backend received).

    python tools/soak_nodes.py --frames 10000 --out soak_out          # ~25-35 min on 2 CPU cores
    python tools/soak_nodes.py --frames 10000 --dataset PATH          # any ASL folder / bag

Writes ``soak.json`` (every sample) and prints a Markdown table. Linux only (/proc).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NODES = ("player_node", "frontend_node", "backend_node", "recorder_node")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def node_pids(params: str) -> dict[str, int]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if params in cmd:
            for n in NODES:
                if f"vilib_ros.nodes.{n}" in cmd:
                    out[n] = int(d.name)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=10_000, help="cam0 frames to replay in all (default 10000)")
    ap.add_argument("--dataset", default=None, help="ASL folder or bag (default: a generated 5 s mono sequence)")
    ap.add_argument("--out", default="soak_out", help="output folder")
    ap.add_argument("--period", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--domain-id", type=int, default=4)
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    args = ap.parse_args(argv)

    from vilib_ros.datasets import open_dataset
    from vilib_ros.nodes.processes import popen

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.dataset:
        ds_path = Path(args.dataset)
    else:
        ds_path = out / "dataset"
        if not (ds_path / "mav0").is_dir():
            from vilib_ros.synthetic import SequenceConfig, generate_sequence

            generate_sequence(ds_path, SequenceConfig(duration_s=5.0, stereo=False, speed=0.3, angular_rate=0.2,
                                                      seed=5), progress=True, workers=1)
    n = len(open_dataset(ds_path).image_stamps(0))
    loops = max(1, math.ceil(args.frames / n))
    run_out = out / "run"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "vilib_ros", "run", str(ds_path), "--out", str(run_out), "--loops", str(loops),
           "--no-video", "--domain-id", str(args.domain_id), "--device", args.device]
    print(f"soak: {n} frames x {loops} loops = {n * loops} frames: {' '.join(cmd)}", file=sys.stderr)
    t0 = time.monotonic()
    proc = popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(out / "run_stderr.log", "w"))
    params = str(run_out / "params.yaml")
    samples = []
    while proc.poll() is None:
        time.sleep(args.period)
        rec = run_out / "recorded.jsonl"
        tracks = 0
        if rec.exists():
            with open(rec, "rb") as f:
                tracks = sum(1 for line in f if b'"topic": "tracks"' in line)
        s = {"t_s": time.monotonic() - t0, "tracks": tracks,
             "rss_mb": {k: rss_mb(p) for k, p in node_pids(params).items()}}
        samples.append(s)
        print(f"soak: {s['t_s']:7.0f} s  {tracks:6d} frames  " +
              "  ".join(f"{k.split('_')[0]} {v:.0f} MB" for k, v in s["rss_mb"].items() if v), file=sys.stderr)
    rc = proc.returncode
    wall = time.monotonic() - t0

    def stats(name):
        pts = [(s["tracks"], s["rss_mb"].get(name)) for s in samples if s["rss_mb"].get(name)]
        if not pts:
            return None
        total = pts[-1][0] or 1
        start = next((r for f, r in pts if f >= 0.05 * total), pts[0][1])
        half = [(f, r) for f, r in pts if f >= 0.5 * total]
        slope = 0.0
        if len(half) >= 2 and half[-1][0] > half[0][0]:
            slope = (half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0]) * 1000.0
        return {"start_mb": start, "end_mb": pts[-1][1], "max_mb": max(r for _, r in pts),
                "slope_mb_per_1000_frames_second_half": slope}

    def load(f):
        try:
            return json.loads((run_out / f).read_text())
        except (OSError, ValueError):
            return {}

    pl, fe, be = load("player_stats.json"), load("frontend_stats.json"), load("backend_stats.json")
    recorded = 0
    if (run_out / "recorded.jsonl").exists():
        with open(run_out / "recorded.jsonl", "rb") as f:
            recorded = sum(1 for line in f if b'"topic": "tracks"' in line)
    sent = (pl.get("images") or [0])[0]
    result = {"frames_requested": n * loops, "rc": rc, "wall_s": wall, "player_sent": sent,
              "frontend_received": fe.get("images_received"), "frontend_published": fe.get("tracks_published"),
              "backend_received": be.get("frames_received"), "recorder_received": recorded,
              "imu_sent": pl.get("imu"), "imu_frontend": fe.get("imu_received"), "imu_backend": be.get("imu_received"),
              "device": fe.get("device"), "backend_resets": (be.get("estimator") or {}).get("resets"),
              "rss": {k: stats(k) for k in NODES}, "samples": samples, "command": cmd}
    (out / "soak.json").write_text(json.dumps(result, indent=2))
    lost = {"frames (player -> frontend)": (sent or 0) - (fe.get("images_received") or 0),
            "tracks (frontend -> recorder)": (fe.get("tracks_published") or 0) - recorded,
            "tracks (frontend -> backend)": (fe.get("tracks_published") or 0) - (be.get("frames_received") or 0),
            "IMU (player -> backend)": (pl.get("imu") or 0) - (be.get("imu_received") or 0)}
    print(f"\n## Soak: {sent} frames through player -> frontend ({fe.get('device')}) -> backend, "
          f"{wall / 60:.1f} min, exit {rc}\n")
    print("| node | RSS start (MB) | RSS end (MB) | max | slope, 2nd half (MB / 1000 frames) |")
    print("|---|---|---|---|---|")
    for k, v in result["rss"].items():
        if v:
            print(f"| {k} | {v['start_mb']:.0f} | {v['end_mb']:.0f} | {v['max_mb']:.0f} | "
                  f"{v['slope_mb_per_1000_frames_second_half']:+.2f} |")
    print("\n| lost | count |\n|---|---|")
    for k, v in lost.items():
        print(f"| {k} | {v} |")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
