"""``python -m bench accuracy``: where the trajectory error comes from, against cuVSLAM.

Sequences (``--sequences``, default all):

* ``v101``: the real EuRoC V1_01 ground-truth trajectory (144 s, 58 m) and the real V1_01 IMU
  (``../shared/data/euroc_v101_head``, ``$VILIB_ROS_EUROC`` or ``.data/euroc_v101_head``),
  rendered in stereo by the synthetic generator in a textured room around the trajectory
  (:mod:`vilib_ros.synthetic.recorded`): real motion and real inertial data, exact geometry.
* ``synthetic60``: the generator's own drone-like 60 s trajectory (seed 0) with a synthetic
  IMU (EuRoC datasheet noise, bias walk).
* ``euroc_head``: the 95 real EuRoC V1_01 cam0 frames (at rest), a smoke check of the real
  image path (mono; our tracks only).

Rows per rendered sequence, all from one run:

* (a) exact tracks: occlusion-aware projections of the scene's surface points through the true
  poses, 0 and 0.5 px Gaussian noise, into our backend (stereo and mono);
* (b) our tracks: ``FeatureTracker`` (``--device``) on the rendered images into our backend
  (stereo; mono uses the left tracks of the same run);
* (c) cuVSLAM (PyPI ``dim_odom``, its CPU tracker unless ``--peer-gpu``) on the same images,
  stereo and stereo + IMU, through :mod:`.cuvslam_peer` in the Python given by
  ``--peer-python`` / ``$VILIB_ROS_PEERS_PYTHON`` (the ``peers`` extra). Where that is not
  importable the rows say so and are skipped: ``dim_odom`` is a benchmark-only peer, never
  imported by vilib_ros.

Columns: ATE (SE3-aligned RMSE, evo) of the causal odometry (what ``backend_node`` publishes
per frame: keyframe estimates and IMU predictions between them) and of the smoothed
trajectory (each frame relative to its keyframe's last estimate in the window), RPE per metre
(translation, 1 m, causal), backend keyframe time (median), landmark observations per
keyframe, resets. ``--changes`` adds the table of backend changes (each a configuration of the
same code, run on the same tracks in the same run), from the first defaults to today's.

Rendered sequences and tracks are cached in ``--cache`` (default ``.data/bench_cache``).
Writes ``accuracy.json`` and ``accuracy.md`` into ``--out`` and prints the tables.

``--conditions clean,distort,blur,blur20,10hz,6.7hz`` (or ``all``) runs the table of imaging conditions
instead (:mod:`bench.conditions`: lens distortion, motion blur, sensor noise, exposure steps, vignetting,
camera rates; the sequences' first ``--duration`` seconds, default 50) and writes
``accuracy_conditions.json`` / ``.md``.
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.results import write_results
from bench.sequences import (backend_row, cuvslam_rows, euroc_dir, exact_tracks, fmt, gt_tum_of, our_tracks,
                             rendered, run_backend, sequence_config, track_errors)

log = logging.getLogger(__name__)

#: Backend changes measured in ``--changes``: (what changed, BackendConfig overrides), cumulative.
#: The first row restores the first defaults; the last row is today's defaults.
#: the backend-time changes (python -m bench backend --changes), undone in the rows before them
_BEFORE_ISSUE12 = {"mono_window_s": 6.0, "landmark_prior_stereo": True, "mono_max_landmarks_per_kf": 60,
                   "mono_landmark_grid": 0}
_MONO_BEFORE_GRID = {"mono_window_s": 3.0, "mono_max_landmarks_per_kf": 60, "mono_landmark_grid": 0}
CHANGES = [
    ("first defaults (datasheet IMU noise, 2 s window, 40 obs/keyframe, relinearize 0.05, 3 outliers "
     "blacklist a track)",
     {"imu_noise_measured": False, "imu_noise_scale": 1.0, "imu_walk_scale": 1.0, "max_landmarks_per_kf": 40,
      "relinearize_threshold": 0.05, "window_s": 2.0, "kf_max_interval_s": 0.5, "max_outlier_count": 3,
      "retriangulate_outliers": False, **_BEFORE_ISSUE12, "mono_max_landmarks_per_kf": 40}),
    ("+ IMU white noise x30, bias walk x5 (fixed)",
     {"imu_noise_measured": False, "imu_noise_scale": 30.0, "max_landmarks_per_kf": 40, "relinearize_threshold": 0.05,
      "window_s": 2.0, "kf_max_interval_s": 0.5, "max_outlier_count": 3, "retriangulate_outliers": False,
      **_BEFORE_ISSUE12, "mono_max_landmarks_per_kf": 40}),
    ("+ IMU white noise measured from the stream instead",
     {"max_landmarks_per_kf": 40, "relinearize_threshold": 0.05, "window_s": 2.0, "kf_max_interval_s": 0.5,
      "max_outlier_count": 3, "retriangulate_outliers": False, **_BEFORE_ISSUE12, "mono_max_landmarks_per_kf": 40}),
    ("+ relinearize threshold 0.01, 60 observations per keyframe",
     {"window_s": 2.0, "kf_max_interval_s": 0.5, "max_outlier_count": 3, "retriangulate_outliers": False,
      **_BEFORE_ISSUE12}),
    ("+ a rejected observation ends its landmark (the drifting track re-triangulates), blacklist after 10",
     {"window_s": 2.0, "kf_max_interval_s": 0.5, **_BEFORE_ISSUE12}),
    ("+ 1 s window, keyframe at least every 0.4 s", dict(_BEFORE_ISSUE12)),
    ("+ no landmark prior in stereo, mono window 3 s (time per keyframe)", dict(_MONO_BEFORE_GRID)),
    ("+ mono: 45 observations per keyframe spread over a 4x4 grid, window 2.5 s (time per keyframe; today's "
     "defaults)", {}),
]



def peer_python(arg: str | None) -> tuple[str | None, str]:
    """(python executable with dim_odom, '') or (None, reason)."""
    import importlib.util

    cand = arg or os.environ.get("VILIB_ROS_PEERS_PYTHON")
    if cand:
        if not Path(cand).is_file():
            return None, f"--peer-python {cand} does not exist"
        r = subprocess.run([cand, "-c", "import dim_odom"], capture_output=True, text=True)
        if r.returncode:
            return None, f"dim_odom not importable by {cand}: {r.stderr.strip().splitlines()[-1:]}"
        return cand, ""
    if importlib.util.find_spec("dim_odom") is not None:
        return sys.executable, ""
    return None, ("dim_odom (cuVSLAM) not installed: pip install '.[peers]' into a separate environment "
                  "and pass --peer-python (or set VILIB_ROS_PEERS_PYTHON)")


def run_sequence(name: str, args, cache: Path, tmp: Path, peer) -> dict:
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SyntheticSequence

    res = {"name": name, "rows": [], "changes": []}
    if name == "euroc_head":
        d = euroc_dir()
        if d is None:
            res["skipped"] = "real EuRoC frames not found"
            return res
        ds = open_dataset(d)
        res["data"] = f"{len(ds.image_stamps(0))} real EuRoC V1_01 cam0 frames (vehicle at rest), real IMU; mono"
        gt_tum = gt_tum_of(ds, tmp)
        frames, fsec = our_tracks(ds, args.device, cache, stereo=False)
        est, bsec = run_backend(frames, ds.imu_stamps, ds.imu_data, ds.cameras[0], None, ds.imu_noise, "mono")
        row = backend_row("ours", "our tracks (mono)", est, bsec, gt_tum, tmp)
        row["frontend_ms"] = 1e3 * float(np.median(fsec))
        res["rows"].append(row)
        return res
    cfg = sequence_config(name, args.duration)
    if cfg is None:
        res["skipped"] = "real EuRoC V1_01 ground truth / IMU not found (../shared/data/euroc_v101_head)"
        return res
    seq = SyntheticSequence(cfg)
    ds_path = rendered(cfg, cache, args.workers)
    ds = open_dataset(ds_path)
    gt_tum = gt_tum_of(ds, tmp)
    c0, c1 = ds.cameras[0], ds.cameras[1]
    length = float(np.sum(np.linalg.norm(np.diff(ds.groundtruth.p, axis=0), axis=1)))
    res["data"] = (f"{cfg.name}: {seq.num_frames} stereo frames 752x480 at 20 Hz "
                   f"({(seq.frame_stamps_ns[-1] - seq.frame_stamps_ns[0]) * 1e-9:.0f} s, {length:.0f} m), "
                   + ("real EuRoC V1_01 trajectory and real IMU" if cfg.recorded_imu else
                      "generator trajectory, synthetic IMU (EuRoC datasheet noise, bias walk)")
                   + f", room {' x '.join(f'{v:.1f}' for v in seq.room_size)} m")
    imu_t, imu_d = ds.imu_stamps, ds.imu_data
    if getattr(args, "tracks_variants", ""):
        from bench.tracks import deformation_floor, parse_variants, run_variants

        res["tracks_variants"] = run_variants(seq, ds, parse_variants(args.tracks_variants), args, cache, tmp, gt_tum)
        res["deformation_floor"] = deformation_floor(seq, ds)
    if getattr(args, "tracks_only", False):
        return res
    ex = {}
    for sigma in (0.0, 0.5):
        ex[sigma] = exact_tracks(seq, sigma, cache)
        modes = ("stereo", "mono") if sigma == 0.5 else ("stereo",)
        for mode in modes:
            est, bsec = run_backend(ex[sigma], imu_t, imu_d, c0, c1, ds.imu_noise, mode)
            res["rows"].append(backend_row("ours (a)", f"exact tracks {sigma:g} px", est, bsec, gt_tum, tmp))
    ours = None
    if not args.no_frontend:
        ours, fsec = our_tracks(ds, args.device, cache)
        res["track_errors"] = track_errors(seq, ours)
        for mode in ("stereo", "mono"):
            est, bsec = run_backend(ours, imu_t, imu_d, c0, c1, ds.imu_noise, mode)
            row = backend_row("ours (b)", f"our tracks ({args.device})", est, bsec, gt_tum, tmp)
            row["frontend_ms"] = 1e3 * float(np.median(fsec))
            row["tracks_median"] = float(np.median([len(f) for f in ours]))
            # whole VIO, frontend then backend in one thread (the offline runner overlaps them)
            row["vio_fps"] = len(ours) / (float(np.sum(fsec)) + float(np.sum(bsec)))
            res["rows"].append(row)
    if not args.no_peer:
        res["rows"] += cuvslam_rows(*peer, ds_path, gt_tum, tmp, args.peer_gpu)
    if args.changes and name in args.changes.split(","):
        inputs = [("exact tracks 0.5 px", ex[0.5])] + ([(f"our tracks ({args.device})", ours)] if ours else [])
        for what, ov in CHANGES:
            ch = {"change": what}
            for inp, frames in inputs:
                for mode in ("stereo", "mono"):
                    est, bsec = run_backend(frames, imu_t, imu_d, c0, c1, ds.imu_noise, mode, **ov)
                    r = backend_row(what, inp, est, bsec, gt_tum, tmp)
                    ch[f"{inp}|{mode}"] = {k: r.get(k) for k in ("ate_causal_m", "ate_smoothed_m", "keyframe_ms",
                                                                 "keyframes", "resets")}
            res["changes"].append(ch)
    return res


def markdown(res: dict) -> str:
    m = res["machine"]
    L = [f"# Trajectory accuracy against cuVSLAM ({res['date']})", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, gtsam {m['gtsam']}, "
         f"{m.get('libraries', '?')}; frontend device `{res['device']}`; load average at start {res['load_start']}, at end {res['load_end']}.", "",
         f"Command: `{res['command']}`", ""]
    loads = [x[0] for x in (res.get("load_start"), res.get("load_end")) if x]
    if loads and max(loads) > (m["cores"] or 1):
        L += [f"**This run shared the machine (load average up to {max(loads):.1f} on {m['cores']} cores, rising "
              "while it ran: the change table ran last): the times (keyframe ms, frames/s) are inflated by the "
              "sharing and comparable only within a table; the ATEs are deterministic and not affected.**", ""]
    L += [
         "ATE: SE3-aligned RMSE (evo) against the exact ground truth. *Causal* = what `backend_node` publishes "
         "per frame (keyframe estimates, IMU prediction between them); *smoothed* = the trajectory written at "
         "shutdown. RPE: translation error per metre (1 m segments, causal). cuVSLAM's output is causal.", ""]
    for s in res["sequences"]:
        L += [f"## {s['name']}", ""]
        if s.get("skipped"):
            L += [f"Skipped: {s['skipped']}", ""]
            continue
        L += [f"Data: {s['data']}", "",
              "| system | input | mode | ATE causal [m] | ATE smoothed [m] | RPE [m/m] | keyframe ms (median / p90) | "
              "obs per keyframe | keyframes | resets | frames/s |",
              "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|"]
        for r in s["rows"]:
            if r.get("skipped"):
                L.append(f"| {r['system']} | {r['input']} | {r['mode']} | skipped: {r['skipped']} ||||||||")
                continue
            fps = r.get("vio_fps")
            if fps is None and r.get("ms_per_frame"):
                fps = 1e3 / r["ms_per_frame"]
            kf = (f"{fmt(r.get('keyframe_ms'), '{:.2f}')} / {fmt(r.get('keyframe_ms_p90'), '{:.2f}')}"
                  if r.get("keyframe_ms") is not None else "-")
            L.append(f"| {r['system']} | {r['input']} | {r['mode']} | {fmt(r.get('ate_causal_m'))} | "
                     f"{fmt(r.get('ate_smoothed_m'))} | {fmt(r.get('rpe_causal_m_per_m'))} | {kf} | "
                     f"{fmt(r.get('obs_per_keyframe'), '{:.0f}')} | {r.get('keyframes', '-')} | {r.get('resets', '-')} | "
                     f"{fmt(fps, '{:.0f}')} |")
        L.append("")
        te = s.get("track_errors")
        if te:
            L += ["Our tracks against the exact flow (px; by track age in frames, and the right-image match):", "",
                  "| age | " + " | ".join(te) + " |", "|---|" + "---:|" * len(te),
                  "| median | " + " | ".join(f"{v['median']:.2f}" for v in te.values()) + " |",
                  "| p90 | " + " | ".join(f"{v['p90']:.2f}" for v in te.values()) + " |",
                  "| > 2 px | " + " | ".join(f"{100 * v['over_2px']:.0f} %" for v in te.values()) + " |", ""]
        if s.get("changes"):
            cols = [k for k in s["changes"][0] if k != "change"]
            L += ["Backend changes, each row cumulative, same tracks, same run (ATE causal / smoothed [cm], "
                  "keyframe ms median):", "",
                  "| change | " + " | ".join(c.replace("|", ", ") for c in cols) + " |",
                  "|---|" + "---|" * len(cols)]
            for ch in s["changes"]:
                cells = []
                for c in cols:
                    v = ch[c]
                    cells.append(f"{fmt(v['ate_causal_m'] and 100 * v['ate_causal_m'], '{:.2f}')} / "
                                 f"{fmt(v['ate_smoothed_m'] and 100 * v['ate_smoothed_m'], '{:.2f}')}, "
                                 f"{fmt(v['keyframe_ms'], '{:.1f}')} ms" + (f", {v['resets']} resets" if v['resets'] else ""))
                L.append(f"| {ch['change']} | " + " | ".join(cells) + " |")
            L.append("")
    L += ["## Targets", "", res["verdict"], ""]
    return "\n".join(L) + "\n"


def summary(res: dict) -> tuple[dict, str]:
    """accuracy.json's per-sequence keys and the verdict against the targets."""
    per, lines = {}, []
    for s in res["sequences"]:
        if s.get("skipped"):
            continue
        rows = s["rows"]

        def pick(system, inp_start, mode, key):
            for r in rows:
                if r["system"].startswith(system) and r["input"].startswith(inp_start) and r.get("mode") == mode \
                        and not r.get("skipped"):
                    return r.get(key)
            return None

        d = {"ours_stereo_ate_m": pick("ours (b)", "our tracks", "stereo", "ate_causal_m"),
             "ours_stereo_smoothed_ate_m": pick("ours (b)", "our tracks", "stereo", "ate_smoothed_m"),
             "ours_mono_ate_m": pick("ours (b)", "our tracks", "mono", "ate_causal_m"),
             "cuvslam_stereo_ate_m": pick("cuVSLAM", "stereo", "stereo", "ate_causal_m"),
             "cuvslam_stereo_imu_ate_m": next((r.get("ate_causal_m") for r in rows if r["system"].startswith("cuVSLAM")
                                               and r["input"] == "stereo + IMU" and not r.get("skipped")), None),
             "gt_tracks_ate_m": pick("ours (a)", "exact tracks 0.5", "stereo", "ate_causal_m"),
             "gt_tracks_mono_ate_m": pick("ours (a)", "exact tracks 0.5", "mono", "ate_causal_m"),
             "vio_fps": pick("ours (b)", "our tracks", "stereo", "vio_fps"),
             "keyframe_ms_stereo": pick("ours (b)", "our tracks", "stereo", "keyframe_ms")}
        if s["name"] == "euroc_head":
            d = {"ours_mono_ate_m": pick("ours", "our tracks", "mono", "ate_causal_m")}
        per[s["name"]] = d
        cu = d.get("cuvslam_stereo_ate_m")
        if cu:
            for key, lim, what in (("ours_stereo_ate_m", cu, "stereo-inertial causal <= cuVSLAM stereo"),
                                   ("ours_mono_ate_m", 2 * cu, "mono-inertial causal <= 2x cuVSLAM stereo")):
                v = d.get(key)
                if v is not None:
                    lines.append(f"- {s['name']}: {what}: {100 * v:.2f} cm vs {100 * lim:.2f} cm: "
                                 + ("**met**" if v <= lim else "**missed**"))
        elif s["name"] != "euroc_head":
            lines.append(f"- {s['name']}: no cuVSLAM row in this run (see the table), targets not judged")
    return per, "\n".join(lines) or "No target could be judged in this run."


def configure_parser(p) -> None:
    p.add_argument("--out", default="bench/results", help="folder for accuracy.json / accuracy.md")
    p.add_argument("--sequences", default="v101,synthetic60,euroc_head",
                   help="comma-separated: v101, synthetic60, euroc_head")
    p.add_argument("--duration", type=float, default=None, help="cut each rendered sequence to this many seconds")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--cache", default=".data/bench_cache", help="rendered sequences and tracks are kept here")
    p.add_argument("--workers", type=int, default=None, help="render processes (default: CPU count)")
    p.add_argument("--no-frontend", action="store_true", help="skip (b), our tracks (slow on a CPU)")
    p.add_argument("--no-peer", action="store_true", help="skip (c), cuVSLAM")
    p.add_argument("--peer-python", default=None, help="Python with dim_odom installed (the peers extra)")
    p.add_argument("--peer-gpu", action="store_true", help="cuVSLAM's GPU tracker instead of its CPU tracker")
    p.add_argument("--changes", nargs="?", const="v101", default="",
                   help="also run the table of backend changes (CHANGES) on these sequences (default v101)")
    p.add_argument("--tracks-variants", default="",
                   help="comma-separated frontend variants of bench.tracks.VARIANTS (or 'all'): the tracks "
                        "quality table (CPU frontend), written to tracks_quality.md / .json")
    p.add_argument("--tracks-only", action="store_true",
                   help="only the tracks quality table (no rows (a)-(c); accuracy.md / .json are not written)")
    p.add_argument("--tracks-timing-frames", type=int, default=300,
                   help="frames of the interleaved frontend timing of the tracks variants (0 = none)")
    p.add_argument("--conditions", default="",
                   help="comma-separated imaging conditions (clean, distort, blur, blur20, 10hz, 6.7hz) or 'all': "
                        "the conditions table (v101 and synthetic60, --duration default 50 s), written to "
                        "accuracy_conditions.md / .json instead of the accuracy table")


def run_command(args) -> int:
    from vilib_ros._cuda import device_name, resolve_device
    from bench.results import load as _load
    from bench.results import machine as _machine

    logging.getLogger("vilib_ros.backend.estimator").setLevel(logging.ERROR)
    args.device = resolve_device(args.device)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in args.sequences.split(",") if s.strip()]
    bad = [n for n in names if n not in ("v101", "synthetic60", "euroc_head")]
    if bad:
        print(f"python -m bench accuracy: unknown sequence(s) {bad}; choose from v101, synthetic60, euroc_head",
              file=sys.stderr)
        return 2
    if args.tracks_variants:
        from bench.tracks import parse_variants

        try:
            parse_variants(args.tracks_variants)
        except ValueError as exc:
            print(f"python -m bench accuracy: {exc}", file=sys.stderr)
            return 2
    elif args.tracks_only:
        print("python -m bench accuracy: --tracks-only needs --tracks-variants", file=sys.stderr)
        return 2
    if args.conditions:
        from bench.conditions import parse_conditions

        try:
            parse_conditions(args.conditions)
        except ValueError as exc:
            print(f"python -m bench accuracy: {exc}", file=sys.stderr)
            return 2
        if args.tracks_variants or args.changes:
            print("python -m bench accuracy: --conditions runs alone (no --tracks-variants, no --changes)",
                  file=sys.stderr)
            return 2
    if args.tracks_only:
        args.no_peer = True
        names = [n for n in names if n != "euroc_head"]
    peer = (None, "--no-peer") if args.no_peer else peer_python(args.peer_python)
    if peer[0] is None and not args.no_peer:
        print(f"bench-accuracy: cuVSLAM rows skipped: {peer[1]}", file=sys.stderr)
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": _machine(),
           "device": device_name() if args.device == "cuda" else "cpu", "load_start": _load(),
           "command": "python -m bench accuracy " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "",
           "sequences": []}
    t0 = time.perf_counter()
    if args.conditions:
        from bench.conditions import markdown as conditions_markdown
        from bench.conditions import run_conditions

        with tempfile.TemporaryDirectory() as tmp:
            res.update(run_conditions(args, cache, Path(tmp), peer, cuda=args.device == "cuda"))
        res["wall_s"] = time.perf_counter() - t0
        res["load_end"] = _load()
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_results(out, "accuracy_conditions", res, conditions_markdown(res))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            t = time.perf_counter()
            s = run_sequence(name, args, cache, Path(tmp), peer)
            s["wall_s"] = time.perf_counter() - t
            res["sequences"].append(s)
            print(f"bench-accuracy: {name} done in {s['wall_s']:.0f} s", file=sys.stderr)
    res["wall_s"] = time.perf_counter() - t0
    res["load_end"] = _load()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.tracks_variants:
        from bench.tracks import markdown as tracks_markdown

        write_results(out, "tracks_quality", res, tracks_markdown(res))
        if args.tracks_only:
            return 0
    res["per_sequence"], res["verdict"] = summary(res)
    write_results(out, "accuracy", res, markdown(res))
    return 0
