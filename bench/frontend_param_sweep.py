"""Every declared frontend parameter at the ends of its range, each choice and each flipped bool, one at
a time, on real frames: does the frontend run, or refuse the value with a clear message?

The ROS parameters of ``frontend_node`` are declared with ranges (on the ``FrontendConfig`` fields,
``vilib_ros.nodes.params.specs_from_dataclass``), and a value inside a range must either work or be refused at construction with a
``ValueError`` that says why (a value that only makes sense with another one, e.g. ``tracker.levels``
8 needs 8 ``tracker.patch_sizes``, or a cell larger than the image). Each case here builds the
``FeatureTracker`` with that one value changed (and, with ``--partners``, once more with the partner
values ``test_launch_files`` uses) and runs it over the first ``--frames`` frames of a EuRoC sequence,
stereo (the left frame shifted 8 px as the right one) with the gyro samples around each frame. It
checks every frame's ids are unique and its positions finite. Each case runs in a process of its own
(``spawn``) with a time limit, so that a crash, a hang or a dead process is a row of the table, not the
end of the sweep.

Usage: ``python3 bench/frontend_param_sweep.py --device cpu|cuda --data DIR [--frames 25] [--partners]
[--part K/N] [--out DIR]``; prints one line per case and writes ``frontend_param_sweep_<device>.json``. Exit 1
where a case crashed, hung or died.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

#: the partner values ``test/test_launch_files.py`` checks these ranges with
PARTNERS = {"tracker.cpu_backend": {"tracker.mode": "translation", "tracker.template": "previous",
                                    "tracker.warp": "translation"},
            "detector.cell_height": {"detector.levels": 1}, "detector.levels": {"detector.cell_height": 64},
            "tracker.levels": {"tracker.patch_sizes": [8] * 8},
            "fb_levels": {"tracker.levels": 8, "tracker.patch_sizes": [8] * 8}}


def cases(partners: bool) -> list[tuple[str, object, dict]]:
    from vilib_ros.frontend import FrontendConfig
    from vilib_ros.nodes.params import edge_values, specs_from_dataclass

    out = []
    for spec in specs_from_dataclass(FrontendConfig()):
        for v in edge_values(spec.default, spec.range, spec.choices):
            out.append((spec.name, v, {}))
            if partners and spec.name in PARTNERS:
                out.append((spec.name, v, PARTNERS[spec.name]))
    return out


def load(data: Path, n: int):
    import cv2

    files = sorted((data / "mav0" / "cam0" / "data").glob("*.png"))[:n]
    if not files:
        raise SystemExit(f"no frames under {data}/mav0/cam0/data")
    imu = np.loadtxt(data / "mav0" / "imu0" / "data.csv", delimiter=",", comments="#")[:, :4]
    return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files], [int(f.stem) for f in files], imu


def run_case(name, value, partner, device, data, n) -> tuple[str, str]:
    import logging

    from vilib_ros.camera import euroc_cam0, euroc_cam1
    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.nodes.params import build_dataclass

    logging.getLogger("vilib_ros").setLevel(logging.ERROR)
    imgs, stamps, imu = load(Path(data), n)
    cfg = build_dataclass(FrontendConfig, {name: value, **partner})
    try:
        ft = FeatureTracker(euroc_cam0(), cfg, device=device, camera_right=euroc_cam1())
    except ValueError as exc:
        return "refused", str(exc)
    most, prev = 0, None
    for img, st in zip(imgs, stamps):
        gyro = imu[(imu[:, 0] >= prev - 10_000_000) & (imu[:, 0] <= st + 10_000_000)] if prev else None
        fr = ft.process(img, st, gyro=gyro, image_right=np.roll(img, -8, axis=1))
        ids = np.asarray(fr.ids)
        if len(np.unique(ids)) != len(ids):
            return "wrong", f"duplicate ids at frame {st}"
        if not np.all(np.isfinite(fr.xy)):
            return "wrong", f"non-finite positions at frame {st}"
        most, prev = max(most, len(ids)), st
    return "ok", f"{ft.device}, up to {most} tracks"


def _worker(q, *args):
    try:
        q.put(run_case(*args))
    except Exception as exc:  # the row of the table: what broke
        q.put(("crash", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1200:]}"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--data", required=True, help="a EuRoC sequence folder (mav0/cam0, mav0/imu0)")
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    ap.add_argument("--partners", action="store_true", help="also run the cross-constrained ranges with partners")
    ap.add_argument("--only", default="", help="only cases whose name contains this")
    ap.add_argument("--part", default="1/1", help="K/N: the K-th of N interleaved shares of the cases (calls with a time limit)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    ctx = mp.get_context("spawn")
    rows, t_start = [], time.time()
    k, n = (int(x) for x in a.part.split("/"))
    todo = [c for i, c in enumerate(cases(a.partners)) if a.only in c[0] and i % n == k - 1]
    for name, value, partner in todo:
        q = ctx.Queue()
        p = ctx.Process(target=_worker, args=(q, name, value, partner, a.device, a.data, a.frames))
        t0 = time.time()
        p.start()
        p.join(a.timeout)
        if p.is_alive():
            p.kill()
            res = ("hung", f"still running after {a.timeout:.0f} s")
        else:
            try:
                res = q.get(timeout=5)
            except Exception:
                res = ("died", f"exit code {p.exitcode}")
        rows.append({"parameter": name, "value": value, "with": partner, "result": res[0], "detail": res[1],
                     "seconds": round(time.time() - t0, 1)})
        w = f" (with {partner})" if partner else ""
        print(f"{name} = {value!r}{w}: {res[0]}: {res[1].splitlines()[0] if res[1] else ''} "
              f"[{rows[-1]['seconds']} s]", flush=True)
        if res[0] == "crash":
            print(res[1], flush=True)
    bad = [r for r in rows if r["result"] not in ("ok", "refused")]
    print(f"{len(rows)} cases on {a.device}, {sum(r['result'] == 'ok' for r in rows)} ran, "
          f"{sum(r['result'] == 'refused' for r in rows)} refused with a message, {len(bad)} crashed / hung / wrong "
          f"({time.time() - t_start:.0f} s)")
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        part = "" if a.part == "1/1" else "_part" + a.part.replace("/", "of")
        (out / f"frontend_param_sweep_{a.device}{part}.json").write_text(json.dumps({
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "device": a.device,
            "host": f"{platform.machine()} python {platform.python_version()}", "data": str(a.data),
            "frames": a.frames, "rows": rows}, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
