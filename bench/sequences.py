"""The accuracy benchmark's pieces that the tracks-quality table and the backend benchmarks share:
the rendered sequences (cached), exact and our tracks, the backend run on them and its row.

Sequences: ``v101`` (the real EuRoC V1_01 trajectory and IMU rendered in stereo) and
``synthetic60`` (the generator's own 60 s trajectory); see :mod:`bench.accuracy`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.results import library_versions

log = logging.getLogger(__name__)


def euroc_dir() -> Path | None:
    """The real EuRoC V1_01 head: ``$VILIB_ROS_EUROC``, ``../shared/data`` beside the checkout or ``.data``."""
    repo = Path(__file__).resolve().parents[1]
    for c in (os.environ.get("VILIB_ROS_EUROC"), repo.parent / "shared" / "data" / "euroc_v101_head",
              repo / ".data" / "euroc_v101_head", Path.cwd() / ".data" / "euroc_v101_head"):
        if c and (Path(c) / "V101_groundtruth_tum.txt").is_file() and (Path(c) / "mav0" / "imu0").is_dir():
            return Path(c)
    return None


def sequence_config(name: str, duration: float | None):
    """SequenceConfig of a named benchmark sequence (None where its data is missing)."""
    from vilib_ros.synthetic import SequenceConfig

    if name == "v101":
        d = euroc_dir()
        if d is None:
            return None
        return SequenceConfig(duration_s=duration or 200.0, recorded_groundtruth=str(d / "V101_groundtruth_tum.txt"),
                              recorded_imu=str(d / "mav0" / "imu0"), name="v101")
    if name == "synthetic60":
        return SequenceConfig(duration_s=duration or 60.0, seed=0, name="synthetic60")
    raise ValueError(f"unknown sequence {name!r}")


def _key(*parts) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:12]


def rendered(cfg, cache: Path, workers: int | None) -> Path:
    """The sequence rendered in the ASL layout (cached by its configuration)."""
    from vilib_ros.synthetic import generate_sequence

    path = cache / f"{cfg.name}_{_key(asdict(cfg), library_versions())}"
    if not (path / "done").is_file():
        t = time.perf_counter()
        print(f"bench-accuracy: rendering {cfg.name} into {path} ...", file=sys.stderr)
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        generate_sequence(path, cfg, progress=sys.stderr.isatty(), workers=workers if main_file else 1,
                          overwrite=True)
        (path / "done").write_text(f"{time.perf_counter() - t:.1f} s\n")
    return path


def _cached(path: Path, make):
    if path.is_file():
        with open(path, "rb") as f:
            return pickle.load(f)
    obj = make()
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    tmp.replace(path)
    return obj


def exact_tracks(seq, sigma: float, cache: Path):
    """(a): occlusion-aware projections of the scene points, ``sigma`` px noise, no outliers."""
    from vilib_ros.synthetic.tracks import synthetic_track_frames

    p = cache / f"exact_{seq.config.name}_{_key(asdict(seq.config), sigma)}.pkl"
    return _cached(p, lambda: synthetic_track_frames(seq, pixel_sigma=sigma, drop_prob=0.01, max_tracks=200,
                                                     outlier_fraction=0.0))


def our_tracks(ds, device: str, cache: Path, stereo: bool = True, fc=None) -> tuple[list, list]:
    """(b): FeatureTracker (``fc``, default FrontendConfig()) on the dataset's images ->
    (TrackFrames, frontend seconds per frame)."""
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.offline import owned

    fc = fc or FrontendConfig()
    p = cache / f"ours_{ds.name}_{_key(str(ds.root), device, repr(fc), stereo, library_versions())}.pkl"

    def make():
        c0 = ds.cameras[0]
        kw = {}
        if stereo:
            c1 = ds.cameras[1]
            kw = {"camera_right": c1, "T_right_left": np.linalg.inv(c1.T_BS) @ c0.T_BS}
        ft = FeatureTracker(c0, fc, device=device, **kw)
        stamps = ds.image_stamps(0)
        ist, idata = ds.imu_stamps, ds.imu_data
        frames, secs = [], []
        j = 0
        t_last = time.perf_counter()
        for k, t in enumerate(stamps):
            t = int(t)
            j0 = j
            while j < len(ist) and ist[j] <= t:
                j += 1
            gyro = np.column_stack([ist[max(0, j0 - 1):j], idata[max(0, j0 - 1):j, :3]]) if len(ist) else None
            left = ds.load_image(0, k)
            right = ds.load_image(1, k) if stereo else None
            a = time.perf_counter()
            frames.append(owned(ft.process(left, t, gyro=gyro, image_right=right)))
            secs.append(time.perf_counter() - a)
            if time.perf_counter() - t_last > 30:
                t_last = time.perf_counter()
                print(f"bench-accuracy: frontend ({device}) {k + 1}/{len(stamps)} frames of {ds.name}",
                      file=sys.stderr)
        return frames, secs

    return _cached(p, make)


def track_errors(seq, frames, starts=(200, 1000, 2000), span: int = 60, ages=(1, 5, 10, 20, 40)) -> dict:
    """Our tracks against the generator's exact flow: for tracks born inside each window of
    ``span`` frames, the distance of the tracked position from where the first observation's
    surface point really is, by track age (frames): {age: {median, p90, over_2px, n}}, plus
    the stereo (right image) error. Drift grows with age where tracking is frame to frame."""
    errs: dict = {}
    st_err = []
    for k0 in starts:
        if k0 + span > len(frames):
            continue
        first: dict = {}
        for k in range(k0, k0 + span):
            fr = frames[k]
            groups: dict = {}
            for j, i in enumerate(fr.ids.tolist()):
                if i not in first:
                    first[i] = (k, fr.uv[j].astype(float))
                elif first[i][0] < k and k - first[i][0] in ages:
                    groups.setdefault(first[i][0], []).append(j)
            for kb, js in groups.items():
                uv0 = np.array([first[int(fr.ids[j])][1] for j in js])
                uvt, vis = seq.gt_flow(kb, k, uv0)
                e = np.linalg.norm(fr.uv[js] - uvt, axis=1)[vis]
                errs.setdefault(k - kb, []).extend(e.tolist())
        fr = frames[k0 + span // 2]
        if fr.uv_right is not None:
            ok = np.isfinite(fr.uv_right[:, 0])
            uvr, vis = seq.gt_flow(k0 + span // 2, k0 + span // 2, fr.uv[ok].astype(float), cam=0, cam_to=1)
            st_err += np.linalg.norm(fr.uv_right[ok] - uvr, axis=1)[vis].tolist()
    out = {}
    for a in ages:
        x = np.asarray(errs.get(a, []))
        if x.size:
            out[str(a)] = {"median": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                           "over_2px": float(np.mean(x > 2)), "n": int(x.size)}
    if st_err:
        x = np.asarray(st_err)
        out["stereo"] = {"median": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                         "over_2px": float(np.mean(x > 2)), "n": int(x.size)}
    return out


def run_backend(frames, imu_t, imu_d, cam0, cam1, imu_noise, mode: str, **overrides):
    """Feed IMU and track frames in time order -> (estimator, backend seconds per frame)."""
    from vilib_ros.backend import BackendConfig, VioEstimator

    est = VioEstimator(BackendConfig(mode=mode, **overrides), cam0, cam1 if mode == "stereo" else None, imu_noise)
    secs = []
    j = 0
    for f in frames:
        while j < len(imu_t) and imu_t[j] <= f.stamp_ns:
            est.add_imu(int(imu_t[j]), imu_d[j, :3], imu_d[j, 3:])
            j += 1
        a = time.perf_counter()
        est.add_frame(f)
        secs.append(time.perf_counter() - a)
    return est, secs


def evaluate_tum(est_tum: Path, gt_tum: Path) -> dict:
    """ATE (SE3, evo) and RPE per metre of a TUM trajectory, or the reason it cannot be evaluated."""
    from vilib_ros.evaluation import evaluate

    try:
        r = evaluate(est_tum, gt_tum, plot=False)
    except ValueError as exc:
        return {"error": str(exc)}
    rpe = r.get("rpe_m_per_1m")
    return {"ate_m": r["ape_m"]["rmse"], "ate_max_m": r["ape_m"]["max"], "rpe_m_per_m": rpe["rmse"] if rpe else None,
            "poses": r["matched_poses"], "length_m": r["path_length_m"]}


def backend_row(label: str, inp: str, est, secs, gt_tum: Path, tmp: Path) -> dict:
    kt = np.array([k["total_s"] for k in est.kf_timings]) * 1e3
    row = {"system": label, "input": inp, "mode": est.mode, "frames": int(est.stats["frames"]),
           "keyframes": int(est.stats["keyframes"]), "resets": int(est.stats["resets"]),
           "keyframe_ms": float(np.median(kt)) if len(kt) else None,
           "keyframe_ms_p90": float(np.percentile(kt, 90)) if len(kt) else None,
           "obs_per_keyframe": float(np.median([k.get("factors", 0) for k in est.kf_timings])) if len(kt) else None,
           "landmarks_created": int(est.stats["landmarks_created"]), "backend_s": float(np.sum(secs)),
           "init": est.stats["init_kind"]}
    for smoothed in (False, True):
        f = tmp / f"{_key(label, inp, est.mode, smoothed)}.txt"
        est.write_tum(f, smoothed=smoothed)
        ev = evaluate_tum(f, gt_tum)
        tag = "smoothed" if smoothed else "causal"
        row[f"ate_{tag}_m"] = ev.get("ate_m")
        row[f"rpe_{tag}_m_per_m"] = ev.get("rpe_m_per_m")
        if "error" in ev:
            row["error"] = ev["error"]
    return row


def gt_tum_of(ds, tmp: Path) -> Path:
    p = tmp / f"gt_{ds.name}.txt"
    ds.groundtruth.write_tum(p)
    return p


def fmt(v, fmt="{:.4f}"):
    return "-" if v is None else fmt.format(v)


def cuvslam_rows(py, reason, ds_path: Path, gt_tum: Path, tmp: Path, gpu: bool) -> list[dict]:
    rows = []
    for imu in (False, True):
        label = "cuVSLAM " + ("GPU" if gpu else "CPU tracker")
        inp = "stereo + IMU" if imu else "stereo"
        row = {"system": label, "input": inp, "mode": "stereo"}
        if py is None:
            row["skipped"] = reason
            rows.append(row)
            continue
        out = tmp / f"cuvslam_{int(imu)}.txt"
        cmd = [py, str(Path(__file__).with_name("cuvslam_peer.py")), str(ds_path), str(out)]
        cmd += (["--imu"] if imu else []) + (["--gpu"] if gpu else [])
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        row["wall_s"] = time.perf_counter() - t
        try:
            info = json.loads(r.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            info = {}
        if r.returncode or not out.is_file():
            import re

            err = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in r.stderr.splitlines()
                   if "ERROR" in ln or "Error" in ln or "error" in ln]
            row["skipped"] = (f"cuVSLAM gave no pose (exit {r.returncode}): "
                              + (err[-1].strip()[-240:] if err else r.stderr.strip()[-240:]))
            rows.append(row)
            continue
        row["ms_per_frame"] = info.get("ms_per_frame")
        row["poses"] = info.get("poses")
        ev = evaluate_tum(out, gt_tum)
        row["ate_causal_m"] = ev.get("ate_m")
        row["rpe_causal_m_per_m"] = ev.get("rpe_m_per_m")
        if "error" in ev:
            row["skipped"] = ev["error"]
        rows.append(row)
    return rows
