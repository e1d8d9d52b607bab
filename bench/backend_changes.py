"""``python -m bench backend --changes``: what each backend change does to time and accuracy.

Every row is one configuration of the backend (:data:`CHANGES`: the adopted changes, cumulative,
from the first defaults to today's, on today's code, and the code changes since, each on the code of
its commit; :data:`TRIED`: single changes to today's defaults that were measured and not
adopted). All rows of one column run in lockstep, each in a process of its own,
frame by frame on the same tracks and IMU (the estimators take turns per frame), so that they
share the machine's load; a keyframe's time is comparable within a column only.

Columns: the rendered sequences of ``bench-accuracy`` (v101: the real EuRoC V1_01 trajectory and
IMU; synthetic60: the generator's 60 s sequence) with exact tracks (0.5 px noise) and with our
CPU tracks (today's ``FrontendConfig``), each stereo and mono. Tracks and rendered images come
from (and go into) ``bench-accuracy``'s cache (``.data/bench_cache``). ATE: SE3-aligned RMSE
(evo) of the causal output (what ``backend_node`` publishes per frame) and of the smoothed
trajectory, as in ``accuracy.md``. Writes ``backend_changes.json`` / ``.md`` into ``--out``.
"""
from __future__ import annotations

import datetime as _dt
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: Adopted changes, cumulative: (what, BackendConfig overrides, ISAM2Params overrides[, commit]). The
#: first row restores the first defaults; the last is today's.
#: A row with a commit runs the code of that commit (git archive, in a subprocess fed in the same
#: turns: :class:`RemoteEstimator`): the code changes, each with today's defaults; the rows without
#: one run today's code.
#: what the rows before the rooted smoother need of today's defaults: gtsam's smoother, marginalisation on
#: every keyframe, one relinearisation threshold
#: the smoother and window of every row before the own smoother became stereo's default
ISAM2_1S = {"solver": "isam2", "window_s": 1.0}
_ISAM_BEFORE = {"rooted_smoother": False, "marginalise_every_s": 0.0, "mono_marginalise_every_s": 0.0,
                "relinearize_threshold_landmarks": 0.01, **ISAM2_1S}
_EVERY_KF = {"marginalise_every_s": 0.0, "mono_marginalise_every_s": 0.0, **ISAM2_1S}
_MONO_BEFORE = {"mono_window_s": 3.0, "mono_max_landmarks_per_kf": 60, "mono_landmark_grid": 0,  # before the grid
                **_ISAM_BEFORE}
CHANGES = [
    ("first defaults (mono window 6 s, landmark prior in stereo too, iSAM2 factor slots not reused)",
     {**_MONO_BEFORE, "mono_window_s": 6.0, "landmark_prior_stereo": True}, {"findUnusedFactorSlots": False}),
    ("+ iSAM2 reuses the slots of marginalised factors (findUnusedFactorSlots)",
     {**_MONO_BEFORE, "mono_window_s": 6.0, "landmark_prior_stereo": True}, {}),
    ("+ no landmark prior in stereo (a stereo observation fixes the point)", {**_MONO_BEFORE, "mono_window_s": 6.0}, {}),
    ("+ mono window 3 s instead of 6 s", dict(_MONO_BEFORE), {}),
    ("+ mono: 45 observations per keyframe spread over a 4x4 grid, window 2.5 s",
     dict(_ISAM_BEFORE), {}),
    ("+ fixed-lag smoother with landmarks eliminated first and the newest state last (its covariance from the root "
     "clique; rooted_smoother)", dict(_EVERY_KF), {}),
    ("+ batch marginalisation every 1 s, mono every 1.5 s (on the code of 5c1e4cb, before the code changes "
     "below)", {}, {}, "5c1e4cb"),
    ("+ a keyframe's new landmarks triangulated in one compiled call, the outlier loop inside it (code of 6718741)",
     {}, {}, "6718741"),
    ("+ keyframe keys without pybind calls, the divergence test on plain floats (code of 3cd3314)", {}, {}, "3cd3314"),
    ("+ the measured IMU noise's statistics compiled, the elimination groups kept between marginalisations "
     "(code of 38cb166)", {}, {}, "38cb166"),
    ("+ triangulation: observations passed flat, the null vector from the 4x4 normal matrix; medians by one sort "
     "(the iSAM2 defaults before the own smoother, on today's code)", dict(ISAM2_1S), {}),
    ("+ stereo: the own smoother (solver 'schur': landmarks eliminated in closed form, dense states, VINS-Mono's "
     "marginalisation), window 2 s (today's defaults)", {}, {}),
]

#: index of the row with the defaults before the own smoother (``bench-backend``'s comparison row)
PREVIOUS_ROW = len(CHANGES) - 2

#: Measured and not adopted (what they showed: the md): on the own smoother, and on the iSAM2 defaults
#: before it (those rows carry ISAM2_1S).
TRIED = [
    ("own smoother, window 1 s", {"window_s": 1.0}, {}),
    ("own smoother, window 1.5 s", {"window_s": 1.5}, {}),
    ("own smoother, batch marginalisation every 0.5 s", {"marginalise_every_s": 0.5}, {}),
    ("mono: the own smoother", {"mono_solver": "schur"}, {}),
    ("mono: the own smoother, window 3.5 s", {"mono_solver": "schur", "mono_window_s": 3.5}, {}),
    ("mono: the own smoother, a landmark seen twice by remaining states goes on (VINS-Mono's depth shift)",
     {"mono_solver": "schur", "schur_keep_landmarks": 2}, {}),
    ("mono: the own smoother, a landmark seen once by remaining states goes on (VINS-Mono's depth shift)",
     {"mono_solver": "schur", "schur_keep_landmarks": 1}, {}),
    ("own smoother, a landmark seen twice by remaining states goes on (VINS-Mono's depth shift)", {"schur_keep_landmarks": 2}, {}),
    ("mono: the own smoother, window 4 s, marginalised every keyframe",
     {"mono_solver": "schur", "mono_window_s": 4.0, "mono_marginalise_every_s": 0.0}, {}),
    ("mono: the own smoother, window 4 s, marginalised every 0.5 s",
     {"mono_solver": "schur", "mono_window_s": 4.0, "mono_marginalise_every_s": 0.5}, {}),
    ("mono: the own smoother, window 3.5 s, marginalised every keyframe",
     {"mono_solver": "schur", "mono_window_s": 3.5, "mono_marginalise_every_s": 0.0}, {}),
    ("mono: the own smoother, window 5 s, marginalised every keyframe",
     {"mono_solver": "schur", "mono_window_s": 5.0, "mono_marginalise_every_s": 0.0}, {}),
    ("iSAM2: gtsam's IncrementalFixedLagSmoother", {"rooted_smoother": False, **ISAM2_1S}, {}),
    ("iSAM2: landmarks relinearised at 0.1 m (states at 0.01)", {"relinearize_threshold_landmarks": 0.1, **ISAM2_1S},
     {}),
    ("iSAM2: landmarks relinearised at 0.05 m (states at 0.01)",
     {"relinearize_threshold_landmarks": 0.05, **ISAM2_1S}, {}),
    ("iSAM2: batch marginalisation every 1.5 s in stereo too", {"marginalise_every_s": 1.5, **ISAM2_1S}, {}),
    ("iSAM2: mono batch marginalisation every 1 s", {"mono_marginalise_every_s": 1.0, **ISAM2_1S}, {}),
    ("iSAM2: stereo 50 observations per keyframe", {"max_landmarks_per_kf": 50, **ISAM2_1S}, {}),
]

#: Measured against the iSAM2 defaults with marginalisation on every keyframe, not adopted (their table is in
#: git history). Not rerun by default.
TRIED_1457 = [
    ("stereo: observations spread over a 4x4 grid", {"landmark_grid": 4}, {}),
    ("stereo: 4x4 grid, 50 observations per keyframe", {"landmark_grid": 4, "max_landmarks_per_kf": 50}, {}),
    ("stereo: 50 observations per keyframe", {"max_landmarks_per_kf": 50}, {}),
    ("stereo: window 0.75 s, batch marginalisation every 0.5 s", {"window_s": 0.75, "marginalise_every_s": 0.5}, {}),
    ("mono: window 3 s (45 observations, 4x4 grid)", {"mono_window_s": 3.0}, {}),
    ("mono: 40 observations (4x4 grid, window 2.5 s)", {"mono_max_landmarks_per_kf": 40}, {}),
    ("mono: 40 observations over a 3x3 grid", {"mono_max_landmarks_per_kf": 40, "mono_landmark_grid": 3}, {}),
    ("mono: 60 observations over a 4x4 grid", {"mono_max_landmarks_per_kf": 60}, {}),
]

#: Measured against the first iSAM2 defaults, not adopted. Not rerun by default (``--changes`` runs
#: CHANGES + TRIED).
TRIED_EARLIER = [
    ("QR factorisation instead of Cholesky", {}, {"factorization": "QR"}),
    ("no cached linearised factors", {}, {"cacheLinearizedFactors": False}),
    ("partial relinearisation check", {"partial_relinearization_check": True}, {}),
    ("relinearise every 2nd update", {"relinearize_skip": 2}, {}),
    ("relinearisation threshold 0.02", {"relinearize_threshold": 0.02}, {}),
    ("50 observations per keyframe", {"max_landmarks_per_kf": 50}, {}),
    ("window 0.8 s (stereo)", {"window_s": 0.8}, {}),
    ("batch marginalisation every 0.5 s", {"marginalise_every_s": 0.5}, {}),
    ("batch marginalisation every 1 s", {"marginalise_every_s": 1.0}, {}),
    ("mono window 2.5 s", {"mono_window_s": 2.5}, {}),
    ("mono window 6 s, batch marginalisation every 1 s", {"mono_window_s": 6.0, "marginalise_every_s": 1.0}, {}),
]


def estimator_class(isam: dict):
    """VioEstimator with ISAM2Params fields set as given (a bench-only subclass: these are
    measured here, not offered as parameters)."""
    from vilib_ros.backend import VioEstimator
    from vilib_ros.backend import isam2_smoother

    if not isam:
        return VioEstimator

    def tuned(config):
        import gtsam

        p = default_params(config)
        for k, v in isam.items():
            if k == "factorization":
                p.setFactorization(v)
            elif k == "wildfireThreshold":
                p.setOptimizationParams(gtsam.ISAM2GaussNewtonParams(v))
            elif k == "relinearizeThreshold":     # {variable character: threshold}: per variable type
                m = gtsam.ISAM2ThresholdMap()
                for c, th in v.items():
                    m.insert((c, np.full({"x": 6, "v": 3, "b": 6, "l": 3}[c], float(th))))
                p.setRelinearizeThreshold(m)
            else:
                setattr(p, k, v)
        return p

    default_params = isam2_smoother.isam2_params

    class _Tuned(VioEstimator):
        """Its iSAM2 solvers are built with the tuned parameters (the module's function swapped only
        while the smoother makes a solver)."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            new_solver = self.smoother._new_solver

            def tuned_solver():
                isam2_smoother.isam2_params = tuned
                try:
                    return new_solver()
                finally:
                    isam2_smoother.isam2_params = default_params
            self.smoother._new_solver = tuned_solver

    return _Tuned


#: an estimator of another commit's code, driven frame by frame over stdin / stdout (pickle)
_DRIVER = r"""
import logging, pickle, sys, time
logging.disable(logging.WARNING)
from vilib_ros.backend import BackendConfig
try:
    from bench.backend_changes import estimator_class
except ImportError:                    # a commit whose benchmarks lived inside the package
    from vilib_ros.bench.backend_changes import estimator_class
class Frame:
    __slots__ = ("stamp_ns", "ids", "xy", "xy_right")
    def __init__(self, *a):
        self.stamp_ns, self.ids, self.xy, self.xy_right = a
inp, out = sys.stdin.buffer, sys.stdout.buffer
cfg, isam, cam0, cam1, noise = pickle.load(inp)
est = estimator_class(isam)(BackendConfig(**cfg), cam0, cam1, noise)
cov = []
out.write(b"r"); out.flush()
while True:
    msg = pickle.load(inp)
    if msg is None:
        break
    t, ids, xy, xr, it, idd = msg
    if len(it):
        est.add_imu_batch(it, idd)
    s = est.add_frame(Frame(t, ids, xy, xr))
    if s is not None and s.is_keyframe:
        a = time.perf_counter(); est.state_covariance(); cov.append(time.perf_counter() - a)
    out.write(b"k"); out.flush()
pickle.dump({"kf_timings": est.kf_timings, "stats": dict(est.stats), "mode": est.mode, "covariance_s": cov,
             "trajectory": {s: est.trajectory(smoothed=s) for s in (False, True)}}, out)
out.flush()
"""


def code_of(rev: str, root: Path) -> Path:
    """The ``vilib_ros`` package of commit ``rev`` of this checkout, unpacked under ``root``
    (``git archive``); reused when already there."""
    import io
    import subprocess
    import tarfile

    dest = root / rev
    if (dest / "vilib_ros" / "backend").is_dir():
        return dest
    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev, "vilib_ros"], capture_output=True,
                       timeout=120)
    if p.returncode:
        raise RuntimeError(f"git archive {rev}: {p.stderr.decode(errors='replace').strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tf:
        tf.extractall(dest, filter="data")
    return dest


class RemoteEstimator:
    """A ``VioEstimator`` of the code under ``code`` (this checkout, or a commit's: :func:`code_of`)
    in a subprocess of its own, fed in lockstep (each frame answered before the next row's turn);
    after :meth:`finish` it has what :func:`bench.sequences.backend_row` reads of an
    estimator."""

    def __init__(self, code: Path, config: dict, isam: dict, cam0, cam1, imu_noise):
        import os
        import pickle
        import subprocess

        env = dict(os.environ, PYTHONPATH=str(code))
        self._p = subprocess.Popen([sys.executable, "-c", _DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   env=env, cwd=str(code))
        self._pickle = pickle
        pickle.dump((config, isam, cam0, cam1, imu_noise), self._p.stdin)
        self._p.stdin.flush()
        if self._p.stdout.read(1) != b"r":
            raise RuntimeError(f"the estimator of {code.name} did not start (exit code {self._p.wait()})")

    def step(self, f, imu_t, imu_d) -> None:
        self._pickle.dump((int(f.stamp_ns), f.ids, f.xy, f.xy_right, imu_t, imu_d), self._p.stdin)
        self._p.stdin.flush()
        if self._p.stdout.read(1) != b"k":
            raise RuntimeError(f"the remote estimator died (exit code {self._p.wait()})")

    def finish(self) -> None:
        self._pickle.dump(None, self._p.stdin)
        self._p.stdin.flush()
        res = self._pickle.load(self._p.stdout)
        self._p.wait(timeout=60)
        self.kf_timings, self.stats, self.mode = res["kf_timings"], res["stats"], res["mode"]
        self.covariance_s, self._traj = res["covariance_s"], res["trajectory"]

    def write_tum(self, path, smoothed: bool = True):
        from vilib_ros.datasets.common import write_tum

        return write_tum(path, *self._traj[smoothed], header=False)

    def kill(self) -> None:
        if self._p.poll() is None:
            self._p.kill()
            self._p.wait()


def run_lockstep(rows, frames, imu_t, imu_d, cam0, cam1, imu_noise, mode: str, code_root: Path) -> list:
    """One estimator per row, each in a process of its own (:class:`RemoteEstimator`), fed frame by
    frame in turns (the same load for all) -> estimators. A row with a fourth element (a commit)
    runs that commit's code (unpacked under ``code_root``), the others this checkout's. Separate
    processes, not one: with a dozen estimators in one process (its garbage collector walking all
    of their objects, among other shared costs) a row's keyframes pay for the others."""
    c1 = cam1 if mode == "stereo" else None
    here = Path(__file__).resolve().parents[1]
    ests = []
    try:
        for row in rows:
            _, ov, isam = row[:3]
            code = code_of(row[3], code_root) if len(row) > 3 else here
            ests.append(RemoteEstimator(code, dict(mode=mode, **ov), isam, cam0, c1, imu_noise))
        j = 0
        for f in frames:
            j1 = int(np.searchsorted(imu_t, f.stamp_ns, side="right"))
            for e in ests:
                e.step(f, imu_t[j:j1], imu_d[j:j1])
            j = j1
        for e in ests:
            e.finish()
    except BaseException:
        for e in ests:
            e.kill()
        raise
    return ests


def _inputs(name: str, cache: Path, tmp: Path):
    """(data line, gt TUM, cameras, imu, [(input label, frames)]) of a sequence, or a skip reason."""
    from bench.sequences import exact_tracks, gt_tum_of, our_tracks, rendered, sequence_config
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SyntheticSequence

    cfg = sequence_config(name, None)
    if cfg is None:
        return "real EuRoC V1_01 ground truth / IMU not found (../shared/data/euroc_v101_head)"
    seq = SyntheticSequence(cfg)
    ds = open_dataset(rendered(cfg, cache, None))
    frames_ours, _ = our_tracks(ds, "cpu", cache)
    inputs = [("exact tracks 0.5 px", exact_tracks(seq, 0.5, cache)), ("our tracks (cpu)", frames_ours)]
    data = (f"{name}: {seq.num_frames} stereo frames at 20 Hz, "
            + ("real EuRoC V1_01 trajectory and IMU" if cfg.recorded_imu else "generator trajectory, synthetic IMU"))
    return data, gt_tum_of(ds, tmp), (ds.cameras[0], ds.cameras[1]), (ds.imu_stamps, ds.imu_data), ds.imu_noise, inputs


def select_rows(spec: str) -> list:
    """Rows of CHANGES + TRIED by ``spec``: comma-separated 0-based indices or substrings of their
    labels ('' = all)."""
    rows = CHANGES + TRIED
    if not spec:
        return rows
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        hit = [rows[int(part)]] if part.isdigit() and int(part) < len(rows) else [r for r in rows if part in r[0]]
        if not hit:
            raise ValueError(f"no row matches {part!r} (0..{len(rows) - 1} or a part of a row's label)")
        out += [r for r in hit if r not in out]
    return out


def run(sequences, cache: Path, machine: dict, load, modes=("stereo", "mono"), rows=None) -> dict:
    """The table; ``machine`` describes the machine, ``load()`` gives its load average; ``rows``: a
    subset of CHANGES + TRIED (default: all)."""
    from bench.sequences import backend_row

    _load = load
    logging.getLogger("vilib_ros.backend.estimator").setLevel(logging.ERROR)
    rows = rows or (CHANGES + TRIED)
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine,
           "load_start": _load(), "command": "python -m bench backend --changes " + ",".join(sequences),
           "rows": [{"change": r[0], "overrides": r[1], "isam2": r[2], "code": r[3] if len(r) > 3 else None,
                     "adopted": r in CHANGES} for n, r in enumerate(rows)], "columns": [], "skipped": {}}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for name in sequences:
            got = _inputs(name, cache, tmp)
            if isinstance(got, str):
                res["skipped"][name] = got
                continue
            data, gt_tum, (c0, c1), (it, idd), noise, inputs = got
            res.setdefault("data", {})[name] = data
            for inp, frames in inputs:
                for mode in modes:
                    t = time.perf_counter()
                    ests = run_lockstep(rows, frames, it, idd, c0, c1, noise, mode, code_root=tmp / "code")
                    col = {"sequence": name, "input": inp, "mode": mode, "cells": [],
                           "load": _load(), "wall_s": time.perf_counter() - t}
                    for row, e in zip(rows, ests):
                        r = backend_row(row[0], inp, e, [0.0], gt_tum, tmp)
                        cell = {k: r.get(k) for k in ("ate_causal_m", "ate_smoothed_m", "keyframe_ms",
                                                      "keyframe_ms_p90", "keyframes", "resets", "obs_per_keyframe")}
                        cell["covariance_ms"] = 1e3 * float(np.median(e.covariance_s)) if e.covariance_s else None
                        col["cells"].append(cell)
                    res["columns"].append(col)
                    print(f"bench-backend --changes: {name} / {inp} / {mode} done in {col['wall_s']:.0f} s "
                          f"(load {col['load']})", file=sys.stderr)
    res["load_end"] = _load()
    return res


def _cell(c) -> str:
    cov = f" (+{c['covariance_ms']:.1f})" if c.get("covariance_ms") is not None else ""
    if c["ate_causal_m"] is None:
        return f"- / -, {c['keyframe_ms']:.1f} ms{cov}"
    rs = f", {c['resets']} resets" if c["resets"] else ""
    return f"{100 * c['ate_causal_m']:.2f} / {100 * c['ate_smoothed_m']:.2f}, {c['keyframe_ms']:.1f} ms{cov}{rs}"


def markdown(res: dict, notes: str = "") -> str:
    m = res["machine"]
    L = [f"# Backend changes: time per keyframe and ATE ({res['date']})", "",
         f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, gtsam {m['gtsam']}; load average at "
         f"start {res['load_start']}, at end {res['load_end']} (per column in the json).", "",
         f"Command: `{res['command']}`", ""]
    for name, d in res.get("data", {}).items():
        L.append(f"Data: {d}")
    for name, why in res.get("skipped", {}).items():
        L.append(f"Skipped {name}: {why}")
    L += ["", "Each cell: ATE causal / smoothed [cm] (SE3, evo), keyframe median [ms] (+ the median of the odometry "
          "covariance, `state_covariance()`, per keyframe [ms], timed apart: the backend node adds it to every "
          "keyframe with `odometry_covariance` on). The rows of a column ran in "
          "lockstep (frame by frame, in turns) on the same tracks, so their times share the load; compare times "
          "within a column. ATEs are deterministic.", ""]
    cols = res["columns"]
    head = [f"{c['sequence']} {c['input']}, {c['mode']}" for c in cols]
    L += ["| change | " + " | ".join(head) + " |", "|---|" + "---|" * len(cols)]
    for n, r in enumerate(res["rows"]):
        if n and not r["adopted"] and res["rows"][n - 1]["adopted"]:
            L.append("| **tried, not adopted:** |" + " |" * len(cols))
        L.append(f"| {r['change']} | " + " | ".join(_cell(c["cells"][n]) for c in cols) + " |")
    if notes:
        L += ["", notes]
    return "\n".join(L) + "\n"
