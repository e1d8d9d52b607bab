"""Digest of what the frontend and the VIO produce, to show that a change of structure changes no
result: the same tracks and trajectories, bit for bit.

    python bench/behaviour_digest.py --out digest.json [--device cpu|cuda] [--euroc PATH]
    python bench/behaviour_digest.py --compare before.json after.json

Digests (SHA-256 over the raw bytes, per item):

* ``tracks_euroc``: the frontend (``FeatureTracker`` with the default configuration) over the 95
  real EuRoC V1_01 frames with their gyro samples: ids, pixel positions, normalised coordinates,
  velocities, ages of every frame;
* ``tracks_<seq>``, ``traj_<seq>_<mode>``: a generated stereo sequence (rendered once into
  ``--cache``) through the offline runner's frontend and backend, stereo and mono: the tracks, and
  the causal and smoothed trajectories (stamps, positions, orientations).

``--compare`` prints each item as ``same`` or ``DIFFERENT`` and exits 1 on any difference.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _h(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _tracks_digest(frames) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    for fr in frames:
        h.update(_h(np.int64(fr.stamp_ns), fr.ids, fr.uv, fr.xy, fr.velocity, fr.age,
                    getattr(fr, "uv_right", None)).encode())
        n += len(fr.ids)
    return h.hexdigest(), n


def _euroc_dir(given: str | None) -> Path | None:
    for c in (given, REPO.parent / "shared" / "data" / "euroc_v101_head", REPO / ".data" / "euroc_v101_head"):
        if c and (Path(c) / "mav0").is_dir():
            return Path(c)
    return None


def digest_euroc(path: Path, device: str) -> dict:
    from vilib_ros.datasets import open_dataset
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    ds = open_dataset(path)
    stamps = np.asarray(ds.image_stamps(0), np.int64)
    ist, idata = np.asarray(ds.imu_stamps, np.int64), np.asarray(ds.imu_data, float)
    ft = FeatureTracker(ds.cameras[0], FrontendConfig(), device=device)
    frames, j = [], 0
    for k, t in enumerate(stamps):
        j0, j = j, max(j, int(np.searchsorted(ist, int(t), side="right")))
        gyro = np.column_stack([ist[max(0, j0 - 1):j], idata[max(0, j0 - 1):j, :3]])
        frames.append(ft.process(ds.load_image(0, k), int(t), gyro=gyro).copy())
    d, n = _tracks_digest(frames)
    return {"tracks_euroc": d, "tracks_euroc_count": n, "device": getattr(ft, "device", device)}


def digest_generated(cache: Path, device: str, duration: float, backend: bool = True,
                     backend_config: dict | None = None) -> dict:
    from vilib_ros import offline
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    seq = cache / f"stereo_{duration:g}s"
    if not (seq / "mav0").is_dir():
        generate_sequence(seq, SequenceConfig(duration_s=duration), progress=False, workers=1, overwrite=True)
    ds = open_dataset(seq)
    out = {}
    name = f"gen{duration:g}s"
    for mode in ("stereo", "mono"):
        r = offline.process(ds, device=device, stereo=mode == "stereo", backend=backend,
                            backend_config=dict(backend_config or {}))
        if mode == "stereo":
            out[f"tracks_{name}"], out[f"tracks_{name}_count"] = _tracks_digest(r["tracks"])
        else:
            out[f"tracks_{name}_mono"], _ = _tracks_digest(r["tracks"])
        be = r["backend"]
        if be is None:
            continue
        for key in ("causal", "smoothed"):
            t, p, q = be[key]
            out[f"traj_{name}_{mode}_{key}"] = _h(np.asarray(t), np.asarray(p), np.asarray(q))
            out[f"traj_{name}_{mode}_{key}_poses"] = int(len(t))
    return out


def compare(a: Path, b: Path) -> int:
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    bad = 0
    for k in sorted(set(da) & set(db)):
        if k in ("device", "code"):
            continue
        same = da.get(k) == db.get(k)
        bad += not same
        print(f"{'same     ' if same else 'DIFFERENT'} {k}: {da.get(k)!s:.16} / {db.get(k)!s:.16}")
    only = sorted((set(da) ^ set(db)) - {"device", "code"})
    if only:
        print(f"in one digest only (not compared): {', '.join(only)}")
    print("identical" if not bad else f"{bad} item(s) differ")
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--device", default="cpu")
    p.add_argument("--euroc", default=None)
    p.add_argument("--cache", type=Path, default=REPO / ".data" / "digest_cache")
    p.add_argument("--duration", type=float, default=12.0, help="length of the generated sequence, s")
    p.add_argument("--no-backend", action="store_true", help="tracks only (where gtsam is not installed)")
    p.add_argument("--backend-config", default="{}",
                   help="BackendConfig fields as JSON (another code's defaults, to compare like with like)")
    p.add_argument("--compare", nargs=2, type=Path)
    a = p.parse_args(argv)
    if a.compare:
        return compare(*a.compare)
    res = {}
    e = _euroc_dir(a.euroc)
    if e is not None:
        res.update(digest_euroc(e, a.device))
    else:
        print("no EuRoC frames: the real-frame digest is left out", file=sys.stderr)
    res.update(digest_generated(a.cache, a.device, a.duration, backend=not a.no_backend,
                                backend_config=json.loads(a.backend_config)))
    text = json.dumps(res, indent=1, sort_keys=True)
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
