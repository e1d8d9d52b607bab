"""Tracks an estimator can trust: frontend variants on the same rendered sequences, each measured
against the generator's exact flow and through our backend (``python -m bench accuracy
--tracks-variants``; written to ``tracks_quality.md`` / ``.json`` beside ``accuracy.md``).

Per variant (a FrontendConfig, :data:`VARIANTS`), from one run of the CPU frontend over the
whole sequence (cached like the other rows):

* our tracks against the exact flow by track age (median / p90 / share over 2 px, px), as in
  :func:`bench.sequences.track_errors`, over tracks born in windows every 100 frames;
* tracks per frame (median), track lifetime (median and mean final age of the tracks, frames);
* the backend (today's BackendConfig) on them, stereo and mono: ATE of the causal and the
  smoothed trajectory;
* frontend ms per frame: ``process()`` (stereo, gyro) of every variant on the same frames,
  interleaved frame by frame so the machine's load hits them alike (``--tracks-timing-frames``).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

#: name -> (what it is, FrontendConfig overrides; ``tracker`` holds TrackerConfig overrides).
#: Every variant names all the fields it measures, so a change of the defaults changes no row.
VARIANTS = {
    "f2f": ("frame to frame (previous-frame template), translation; no outlier rejection",
            {"fb_check": False, "ransac": False, "tracker": {"template": "previous", "warp": "translation"}}),
    "f2f+ransac": ("frame to frame + RANSAC",
                   {"fb_check": False, "ransac": True, "tracker": {"template": "previous", "warp": "translation"}}),
    "f2f+fb+ransac": ("frame to frame + forward-backward check + RANSAC",
                      {"fb_check": True, "ransac": True, "tracker": {"template": "previous", "warp": "translation"}}),
    "ref": ("reference template (detection frame), translation",
            {"fb_check": False, "ransac": False, "tracker": {"template": "reference", "warp": "translation"}}),
    "ref-affine": ("reference template, affine warp",
                   {"fb_check": False, "ransac": False, "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+ransac": ("reference template, affine warp + RANSAC",
                          {"fb_check": False, "ransac": True, "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+fb+ransac": ("reference template, affine warp + forward-backward check + RANSAC",
                             {"fb_check": True, "ransac": True,
                              "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+fb+ransac+fblevels2": ("the same, the backward track on the 2 finest levels (fb_levels 2): it "
                                             "starts at the old position",
                                             {"fb_check": True, "fb_levels": 2, "ransac": True,
                                              "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+fb+ransac+fblevels1": ("the same, the backward track on the finest level only (fb_levels 1)",
                                            {"fb_check": True, "fb_levels": 1, "ransac": True,
                                             "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+fb1+ransac": ("the same, forward-backward threshold 1 px instead of 0.5",
                              {"fb_check": True, "fb_threshold": 1.0, "ransac": True,
                               "tracker": {"template": "reference", "warp": "affine"}}),
    "ref-affine+fb+ransac+end20": ("the same (0.5 px), a track ends where LK's mean |residual| exceeds 20",
                                   {"fb_check": True, "ransac": True,
                                    "tracker": {"template": "reference", "warp": "affine", "max_residual": 20.0}}),
    "ref-affine+fb+ransac+refresh15": ("the same, the template is taken again where the residual exceeds 15",
                                       {"fb_check": True, "ransac": True,
                                        "tracker": {"template": "reference", "warp": "affine",
                                                    "template_refresh_residual": 15.0}}),
    "ref-affine+fb+ransac+age20": ("the same, the template is taken again every 20 frames",
                                   {"fb_check": True, "ransac": True,
                                    "tracker": {"template": "reference", "warp": "affine", "template_max_age": 20}}),
}
AGES = (1, 5, 10, 20, 30, 40)


def frontend_config(name: str):
    """The FrontendConfig of variant ``name`` (today's defaults plus its overrides)."""
    from vilib_ros.frontend import FrontendConfig

    if name not in VARIANTS:
        raise ValueError(f"unknown tracks variant {name!r}; choose from {', '.join(VARIANTS)}")
    ov = dict(VARIANTS[name][1])
    base = FrontendConfig()
    tr = dataclasses.replace(base.tracker, **ov.pop("tracker", {}))
    return dataclasses.replace(base, tracker=tr, **ov).validate()


def parse_variants(arg: str) -> list[str]:
    names = list(VARIANTS) if arg.strip() == "all" else [s.strip() for s in arg.split(",") if s.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        raise ValueError(f"unknown tracks variant(s) {bad}; choose from all, {', '.join(VARIANTS)}")
    return names


def lifetimes(frames) -> np.ndarray:
    """Final age (frames) of every track seen in ``frames``."""
    life: dict = {}
    for fr in frames:
        for i, a in zip(fr.ids.tolist(), fr.age.tolist()):
            life[i] = a
    return np.asarray(list(life.values()), float)


def timing(ds, names: list[str], n_frames: int, start: int = 0) -> dict:
    """Median ``process()`` ms per frame of each variant (stereo, gyro), interleaved frame by frame."""
    from vilib_ros.frontend import FeatureTracker

    c0, c1 = ds.cameras[0], ds.cameras[1]
    T_rl = np.linalg.inv(c1.T_BS) @ c0.T_BS
    fts = {n: FeatureTracker(c0, frontend_config(n), device="cpu", camera_right=c1, T_right_left=T_rl) for n in names}
    stamps = ds.image_stamps(0)
    ist, idata = ds.imu_stamps, ds.imu_data
    secs: dict = {n: [] for n in names}
    end = min(len(stamps), start + n_frames)
    for k in range(start, end):
        t = int(stamps[k])
        m = (ist > t - 60_000_000) & (ist <= t)
        gyro = np.column_stack([ist[m], idata[m, :3]])
        left, right = ds.load_image(0, k), ds.load_image(1, k)
        for n in names:
            a = time.perf_counter()
            fts[n].process(left, t, gyro=gyro, image_right=right)
            secs[n].append(time.perf_counter() - a)
    return {n: {"median_ms": 1e3 * float(np.median(v[1:])), "p90_ms": 1e3 * float(np.percentile(v[1:], 90)),
                "frames": len(v) - 1} for n, v in secs.items() if len(v) > 1}


def deformation_floor(seq, ds, ages=(1, 5, 10, 20, 40), windows: int = 10) -> dict:
    """LK (level 0) from the detection frame's stored templates straight into frame kb + age,
    started at the exact position (the generator's flow): what is left is the template's
    mismatch, translation against affine warp. {warp: {age: {median, p90, over_2px, n}}} over detections in ``windows``
    frames spread over the sequence."""
    from vilib_ros.frontend.config import TrackerConfig
    from vilib_ros.frontend.factory import build_pyramid_host, make_detector, make_tracker
    from vilib_ros.frontend.track_table import TemplateBank
    from vilib_ros.types import TrackStatus

    w, h = ds.cameras[0].width, ds.cameras[0].height
    det = make_detector(w, h, device="cpu")
    # level 0 only: no coarse level to pull the start away; the affine warp starts at identity
    trk = {wp: make_tracker(w, h, TrackerConfig(template="reference", warp=wp, levels=1, patch_sizes=(16,)),
                            device="cpu", max_features=4096) for wp in ("translation", "affine")}
    n = len(ds.image_stamps(0))
    starts = np.linspace(100, n - max(ages) - 1, windows).astype(int)
    errs: dict = {wp: {a: [] for a in ages} for wp in trk}
    for kb in starts:
        img0 = ds.load_image(0, int(kb))
        pts = det.detect(img0).points()
        bank = TemplateBank(len(pts), trk["affine"].config.levels)
        slots = np.arange(len(pts))
        trk["affine"].extract_templates(build_pyramid_host(img0, bank.levels), pts, bank.patch, bank.valid, slots)
        for a in ages:
            gt, vis = seq.gt_flow(int(kb), int(kb) + a, pts)
            img = ds.load_image(0, int(kb) + a)
            for wp, t in trk.items():
                r = t.track_templates(bank.patch, bank.valid, slots[vis], img, gt[vis].astype(np.float32))
                ok = r.status == TrackStatus.TRACKED
                errs[wp][a] += np.linalg.norm(r.pos[ok] - gt[vis][ok], axis=1).tolist()
    out: dict = {}
    for wp, by_age in errs.items():
        out[wp] = {}
        for a, e in by_age.items():
            x = np.asarray(e)
            if x.size:
                out[wp][str(a)] = {"median": float(np.median(x)), "p90": float(np.percentile(x, 90)),
                                   "over_2px": float(np.mean(x > 2)), "n": int(x.size)}
    return out


def run_variants(seq, ds, names: list[str], args, cache, tmp, gt_tum) -> list[dict]:
    """One row per variant (see the module docstring)."""
    from bench.sequences import backend_row, our_tracks, run_backend, track_errors

    c0, c1 = ds.cameras[0], ds.cameras[1]
    starts = tuple(range(100, max(101, len(seq.frame_stamps_ns) - 100), 100))
    rows = []
    for name in names:
        t0 = time.perf_counter()
        frames, fsec = our_tracks(ds, "cpu", cache, fc=frontend_config(name))
        life = lifetimes(frames)
        row = {"variant": name, "what": VARIANTS[name][0], "tracks_median": float(np.median([len(f) for f in frames])),
               "life_median": float(np.median(life)), "life_mean": float(np.mean(life)),
               "frontend_ms_run": 1e3 * float(np.median(fsec)),
               "errors": track_errors(seq, frames, starts=starts, ages=AGES),
               "counters": {k: int(v) for k, v in dict(frames[-1].stats).items()}}
        for mode in ("stereo", "mono"):
            est, bsec = run_backend(frames, ds.imu_stamps, ds.imu_data, c0, c1, ds.imu_noise, mode)
            b = backend_row("ours (b)", name, est, bsec, gt_tum, tmp)
            row[mode] = {k: b.get(k) for k in ("ate_causal_m", "ate_smoothed_m", "rpe_causal_m_per_m", "keyframe_ms",
                                               "keyframes", "resets", "obs_per_keyframe", "error")}
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"bench-accuracy: tracks variant {name} on {seq.config.name}: "
              f"stereo ATE {row['stereo'].get('ate_causal_m')}, {row['wall_s']:.0f} s")
    n_t = int(getattr(args, "tracks_timing_frames", 0) or 0)
    if n_t > 0:
        t = timing(ds, names, n_t, start=min(100, max(0, len(ds.image_stamps(0)) - n_t)))
        for row in rows:
            row["frontend_ms"] = t.get(row["variant"], {}).get("median_ms")
            row["frontend_ms_p90"] = t.get(row["variant"], {}).get("p90_ms")
            row["timing_frames"] = t.get(row["variant"], {}).get("frames")
    return rows


def markdown(res: dict) -> str:
    from bench.sequences import fmt as _f

    m = res["machine"]
    L = [f"# Tracks an estimator can trust ({res['date']})", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, gtsam {m['gtsam']}; CPU frontend "
         f"(compiled); load average at start {res['load_start']}, at end {res['load_end']}.", "",
         f"Command: `{res['command']}`", "",
         "Each variant is one FrontendConfig (`bench/tracks.py`), run over the whole sequence; its tracks "
         "against the generator's exact flow (tracks born in windows every 100 frames; error of the tracked position "
         "from where the first observation's surface point really is, px) and through today's backend (ATE, "
         "SE3-aligned RMSE, cm; causal = what `backend_node` publishes per frame). Frontend ms: `process()` per "
         "stereo frame with gyro, all variants interleaved frame by frame on the same frames.", ""]
    for s in res["sequences"]:
        rows = s.get("tracks_variants")
        if not rows:
            continue
        fl = s.get("deformation_floor") or {}
        L += [f"## {s['name']}", "", f"Data: {s.get('data', '')}", "",
              "| variant | tracks/frame | life median / mean | frontend ms (median / p90) | "
              + " | ".join(f"age {a}: median / p90 / > 2 px" for a in (1, 10, 20, 40))
              + " | stereo match: median / p90 | ATE stereo causal / smoothed | ATE mono causal / smoothed |",
              "|---|---:|---|---|" + "---|" * 4 + "---|---|---|"]
        for r in rows:
            e = r["errors"]
            cells = []
            for a in (1, 10, 20, 40):
                v = e.get(str(a))
                cells.append(f"{v['median']:.2f} / {v['p90']:.2f} / {100 * v['over_2px']:.0f} %" if v else "-")
            st = e.get("stereo")
            ms = (f"{_f(r.get('frontend_ms'), '{:.1f}')} / {_f(r.get('frontend_ms_p90'), '{:.1f}')}"
                  if r.get("frontend_ms") is not None else f"({_f(r.get('frontend_ms_run'), '{:.1f}')})")

            def ate(d):
                c, sm = d.get("ate_causal_m"), d.get("ate_smoothed_m")
                return (f"{_f(c and 100 * c, '{:.2f}')} / {_f(sm and 100 * sm, '{:.2f}')}"
                        + (f", {d['resets']} resets" if d.get("resets") else ""))

            L.append(f"| {r['variant']} | {r['tracks_median']:.0f} | {r['life_median']:.0f} / {r['life_mean']:.1f} | {ms} | "
                     + " | ".join(cells)
                     + f" | {(_f(st['median'], '{:.2f}') + ' / ' + _f(st['p90'], '{:.2f}')) if st else '-'} | "
                     f"{ate(r['stereo'])} | {ate(r['mono'])} |")
        L += ["", "Variants: " + "; ".join(f"`{r['variant']}`: {r['what']}" for r in rows), ""]
        if fl:
            ages = list(next(iter(fl.values())))
            L += ["LK (level 0) from the detection frame's stored template straight into frame k, started at the exact "
                  "position (what remains is the template's mismatch; px, median / p90 / > 2 px):", "",
                  "| warp | " + " | ".join(f"age {a}" for a in ages) + " |", "|---|" + "---|" * len(ages)]
            for wp, by_age in fl.items():
                L.append(f"| {wp} | " + " | ".join(
                    f"{v['median']:.2f} / {v['p90']:.2f} / {100 * v['over_2px']:.0f} %" for v in by_age.values()) + " |")
            L.append("")
    return "\n".join(L) + "\n"
