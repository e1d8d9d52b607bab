"""How much of the frame is the forward-backward check's backward track, and what do its coarse
levels buy? (issue 10: the GPU frame, 96 us, is most of ``process()``; LK + the fused check is
36 us of it.)

The backward track starts at the slot's old position, where a good track ends, so its coarse
levels mostly re-find where it already is. Variants, mono ``process()`` on the real EuRoC frames
(pageable, looped), measured in alternating chunks so the host's drift hits them alike:
the backward track on all 5 levels (today), on 3, 2 and 1 (``fb_levels``), no check at all, and
no RANSAC. Per variant: ``process()`` p50 / p99, the GPU stages (queued behind a spin kernel),
and, over the 95 frames from a reset, the tracks against today's (same ids, position change) and
the check's rejections. Also the RANSAC launch timed alone (three kernels one by one when this
probe first ran; one since 2026-11-28 13:00 UTC). Writes
``fb_levels_probe.json`` / ``.md`` into ``--out``.

    python3 bench/fb_levels_probe.py --frames-dir .data/euroc_v101_head --out bench/out
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = {"fb 5 levels (today)": {}, "fb 3 levels": {"fb_levels": 3}, "fb 2 levels": {"fb_levels": 2},
            "fb 1 level": {"fb_levels": 1}, "no fb check": {"fb_check": False}, "no ransac": {"ransac": False}}


def make(overrides: dict):
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    return FeatureTracker(euroc_cam0(), FrontendConfig(**overrides).validate(), device="cuda")


def tracks(ft, frames) -> list:
    from vilib_ros.bench.frontend import _stamp

    ft.reset()
    out = []
    for f in frames:
        fr = ft.process(f, _stamp())
        out.append((fr.ids.copy(), fr.xy.copy()))
    return out, {k: int(v) for k, v in dict(ft.stats).items() if k in ("fb_rejected", "ransac_rejected")}


def compare(ref, other) -> dict:
    same, tot, d = 0, 0, []
    for (i0, x0), (i1, x1) in zip(ref, other):
        common, a, b = np.intersect1d(i0, i1, return_indices=True)
        same += len(common)
        tot += len(i0)
        if len(common):
            e = np.linalg.norm(x0[a] - x1[b], axis=1)
            d.append(e)
    d = np.concatenate(d) if d else np.zeros(1)
    return {"ids_in_common_pct": 100.0 * same / max(tot, 1), "tracks_ref": tot,
            "tracks": int(sum(len(i) for i, _ in other)), "dxy_p50": float(np.median(d)),
            "dxy_p99": float(np.percentile(d, 99)), "dxy_max": float(d.max())}


def ransac_kernels(repeats=300) -> dict:
    """The RANSAC launch alone (``ransac_kernel_probe.kernel_times``: 160 points, 10 % outliers;
    three kernels when this probe first ran, one since 2026-11-28 13:00 UTC)."""
    from ransac_kernel_probe import kernel_times        # beside this script

    times, _ = kernel_times(160, repeats)
    return {k: {"p50_us": float(np.median(v)), "p90_us": float(np.percentile(v, 90))} for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames-dir", default=".data/euroc_v101_head")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--chunk", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from vilib_ros._cuda import device_name
    from vilib_ros.bench.frontend import _stamp, stage_breakdown
    from vilib_ros.bench.tracker import load_frames

    frames = load_frames(args.frames_dir)
    fts = {name: make(ov) for name, ov in VARIANTS.items()}
    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {frames[0].shape[1]}x{frames[0].shape[0]}, looped",
           "variants": {}}
    import time
    lat = {name: [] for name in fts}
    for ft in fts.values():
        for k in range(100):
            ft.process(frames[k % len(frames)], _stamp())
    k = 0
    for _ in range(args.rounds):
        for name, ft in fts.items():
            for _ in range(args.chunk):
                f = frames[k % len(frames)]
                k += 1
                t0 = time.perf_counter()
                ft.process(f, _stamp())
                lat[name].append((time.perf_counter() - t0) * 1e6)
    ref_tracks = None
    for name, ft in fts.items():
        stages = stage_breakdown(ft, frames, 400)
        tr, counters = tracks(ft, frames)
        row = {"process_p50_us": float(np.median(lat[name])), "process_p99_us": float(np.percentile(lat[name], 99)),
               "stages_p50_us": {s: round(v["p50_us"], 1) for s, v in stages.items()},
               "counters_95_frames": counters}
        if ref_tracks is None:
            ref_tracks = tr
        row["against_today"] = compare(ref_tracks, tr)
        res["variants"][name] = row
        print(name, json.dumps(row), flush=True)
    res["ransac_kernels"] = ransac_kernels()
    print("ransac kernels", json.dumps(res["ransac_kernels"]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fb_levels_probe.json").write_text(json.dumps(res, indent=1))
    lines = [f"# Forward-backward check levels and RANSAC kernels ({res['date']})", "",
             f"Machine: {res['device']}; data: {res['data']}; mono process() from pageable frames, "
             f"{args.rounds} rounds of {args.chunk} calls per variant in turns.", "",
             "| variant | process p50 us | p99 us | lk stage us | ransac stage us | ids as today % | "
             "position change p50 / p99 / max px | tracks (95 frames) | fb / ransac rejected |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for name, r in res["variants"].items():
        a, s = r["against_today"], r["stages_p50_us"]
        lines.append(f"| {name} | {r['process_p50_us']:.1f} | {r['process_p99_us']:.1f} | {s.get('lk', 0):.1f} | "
                     f"{s.get('ransac', 0):.1f} | {a['ids_in_common_pct']:.2f} | {a['dxy_p50']:.4f} / "
                     f"{a['dxy_p99']:.4f} / {a['dxy_max']:.3f} | {a['tracks']} | "
                     f"{r['counters_95_frames'].get('fb_rejected')} / {r['counters_95_frames'].get('ransac_rejected')} |")
    lines += ["", "RANSAC kernels (p50 / p90 us): " + ", ".join(
        f"{k} {v['p50_us']:.1f} / {v['p90_us']:.1f}" for k, v in res["ransac_kernels"].items())]
    (out / "fb_levels_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
