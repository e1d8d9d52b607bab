"""``python -m bench mono-study``: what sets the mono-inertial error, one backend configuration per row.

Each row is a set of :class:`~vilib_ros.backend.BackendConfig` overrides (:data:`ROWS`), run in mono (and,
for the rows that touch code or fields stereo shares, in stereo) on the same inputs, one estimator at a
time, in this process:

* sequences (``--sequences``): ``v101`` (the real EuRoC V1_01 trajectory and IMU, rendered by the
  generator; ``v101:60`` its first 60 s) and ``synthetic60`` (the generator's own 60 s trajectory and
  synthetic IMU), as in :mod:`bench.accuracy`;
* inputs (``--inputs``): ``exact`` (occlusion-aware projections of the scene points, 0.5 px noise: no
  image is rendered), ``genimu`` (v101's exact tracks with the generator's IMU, datasheet noise and bias
  walk, instead of the recorded one: what the recorded IMU's disagreement with the rendered motion costs)
  and ``ours`` (the CPU frontend's tracks: from ``--tracks`` pickles, or with ``--render`` rendered and
  tracked here into ``bench accuracy``'s cache).

Per cell: the causal ATE (SE3-aligned RMSE of what ``backend_node`` publishes per frame), the smoothed
ATE, the causal ATE after a Sim3 alignment and its scale (a constant scale error shows as a scale far from
1 with a Sim3 ATE far below the SE3 one), keyframes and resets. Positions are compared at the frames'
own stamps with the generator's exact trajectory (Umeyama, :func:`vilib_ros.evaluation.umeyama`: the same
alignment as evo's on matched poses).

Writes ``mono_study.json`` / ``.md`` into ``--out`` after every column, so a long run keeps what it has.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

#: (label, overrides, modes): every row runs in mono; a row that changes shared code or fields runs in
#: stereo too ("stereo" in its modes). The first row is today's defaults.
M = ("mono",)
#: the defaults the study started from (mono_window_s 2.5); every ablation row below changes one thing of them
BEFORE = {"mono_window_s": 2.5}


def _ab(label: str, overrides: dict, modes=M) -> tuple:
    """An ablation row: one change to the defaults the study started from."""
    return (label, {**BEFORE, **overrides}, modes)


ROWS: list = [
    ("defaults (mono_window_s 4)", {}, ("mono", "stereo")),
    ("defaults before the study (mono_window_s 2.5)", dict(BEFORE), ("mono", "stereo")),
    # keyframe selection by parallax
    _ab("kf_parallax_px 20", {"kf_parallax_px": 20.0}),
    _ab("kf_parallax_px 30", {"kf_parallax_px": 30.0}),
    _ab("kf_min_interval_s 0.15", {"kf_min_interval_s": 0.15}),
    _ab("kf_min_interval_s 0.25", {"kf_min_interval_s": 0.25}),
    _ab("kf_max_interval_s 0.8", {"kf_max_interval_s": 0.8}),
    # landmark initialisation and prior
    _ab("mono_min_parallax_deg 0.75", {"mono_min_parallax_deg": 0.75}),
    _ab("mono_min_parallax_deg 3", {"mono_min_parallax_deg": 3.0}),
    _ab("landmark_prior_sigma 1", {"landmark_prior_sigma": 1.0}),
    _ab("landmark_prior_sigma 50", {"landmark_prior_sigma": 50.0}),
    # window and marginalisation
    _ab("mono_window_s 4", {"mono_window_s": 4.0}),
    _ab("mono_window_s 6", {"mono_window_s": 6.0}),
    _ab("mono_window_s 3", {"mono_window_s": 3.0}),
    _ab("mono_window_s 3.5", {"mono_window_s": 3.5}),
    _ab("mono_window_s 5", {"mono_window_s": 5.0}),
    _ab("mono_window_s 4, mono_marginalise_every_s 2", {"mono_window_s": 4.0, "mono_marginalise_every_s": 2.0}),
    _ab("mono_marginalise_every_s 0", {"mono_marginalise_every_s": 0.0}),
    # IMU noise model (scale observability)
    _ab("IMU noise fixed x1 (datasheet)", {"imu_noise_measured": False, "imu_noise_scale": 1.0}),
    _ab("IMU noise fixed x3", {"imu_noise_measured": False, "imu_noise_scale": 3.0}),
    _ab("IMU noise fixed x10", {"imu_noise_measured": False, "imu_noise_scale": 10.0}),
    _ab("imu_walk_scale 1", {"imu_walk_scale": 1.0}),
    _ab("imu_walk_scale 20", {"imu_walk_scale": 20.0}),
    # observations per keyframe / grid
    _ab("mono_max_landmarks_per_kf 30", {"mono_max_landmarks_per_kf": 30}),
    _ab("mono_max_landmarks_per_kf 80", {"mono_max_landmarks_per_kf": 80}),
    _ab("mono_landmark_grid 0", {"mono_landmark_grid": 0}),
    _ab("mono_landmark_grid 6", {"mono_landmark_grid": 6}),
    # robust loss, gating, noise
    _ab("huber_k 3", {"huber_k": 3.0}),
    _ab("huber_k 100 (quadratic)", {"huber_k": 100.0}),
    _ab("pixel_sigma 0.5", {"pixel_sigma": 0.5}),
    _ab("pixel_sigma 2", {"pixel_sigma": 2.0}),
    _ab("relinearize_threshold 0.001 (states and landmarks)",
        {"relinearize_threshold": 0.001, "relinearize_threshold_landmarks": 0.001}),
]


def _inputs(spec: str, which: tuple, cache: Path, tracks: dict | None = None, render: bool = False):
    """(name, [(input label, frames)], cam0, cam1, (imu stamps, imu data), imu noise, gt (t_ns -> p)) of a
    sequence spec ``name[:seconds]``, or a reason it cannot run."""
    from bench.sequences import exact_tracks, our_tracks, rendered, sequence_config
    from vilib_ros.synthetic import SyntheticSequence

    name, _, dur = spec.partition(":")
    cfg = sequence_config(name, float(dur) if dur else None)
    if cfg is None:
        return f"{name}: its data is not found"
    seq = SyntheticSequence(cfg)
    inputs = []
    if "exact" in which:
        inputs.append(("exact 0.5 px", exact_tracks(seq, 0.5, cache)))
    if "genimu" in which and cfg.recorded_imu is not None:
        # the same trajectory and tracks with the generator's IMU (datasheet noise, bias walk) instead of the
        # recorded one: what the recorded IMU's disagreement with the rendered motion costs
        import dataclasses

        gseq = SyntheticSequence(dataclasses.replace(cfg, recorded_imu=None))
        git, gd, _, _ = gseq.imu()
        inputs.append(("exact 0.5 px, generator IMU", exact_tracks(gseq, 0.5, cache), (git, gd)))
    if "ours" in which and spec in (tracks or {}):
        import pickle

        with open(tracks[spec], "rb") as f:
            frames = pickle.load(f)[0]
        if [fr.stamp_ns for fr in frames] != seq.frame_stamps_ns.tolist():
            return f"{spec}: the tracks in {tracks[spec]} are not of this sequence's frames"
        inputs.append(("ours (cpu)", frames))
    elif "ours" in which and render:
        from vilib_ros.datasets import open_dataset

        ds = open_dataset(rendered(cfg, cache, None))
        inputs.append(("ours (cpu)", our_tracks(ds, "cpu", cache)[0]))
    it, idd, _, _ = seq.imu()
    inputs = [i if len(i) == 3 else (*i, (it, idd)) for i in inputs]

    def gt_p(t_ns):
        return seq.trajectory.sample(seq._t(t_ns)).p

    return spec, inputs, seq.camera(0), seq.camera(1), (it, idd), seq.imu_noise_dict(), gt_p


def cell(est, gt_p, wall: float) -> dict:
    """The row's figures of one finished estimator (see the module docstring)."""
    from vilib_ros.evaluation import umeyama

    out = {"keyframes": int(est.stats["keyframes"]), "resets": int(est.stats["resets"]),
           "init": est.stats["init_kind"], "wall_s": wall,
           "kf_by": {k: int(est.stats[k]) for k in ("kf_time", "kf_parallax", "kf_tracks")},
           "obs_per_keyframe": float(np.median([k.get("factors", 0) for k in est.kf_timings] or [0]))}
    for smoothed in (False, True):
        t, p, _ = est.trajectory(smoothed=smoothed)
        if len(t) < 3:
            out["error"] = "no trajectory"
            return out
        g = gt_p(t)
        tag = "smoothed" if smoothed else "causal"
        for scale in (False, True) if not smoothed else (False,):
            R, tr, s = umeyama(p, g, scale)
            e = float(np.sqrt(np.mean(np.sum((s * p @ R.T + tr - g) ** 2, 1))))
            if scale:
                out["ate_sim3_m"], out["scale"] = e, s
            else:
                out[f"ate_{tag}_m"] = e
    kt = [k["total_s"] for k in est.kf_timings]
    out["keyframe_ms"] = 1e3 * float(np.median(kt)) if kt else None
    return out


def run_one(frames, imu, cam0, cam1, noise, mode: str, overrides: dict, gt_p) -> dict:
    from bench.sequences import run_backend

    t = time.perf_counter()
    est, _ = run_backend(frames, imu[0], imu[1], cam0, cam1, noise, mode, **overrides)
    return cell(est, gt_p, time.perf_counter() - t)


def _fmt(c) -> str:
    if c is None:
        return ""
    if "error" in c or c.get("ate_causal_m") is None:
        return c.get("error", "-")
    rs = f", {c['resets']} resets" if c["resets"] else ""
    return (f"{100 * c['ate_causal_m']:.2f} / {100 * c['ate_smoothed_m']:.2f} / {100 * c['ate_sim3_m']:.2f} "
            f"(x{c['scale']:.3f}){rs}")


def markdown(res: dict) -> str:
    cols = res["columns"]
    L = [f"# Mono-inertial study: what sets the error ({res['date']})", "",
         f"Machine: {res['machine']}. Command: `{res['command']}`", "",
         "Each cell: causal ATE / smoothed ATE / causal ATE after Sim3 alignment [cm] (scale of that alignment); "
         "exact tracks carry 0.5 px noise. Rows run one at a time in one process; ATEs are deterministic.", "",
         "| row | " + " | ".join(f"{c['sequence']} {c['input']}, {c['mode']}" for c in cols) + " |",
         "|---|" + "---|" * len(cols)]
    for n, r in enumerate(res["rows"]):
        L.append(f"| {r['label']} | " + " | ".join(_fmt(c["cells"][n] if n < len(c["cells"]) else None) for c in cols) + " |")
    if res.get("notes"):
        L += ["", res["notes"]]
    return "\n".join(L) + "\n"


def select(spec: str) -> list:
    if not spec:
        return ROWS
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        hit = [ROWS[int(part)]] if part.isdigit() and int(part) < len(ROWS) else [r for r in ROWS if part in r[0]]
        if not hit:
            raise ValueError(f"no row matches {part!r}")
        out += [r for r in hit if r not in out]
    return out


def _gtsam_version(gtsam) -> str:
    """gtsam's version (its module has no ``__version__`` in some builds: the installed distribution's)."""
    try:
        from importlib.metadata import version

        return version("gtsam")
    except Exception:  # noqa: BLE001 - a build outside pip
        return getattr(gtsam, "__version__", "?")


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sequences", default="v101:60,synthetic60",
                   help="comma-separated name[:seconds] (v101, synthetic60); default %(default)s")
    p.add_argument("--inputs", default="exact", help="comma-separated: exact, ours, genimu (exact tracks with the "
                                                     "generator's IMU instead of the recorded one; v101 only) "
                                                     "(default %(default)s)")
    p.add_argument("--modes", default="mono", help="comma-separated: mono, stereo (a row runs in the modes it "
                                                   "names; default %(default)s)")
    p.add_argument("--rows", default="", help="row indices or label substrings (default: all)")
    p.add_argument("--cache", type=Path, default=Path(".data/bench_cache"))
    p.add_argument("--tracks", action="append", default=[], metavar="SPEC=PICKLE",
                   help="our tracks of sequence SPEC from a pickle of bench.sequences.our_tracks (frames, seconds) "
                        "instead of rendering it here (repeatable)")
    p.add_argument("--render", action="store_true",
                   help="render the sequences for 'ours' where --tracks gives none (else 'ours' runs only there)")
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--name", default="mono_study", help="output file stem (default %(default)s)")


def run_command(args) -> int:
    logging.getLogger("vilib_ros.backend.estimator").setLevel(logging.ERROR)
    rows = select(args.rows)
    modes = [m for m in args.modes.split(",") if m]
    which = tuple(i for i in args.inputs.split(",") if i)
    args.cache.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    import gtsam

    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
                      f"gtsam {_gtsam_version(gtsam)}",
           "command": "python -m bench " + " ".join(sys.argv[1:]),
           "rows": [{"label": r[0], "overrides": r[1], "modes": list(r[2])} for r in rows], "columns": []}
    for spec in args.sequences.split(","):
        got = _inputs(spec, which, args.cache, dict(t.split("=", 1) for t in args.tracks), args.render)
        if isinstance(got, str):
            print(f"bench mono-study: skipped {got}", file=sys.stderr)
            continue
        name, inputs, cam0, cam1, _, noise, gt_p = got
        for inp, frames, imu in inputs:
            for mode in modes:
                col = {"sequence": name, "input": inp, "mode": mode, "cells": []}
                res["columns"].append(col)
                for label, ov, rmodes in rows:
                    if mode not in rmodes:
                        col["cells"].append(None)
                        continue
                    c = run_one(frames, imu, cam0, cam1, noise, mode, ov, gt_p)
                    col["cells"].append(c)
                    print(f"{name} {inp} {mode} | {label}: {_fmt(c)} [{c['wall_s']:.0f} s]", file=sys.stderr,
                          flush=True)
                    (args.out / f"{args.name}.json").write_text(json.dumps(res, indent=1))
                    (args.out / f"{args.name}.md").write_text(markdown(res))
    print(markdown(res))
    return 0
