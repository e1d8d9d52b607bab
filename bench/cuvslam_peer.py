"""cuVSLAM (PyPI ``dim_odom``) on an EuRoC ASL folder: the peer of ``python -m bench accuracy``.

A stand-alone script, run by the benchmark as a subprocess with the Python that has
``dim_odom`` (the ``peers`` extra, kept in a separate environment); it imports neither
vilib_ros nor ROS, only ``dim_odom``, NumPy, OpenCV and PyYAML::

    python cuvslam_peer.py DATASET OUT_TUM [--imu] [--max-frames N] [--gpu]

Feeds cam0/cam1 (stereo, pinhole + radial-tangential as in ``sensor.yaml``, ``rectified:
False`` so that cuVSLAM builds its tracker) and with ``--imu`` the imu0 stream with its noise
densities (stereo-inertial mode), in time order. Writes the body pose in the odometry frame
per stereo pair (TUM) and prints one JSON line: frames, poses, wall time, ms per frame.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def _yaml(path: Path) -> dict:
    import yaml

    text = path.read_text()
    if text.startswith("%YAML"):
        text = text.split("\n", 1)[1]
    return yaml.safe_load(text)


def _csv(path: Path) -> tuple[np.ndarray, list]:
    t, rest = [], []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        t.append(int(parts[0]))
        rest.append(parts[1:])
    return np.asarray(t, np.int64), rest


def _rot_to_quat(R: np.ndarray) -> tuple:
    w = np.sqrt(max(0.0, 1.0 + R[0, 0] + R[1, 1] + R[2, 2])) / 2
    x = np.sqrt(max(0.0, 1.0 + R[0, 0] - R[1, 1] - R[2, 2])) / 2
    y = np.sqrt(max(0.0, 1.0 - R[0, 0] + R[1, 1] - R[2, 2])) / 2
    z = np.sqrt(max(0.0, 1.0 - R[0, 0] - R[1, 1] + R[2, 2])) / 2
    x = np.copysign(x, R[2, 1] - R[1, 2])
    y = np.copysign(y, R[0, 2] - R[2, 0])
    z = np.copysign(z, R[1, 0] - R[0, 1])
    q = np.array([x, y, z, w])
    return tuple(q / np.linalg.norm(q))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("out_tum")
    ap.add_argument("--imu", action="store_true", help="stereo + IMU (inertial mode)")
    ap.add_argument("--max-frames", type=int, default=0)
    ap.add_argument("--gpu", action="store_true", help="use cuVSLAM's GPU tracker (default: its CPU tracker)")
    ap.add_argument("--verbose", action="store_true", help="cuVSLAM's own log on stderr")
    args = ap.parse_args(argv)

    import cv2
    import dim_odom as d

    d.init_logging("debug" if args.verbose else "error")     # its errors name why no pose came out

    mav = Path(args.dataset) / "mav0"
    cams = []
    for c in (0, 1):
        y = _yaml(mav / f"cam{c}" / "sensor.yaml")
        T = np.asarray(y["T_BS"]["data"], float).reshape(4, 4)
        fx, fy, cx, cy = (float(v) for v in y["intrinsics"])
        dist = [float(v) for v in y.get("distortion_coefficients", [0, 0, 0, 0])][:4] + [0.0]
        w, h = (int(v) for v in y["resolution"])
        stamps, rest = _csv(mav / f"cam{c}" / "data.csv")
        files = [mav / f"cam{c}" / "data" / (r[0] if r and r[0] else f"{t}.png") for t, r in zip(stamps, rest)]
        cams.append({"frame": f"cam{c}", "T": T, "K": [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0], "dist": dist,
                     "w": w, "h": h, "stamps": stamps, "files": files})
    frames_T = {"body": np.eye(4), "imu0": np.eye(4), "cam0": cams[0]["T"], "cam1": cams[1]["T"]}

    def tf(parent, child):
        if parent not in frames_T or child not in frames_T:
            return None
        T = np.linalg.inv(frames_T[parent]) @ frames_T[child]
        return (tuple(float(v) for v in T[:3, 3]), _rot_to_quat(T[:3, :3]))

    config = {"camera_mode": "stereo", "use_gpu": bool(args.gpu),
              "cameras": [{"frame_id": "cam0", "rectified": False}, {"frame_id": "cam1", "rectified": False}],
              "rig_frame_id": "body", "output_frame_id": "body", "odom_frame_id": "odom"}
    imu_t = imu_d = None
    if args.imu:
        config["enable_imu"] = True
        imu_t, rest = _csv(mav / "imu0" / "data.csv")
        imu_d = np.asarray([[float(v) for v in r[:6]] for r in rest])
        y = _yaml(mav / "imu0" / "sensor.yaml")
    odo = d.CuvslamOdometry(config, tf=tf)
    t0 = int(min(cams[0]["stamps"][0], cams[1]["stamps"][0]))
    for c in cams:
        odo.handle_camera_info(d.CameraModel(t0, c["frame"], c["w"], c["h"], c["dist"], c["K"]))
    if args.imu:
        odo.handle_imu_info(d.ImuNoiseModel("imu0", float(y["gyroscope_noise_density"]),
                                            float(y["gyroscope_random_walk"]),
                                            float(y["accelerometer_noise_density"]),
                                            float(y["accelerometer_random_walk"]), float(y.get("rate_hz", 200.0))))
    right = {int(t): f for t, f in zip(cams[1]["stamps"], cams[1]["files"])}
    n = len(cams[0]["stamps"]) if args.max_frames <= 0 else min(args.max_frames, len(cams[0]["stamps"]))
    out = []
    j = 0
    busy = 0.0
    t_wall = time.perf_counter()
    for k in range(n):
        t = int(cams[0]["stamps"][k])
        if args.imu:
            while j < len(imu_t) and imu_t[j] <= t:
                odo.handle_imu(d.ImuSample(int(imu_t[j]), "imu0", tuple(imu_d[j, :3]), tuple(imu_d[j, 3:])))
                j += 1
        if t not in right:
            continue
        left = cv2.imread(str(cams[0]["files"][k]), cv2.IMREAD_GRAYSCALE)
        rimg = cv2.imread(str(right[t]), cv2.IMREAD_GRAYSCALE)
        a = time.perf_counter()
        est = None
        for c, img in ((cams[0], left), (cams[1], rimg)):
            r = odo.handle_image(d.ImageFrame(t, c["frame"], img.shape[1], img.shape[0], "mono8", img.shape[1],
                                              img.tobytes()))
            est = r if r is not None else est
        busy += time.perf_counter() - a
        if est is not None:
            out.append((t, tuple(est.translation), tuple(est.rotation_xyzw)))
    wall = time.perf_counter() - t_wall
    with open(args.out_tum, "w") as f:
        for t, p, q in out:
            f.write(f"{t // 1_000_000_000}.{t % 1_000_000_000:09d} " + " ".join(f"{v:.9f}" for v in (*p, *q)) + "\n")
    print(json.dumps({"frames": n, "poses": len(out), "wall_s": wall, "ms_per_frame": 1e3 * busy / max(n, 1),
                      "mode": "stereo+imu" if args.imu else "stereo", "gpu": bool(args.gpu)}))
    return 0 if out else 1


if __name__ == "__main__":
    sys.exit(main())
