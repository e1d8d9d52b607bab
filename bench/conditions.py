"""``python -m bench accuracy --conditions ...``: the trajectory error under real imaging conditions.

Each benchmark sequence (``v101``: the real EuRoC V1_01 trajectory and IMU, its first ``--duration``
seconds, default 50; ``synthetic60``: the generator's own trajectory) is rendered under each named
condition of :data:`vilib_ros.synthetic.sequence.CONDITIONS`:

* ``clean``: pinhole cameras, 1 grey level of Gaussian noise;
* ``distort``: EuRoC's radial-tangential lenses (each camera its own coefficients), rendered through the lens;
* ``blur``: the lenses + 8 ms motion blur + shot noise (10 electrons per grey level) and 2 grey levels of read
  noise + auto-exposure steps (every 4 s on average) + vignetting (30 % at the corners);
* ``blur20``: the same with a 20 ms exposure;
* ``10hz``, ``6.7hz``: ``blur`` with the cameras at 10 and 20/3 Hz (the IMU stays at 200 Hz).

Rows per sequence and condition: our frontend on the CPU (stereo, and mono from the left tracks of the same
run) into our backend; the GPU frontend too where CUDA exists (``ours_stereo_ate_m`` and ``ours_mono_ate_m``
are then the GPU frontend's: ``frontend`` says which; ``ours_stereo_cpu_ate_m`` is always the CPU
frontend's); cuVSLAM (stereo) where ``--peer-python`` gives a Python with ``dim_odom``, else skipped with the
reason. ATE: SE3-aligned RMSE (evo) of the causal odometry against the exact ground truth.

Writes ``accuracy_conditions.json`` (one row per sequence and condition) and ``accuracy_conditions.md``.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.sequences import (backend_row, cuvslam_rows, fmt, gt_tum_of, our_tracks, rendered, run_backend,
                             sequence_config, track_errors)

SEQUENCES = ("v101", "synthetic60")


def parse_conditions(text: str) -> list[str]:
    from vilib_ros.synthetic.sequence import CONDITIONS

    names = list(CONDITIONS) if text.strip() == "all" else [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in names if c not in CONDITIONS]
    if bad or not names:
        raise ValueError(f"unknown condition(s) {bad or [text]}; choose from {', '.join(CONDITIONS)} or 'all'")
    return names


def condition_config(sequence: str, condition: str, duration: float):
    """The SequenceConfig of ``sequence`` cut to ``duration`` s under ``condition`` (None without its data)."""
    from vilib_ros.synthetic.sequence import CONDITIONS

    base = sequence_config(sequence, duration)
    if base is None:
        return None
    return replace(base, **CONDITIONS[condition], name=f"{sequence}_{condition}")


def _ours(ds, seq, device: str, cache: Path, tmp: Path, gt_tum: Path) -> dict:
    """Our frontend on ``device``, then the backend in stereo and in mono: ATEs, resets, frames/s."""
    frames, fsec = our_tracks(ds, device, cache)
    imu_t, imu_d = ds.imu_stamps, ds.imu_data
    c0, c1 = ds.cameras[0], ds.cameras[1]
    out = {"tracks_median": float(np.median([len(f) for f in frames])), "frontend_s": float(np.sum(fsec)),
           "backend_s": 0.0}
    for mode in ("stereo", "mono"):
        est, bsec = run_backend(frames, imu_t, imu_d, c0, c1, ds.imu_noise, mode)
        row = backend_row("ours", f"our tracks ({device})", est, bsec, gt_tum, tmp)
        out["backend_s"] += float(np.sum(bsec))
        out[mode] = {"ate_m": row.get("ate_causal_m"), "resets": row["resets"], "error": row.get("error"),
                     "tracking_lost": int(est.stats["tracking_lost"])}
        if mode == "stereo":
            # whole VIO, frontend then backend in one thread (the offline runner overlaps them)
            out["vio_fps"] = len(frames) / (float(np.sum(fsec)) + float(np.sum(bsec)))
    te = track_errors(seq, frames, starts=(len(frames) // 5, len(frames) // 2), span=40, ages=(1, 10))
    out["track_err_px"] = {a: te[a]["median"] for a in ("1", "10", "stereo") if a in te}
    return out


def run_conditions(args, cache: Path, tmp: Path, peer, cuda: bool) -> dict:
    """Every sequence of ``args.sequences`` (v101, synthetic60) under every condition of ``args.conditions``."""
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SyntheticSequence

    duration = args.duration or 50.0
    conditions = parse_conditions(args.conditions)
    names = [n for n in args.sequences.split(",") if n.strip() in SEQUENCES]
    rows, skipped = [], []
    for name in names:
        for cond in conditions:
            cfg = condition_config(name, cond, duration)
            if cfg is None:
                skipped.append(f"{name}: real EuRoC V1_01 ground truth / IMU not found (../shared/data/euroc_v101_head)")
                break
            t0 = time.perf_counter()
            ds_path = rendered(cfg, cache, args.workers)
            t_render = time.perf_counter() - t0
            seq = SyntheticSequence(cfg)
            ds = open_dataset(ds_path)
            gt_tum = gt_tum_of(ds, tmp)
            cpu = _ours(ds, seq, "cpu", cache, tmp, gt_tum)
            main = _ours(ds, seq, "cuda", cache, tmp, gt_tum) if cuda else cpu
            row = {"name": f"{name}/{cond}", "sequence": name, "condition": cond,
                   "ours_stereo_ate_m": main["stereo"]["ate_m"], "ours_stereo_cpu_ate_m": cpu["stereo"]["ate_m"],
                   "ours_mono_ate_m": main["mono"]["ate_m"], "cuvslam_stereo_ate_m": None,
                   "vio_fps": main["vio_fps"], "resets": main["stereo"]["resets"],
                   "mono_resets": main["mono"]["resets"], "frontend": "cuda" if cuda else "cpu",
                   "frames": seq.num_frames, "rate_hz": cfg.rate_hz, "tracks_median": main["tracks_median"],
                   "track_err_px": main["track_err_px"],
                   "tracking_lost": {"stereo": main["stereo"]["tracking_lost"], "mono": main["mono"]["tracking_lost"]}}
            if cuda:
                row["ours_mono_cpu_ate_m"] = cpu["mono"]["ate_m"]
            errors = [m[mode]["error"] for m in (cpu, main) for mode in ("stereo", "mono") if m[mode]["error"]]
            if errors:
                row["error"] = errors[0]
            if not args.no_peer:
                cu = [r for r in cuvslam_rows(*peer, ds_path, gt_tum, tmp, args.peer_gpu) if r["input"] == "stereo"][0]
                row["cuvslam_stereo_ate_m"] = cu.get("ate_causal_m")
                if cu.get("skipped"):
                    row["cuvslam_skipped"] = cu["skipped"]
            # the rendering and the frontend as they were timed when made (the cache keeps both)
            done = ds_path / "done"
            made = float(done.read_text().split()[0]) if done.is_file() else t_render
            row["wall_s"] = {"render": made, "frontend_cpu": cpu["frontend_s"], "backend_cpu": cpu["backend_s"],
                             "this_run": time.perf_counter() - t0}
            if cuda:
                row["wall_s"]["frontend_cuda"] = main["frontend_s"]
            rows.append(row)
            print(f"bench-accuracy: {row['name']}: stereo {fmt(row['ours_stereo_ate_m'])} m, mono "
                  f"{fmt(row['ours_mono_ate_m'])} m ({row['wall_s']['this_run']:.0f} s)", file=sys.stderr)
    return {"duration_s": duration, "conditions": conditions, "rows": rows, "skipped": skipped}


def _cm(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def markdown(res: dict) -> str:
    m = res["machine"]
    w = {k: sum(r["wall_s"].get(k, 0.0) for r in res["rows"]) / 60 for k in ("render", "frontend_cpu", "backend_cpu")}
    L = [f"# Trajectory accuracy under imaging conditions ({res['date']})", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, gtsam {m['gtsam']}, "
         f"{m.get('libraries', '?')}; frontend `{res['device']}`; load average at start {res['load_start']}, at end {res['load_end']}.", "",
         f"Times on this machine: rendering {w['render']:.0f} min (two processes), the CPU frontend "
         f"{w['frontend_cpu']:.0f} min, the backends (stereo and mono) {w['backend_cpu']:.1f} min; this run "
         f"{res['wall_s'] / 60:.1f} min (the rendered sequences and the tracks are cached in `--cache` and timed "
         "when they were made).", "",
         f"Command: `{res['command']}`", "",
         f"Each sequence's first {res['duration_s']:g} s rendered by the generator under each condition "
         "(`vilib_ros.synthetic.sequence.CONDITIONS`): *clean* pinhole; *distort* EuRoC's radial-tangential "
         "lenses rendered through the lens; *blur* lenses + 8 ms motion blur + shot noise (10 e-/grey level) and "
         "2 grey levels of read noise + auto-exposure steps (every 4 s on average) + 30 % vignetting; *blur20* "
         "the same with 20 ms; *10hz*, *6.7hz* blur with the cameras at 10 and 20/3 Hz (IMU 200 Hz).", "",
         "ATE: SE3-aligned RMSE (evo) of the causal odometry (what `backend_node` publishes per frame) against the "
         "exact ground truth, cm. *ours stereo* and *ours mono* come from the frontend named in the column "
         "*frontend* (the GPU's where CUDA exists), *ours stereo CPU* from the CPU frontend; mono runs on the left "
         "tracks of the stereo run. Frames/s: frontend then backend in one thread (stereo). Track error: median "
         "distance (px) of our tracks from the exact flow, 1 and 10 frames after their birth, and of the right "
         "image's match.", ""]
    loads = [x[0] for x in (res.get("load_start"), res.get("load_end")) if x]
    if loads and max(loads) > (m["cores"] or 1):
        L += [f"**This run shared the machine (load average up to {max(loads):.1f} on {m['cores']} cores): frames/s "
              "are inflated by the sharing; the ATEs are deterministic and not affected.**", ""]
    L += ["| sequence | condition | frontend | ours stereo | ours stereo CPU | ours mono | cuVSLAM stereo | "
          "frames/s | resets (stereo / mono) | tracks | track error 1 / 10 / stereo [px] |",
          "|---|---|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in res["rows"]:
        te = r.get("track_err_px", {})
        L.append(f"| {r['sequence']} | {r['condition']} ({r['frames']} frames at {r['rate_hz']:.3g} Hz) | "
                 f"{r['frontend']} | {_cm(r['ours_stereo_ate_m'])} | {_cm(r['ours_stereo_cpu_ate_m'])} | "
                 f"{_cm(r['ours_mono_ate_m'])} | {_cm(r['cuvslam_stereo_ate_m'])} | {fmt(r['vio_fps'], '{:.0f}')} | "
                 f"{r['resets']} / {r['mono_resets']} | {r['tracks_median']:.0f} | "
                 + " / ".join(fmt(te.get(a), "{:.2f}") for a in ("1", "10", "stereo")) + " |")
    L.append("")
    skipped = sorted({r["cuvslam_skipped"] for r in res["rows"] if r.get("cuvslam_skipped")})
    for s in skipped + res.get("skipped", []):
        L += [f"Skipped: {s}", ""]
    return "\n".join(L) + "\n"
