"""The cost of reference templates with the affine warp on the GPU: ``process()`` per frame (a
pageable NumPy frame, synchronous: the path users have), mono and stereo, of the frontend
configurations of ``bench/results/tracks_quality.md``, measured interleaved in one run on the real
EuRoC frames (looped); part of ``python -m bench tracker --templates-only``.

* ``f2f+ransac``: frame to frame, translation, RANSAC (the default before reference templates);
* ``ref-affine+fb+ransac``: reference template, affine warp, forward-backward check, RANSAC
  (the default since);
* ``f2f`` and ``ref-affine``: the same without FB check and RANSAC (the tracking alone: RANSAC
  is a host step with a synchronisation per frame, the FB check a second LK launch).

Per variant: process() latency p50 / p90 / p99, tracks per frame, the GPU time of each stage
(kernels launched one by one with events between them, queued behind a spin kernel; with RANSAC
the host's RANSAC falls into the stage after ``fb``).
"""
from __future__ import annotations

import datetime as _dt
import platform

import numpy as np

from bench.frontend import _stats, interleaved, process_times, stage_breakdown, stereo_rig

#: variant -> (template, warp, fb_check, ransac)
VARIANTS = {"f2f+ransac": ("previous", "translation", False, True),
            "ref-affine+fb+ransac": ("reference", "affine", True, True),
            "f2f": ("previous", "translation", False, False),
            "ref-affine": ("reference", "affine", False, False)}


def _tracker(variant, frames, stereo):
    from vilib_ros.camera import euroc_cam0
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.frontend.config import TrackerConfig

    template, warp, fb, ransac = VARIANTS[variant]
    cfg = FrontendConfig(tracker=TrackerConfig(template=template, warp=warp), fb_check=fb, ransac=ransac)
    if not stereo:
        return FeatureTracker(euroc_cam0(), cfg, device="cuda"), None
    cam_r, T, right = stereo_rig(frames)
    return FeatureTracker(euroc_cam0(), cfg, device="cuda", camera_right=cam_r, T_right_left=T), right


def bench_templates(frames, n: int = 1000, chunk: int = 100) -> dict:
    """process() latency of every variant, mono and stereo, interleaved in chunks of ``chunk``
    frames (``n`` per variant), and the GPU time per stage."""
    from vilib_ros._cuda import device_name

    res = {"device": device_name(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "data": f"{len(frames)} real EuRoC V1_01 cam0 frames {frames[0].shape[1]}x{frames[0].shape[0]}, looped; "
                   "stereo: the right frame is the left one shifted by 8 px",
           "host": f"{platform.node()} {platform.processor() or platform.machine()} python {platform.python_version()}",
           "frames": n, "variants": {k: dict(zip(("template", "warp", "fb_check", "ransac"), v))
                                     for k, v in VARIANTS.items()}}
    rounds = max(1, n // chunk)
    for stereo in (False, True):
        key = "stereo" if stereo else "mono"
        fts = {}
        for v in VARIANTS:
            ft, right = _tracker(v, frames, stereo)
            assert ft.device == "cuda", "the templates benchmark needs the GPU path"
            process_times(ft, frames, 50, right)
            fts[v] = (ft, right)
        lat = interleaved({v: (lambda f=f: process_times(f[0], frames, chunk, f[1])[0]) for v, f in fts.items()},
                          rounds)
        res[key] = {}
        for v, (ft, right) in fts.items():
            ntr = process_times(ft, frames, 100, right)[1]
            res[key][v] = {**_stats(lat[v]), "tracks_per_frame": float(np.mean(ntr)),
                           "templates_refreshed": int(ft.stats["templates_refreshed"]),
                           "stages": stage_breakdown(ft, frames, min(n, 300), right=right)}
    return res


def markdown(res) -> str:
    L = ["## Reference templates + affine warp on the GPU: process() per frame from a pageable NumPy frame", "",
         f"- device: {res['device']}; date: {res['date']}; data: {res['data']}; host: {res['host']}",
         f"- {res['frames']} frames per variant, the variants interleaved in chunks of 100 frames", "",
         "| variant | camera | p50 us | p90 us | p99 us | tracks/frame |", "|---|---|---:|---:|---:|---:|"]
    for key in ("mono", "stereo"):
        for v, r in res.get(key, {}).items():
            L.append(f"| {v} | {key} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} | "
                     f"{r['tracks_per_frame']:.0f} |")
    for key in ("mono", "stereo"):
        base = res.get(key, {}).get("f2f+ransac")
        new = res.get(key, {}).get("ref-affine+fb+ransac")
        if base and new:
            L += ["", f"- {key}: the new default costs {new['p50_us'] - base['p50_us']:+.1f} us at p50 "
                  f"({new['p50_us'] / base['p50_us']:.2f}x the old default), {new['p99_us'] - base['p99_us']:+.1f} us at p99"]
    for key in ("mono", "stereo"):
        for v, r in res.get(key, {}).items():
            L += ["", f"GPU time per stage, {v}, {key} (median / p90 us): " +
                  ", ".join(f"{k} {s['p50_us']:.1f} / {s['p90_us']:.1f}" for k, s in r["stages"].items())]
    return "\n".join(L) + "\n"
