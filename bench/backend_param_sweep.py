"""Every declared backend parameter at the ends of its range, each choice and each flipped bool, one at a
time, stereo and mono, on a generated sequence: does the estimator run, or refuse the value with a
message, and never raise while it runs?

The backend node's parameters are declared with ranges (on the ``BackendConfig`` fields).
Each case builds a ``BackendConfig`` with one value changed (a ``ValueError`` from ``validate()`` is a
refusal, with its message) and runs ``VioEstimator`` over the generator's sequence with its IMU. The
estimator must never raise (an indeterminate system is a counted reset); the trajectory it gives must
be finite. A run that never initialises (e.g. an initialisation window longer than the sequence) is
a row of its own ("no estimate"), not a failure. Regression this guards: ``extra_updates`` > 0 with
the own smoother raised a ``KeyError`` on every V1_01 column (a301c3d).

Usage: ``python3 bench/backend_param_sweep.py [--duration 12] [--modes stereo,mono] [--out DIR]``;
prints one line per case and writes ``backend_param_sweep.json``. Exit 1 where a run raised or gave
a non-finite trajectory.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # as the backend's processes run it

import numpy as np  # noqa: E402


def cases() -> list[tuple[str, object]]:
    from vilib_ros.backend import BackendConfig
    from vilib_ros.nodes.params import edge_values, specs_from_dataclass

    out = []
    for spec in specs_from_dataclass(BackendConfig()):
        if spec.name == "mode":      # the mode is the sweep's other axis
            continue
        out += [(spec.name, v) for v in edge_values(spec.default, spec.range, spec.choices)]
    return out


def run_case(seq, frames, imu, mode: str, name: str, value) -> tuple[str, str]:
    import dataclasses

    from vilib_ros.backend import BackendConfig, VioEstimator

    try:
        cfg = dataclasses.replace(BackendConfig(), mode=mode, **{name: value}).validate()
    except ValueError as exc:
        return "refused", str(exc)
    est = VioEstimator(cfg, seq.camera(0), seq.camera(1) if mode == "stereo" else None, seq.imu_noise_dict())
    st, data = imu
    ev = sorted([(int(t), 0, i) for i, t in enumerate(st)] + [(f.stamp_ns, 1, k) for k, f in enumerate(frames)],
                key=lambda e: (e[0], e[1]))
    for t, kind, i in ev:
        if kind == 0:
            est.add_imu(t, data[i, :3], data[i, 3:])
        else:
            est.add_frame(frames[i])
    _, p, _ = est.trajectory()
    if not len(p):
        return "no estimate", f"{est.stats['keyframes']} keyframes, never initialised"
    if not np.all(np.isfinite(p)):
        return "wrong", "non-finite trajectory"
    return "ok", f"{est.stats['keyframes']} keyframes, {est.stats['resets']} resets"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=12.0, help="generated sequence length, s")
    ap.add_argument("--modes", default="stereo,mono")
    ap.add_argument("--only", default="", help="only parameters whose name contains this")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vilib_ros.synthetic.tracks import synthetic_track_frames
    from vilib_ros.synthetic import SequenceConfig, SyntheticSequence

    logging.disable(logging.WARNING)
    seq = SyntheticSequence(SequenceConfig(duration_s=a.duration, seed=0))
    st, data, _, _ = seq.imu()
    frames = synthetic_track_frames(seq)
    rows, t_start = [], time.time()
    for mode in a.modes.split(","):
        for name, value in cases():
            if a.only not in name:
                continue
            t0 = time.time()
            try:
                res = run_case(seq, frames, (st, data), mode, name, value)
            except Exception as exc:  # the row of the table: what broke
                res = ("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}")
            rows.append({"mode": mode, "parameter": name, "value": value, "result": res[0], "detail": res[1],
                         "seconds": round(time.time() - t0, 2)})
            print(f"{mode} {name} = {value!r}: {res[0]}: {res[1].splitlines()[0]}", flush=True)
            if res[0] == "crash":
                print(res[1], flush=True)
    bad = [r for r in rows if r["result"] in ("crash", "wrong")]
    counts = {k: sum(r["result"] == k for r in rows) for k in ("ok", "refused", "no estimate")}
    print(f"{len(rows)} cases, {counts['ok']} ran, {counts['refused']} refused with a message, "
          f"{counts['no estimate']} never initialised, {len(bad)} raised or gave a non-finite trajectory "
          f"({time.time() - t_start:.0f} s)")
    if a.out:
        from bench import results

        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "backend_param_sweep.json").write_text(json.dumps({
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": results.machine(), "code": results.code(), "load_average_end": results.load(),
            "data": f"synthetic generator, {a.duration:g} s stereo-inertial, seed 0", "rows": rows},
            indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
