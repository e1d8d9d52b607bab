"""A ROS 1 ``.bag`` written by an independent writer -- Debian's ROS 1 ``python3-rosbag``, run under
the system interpreter -- in the layout of the official EuRoC bags (``/cam0/image_raw``,
``/imu0``, the Vicon pose; no camera_info, no tf) reads back as the ASL folder it was written
from: the same stamps, pixels, IMU samples and ground-truth poses, and the CPU frontend run over
the replay of each gives the same tracks (ids and positions), frame for frame.

The bag reader against a writer other than the project's own. Source: the real
EuRoC frames where present, else the generated sequence (its ``sensor.yaml`` replaced by the
EuRoC cam0 calibration, which a bag without camera_info is read with).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
HELPER = Path(__file__).resolve().parent / "helpers" / "write_euroc_bag_rosbag1.py"
MAX_FRAMES = 40


def _system_rosbag_reason() -> str | None:
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} not found"
    r = subprocess.run([SYSTEM_PYTHON, "-c", "import rosbag, sensor_msgs.msg, geometry_msgs.msg"],
                       capture_output=True, text=True)
    if r.returncode:
        return ("Debian's ROS 1 rosbag is not installed for the system interpreter "
                "(apt-get install python3-rosbag python3-sensor-msgs python3-geometry-msgs): "
                + (r.stderr.strip().splitlines() or [""])[-1])
    return None


def _rows(path: Path) -> list[list[str]]:
    return [ln.split(",") for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.fixture(scope="module")
def pair(node_dataset, tmp_path_factory):
    """(ASL folder, the official-layout bag written from it by Debian's rosbag)."""
    why = _system_rosbag_reason()
    if why:
        pytest.skip(why)
    from vilib_ros.camera import euroc_cam0

    tmp = tmp_path_factory.mktemp("ros1_interop")
    asl = tmp / "asl"
    mav = asl / "mav0"
    cams = [0]
    (mav / "cam0" / "data").mkdir(parents=True)
    rows = _rows(node_dataset / "mav0" / "cam0" / "data.csv")[:MAX_FRAMES]
    t_last = int(rows[-1][0])
    images = []
    for t, name in rows:
        src = node_dataset / "mav0" / "cam0" / "data" / name.strip()
        shutil.copy(src, mav / "cam0" / "data" / name.strip())
        img = cv2.imread(str(src), cv2.IMREAD_GRAYSCALE)
        raw = tmp / f"{t}.raw"
        raw.write_bytes(img.tobytes())
        images.append([0, int(t), img.shape[1], img.shape[0], str(raw)])
    (mav / "cam0" / "data.csv").write_text("#timestamp [ns],filename\n" + "".join(f"{t},{n}\n" for t, n in rows))
    (mav / "cam0" / "sensor.yaml").write_text(json.dumps(euroc_cam0().to_euroc_dict()))   # JSON is YAML
    (mav / "imu0").mkdir()
    imu = [r for r in _rows(node_dataset / "mav0" / "imu0" / "data.csv") if int(r[0]) <= t_last]
    (mav / "imu0" / "data.csv").write_text("#timestamp [ns],w_x,w_y,w_z,a_x,a_y,a_z\n" +
                                           "".join(",".join(r) + "\n" for r in imu))
    gt = []
    tum = node_dataset / "V101_groundtruth_tum.txt"
    gt_csv = node_dataset / "mav0" / "state_groundtruth_estimate0" / "data.csv"
    if gt_csv.is_file():
        for r in _rows(gt_csv):
            if int(r[0]) <= t_last:
                w, x, y, z = (float(v) for v in r[4:8])
                gt.append([int(r[0])] + [float(v) for v in r[1:4]] + [x, y, z, w])
    elif tum.is_file():
        from vilib_ros.datasets.common import seconds_str_to_ns

        for ln in tum.read_text().splitlines():
            if ln.strip() and not ln.startswith("#"):
                p = ln.split()
                t = seconds_str_to_ns(p[0])
                if t <= t_last:
                    gt.append([t] + [float(v) for v in p[1:8]])
    if gt:
        (asl / "groundtruth_tum.txt").write_text("".join(
            f"{g[0] // 10**9}.{g[0] % 10**9:09d} " + " ".join(repr(v) for v in g[1:]) + "\n" for g in gt))
    manifest = tmp / "manifest.json"
    manifest.write_text(json.dumps({"images": images, "imu": [[int(r[0])] + [float(v) for v in r[1:7]] for r in imu],
                                    "groundtruth": gt}))
    bag = tmp / "euroc_layout.bag"
    r = subprocess.run([SYSTEM_PYTHON, str(HELPER), str(manifest), str(bag)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return asl, bag, cams


def _tracks(ds):
    """The CPU frontend over the replay sequence, gyro since the previous frame as the node gives it."""
    from vilib_ros.datasets.replay import replay_events
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    ft = FeatureTracker(ds.cameras[0], FrontendConfig(), device="cpu")
    gyro, out = [], []
    for ev in replay_events(ds, imu_margin_s=0.0)[1]:
        if ev[0] == "imu":
            gyro.append([ev[1], *ev[2]])
            continue
        fr = ft.process(ds.load_image(0, ev[3]), ev[2], gyro=np.asarray(gyro).reshape(-1, 4) if gyro else None)
        gyro = gyro[-2:]
        out.append((ev[2], fr.ids.copy(), fr.uv.copy()))
    return out


class TestDebianRosbagInterop:
    def test_layout_is_the_official_one(self, pair):
        from rosbags.highlevel import AnyReader

        with AnyReader([pair[1]]) as r:
            topics = {c.topic: c.msgtype for c in r.connections}
        assert topics["/cam0/image_raw"] == "sensor_msgs/msg/Image"
        assert topics["/imu0"] == "sensor_msgs/msg/Imu"
        assert not any("camera_info" in t or "tf" in t for t in topics)

    def test_same_data_as_the_asl_folder(self, pair):
        from vilib_ros.datasets import open_dataset

        asl, bag = open_dataset(pair[0]), open_dataset(pair[1])
        np.testing.assert_array_equal(bag.image_stamps(0), asl.image_stamps(0))
        for k in range(len(asl.image_stamps(0))):
            np.testing.assert_array_equal(bag.load_image(0, k), asl.load_image(0, k))
        np.testing.assert_array_equal(bag.imu_stamps, asl.imu_stamps)
        np.testing.assert_array_equal(bag.imu_data, asl.imu_data)
        c_a, c_b = asl.cameras[0], bag.cameras[0]      # no camera_info: the EuRoC default, as in the folder
        np.testing.assert_allclose([c_b.fx, c_b.fy, c_b.cx, c_b.cy], [c_a.fx, c_a.fy, c_a.cx, c_a.cy])
        np.testing.assert_allclose(c_b.distortion, c_a.distortion)
        if asl.groundtruth is not None:
            np.testing.assert_array_equal(bag.groundtruth.t_ns, asl.groundtruth.t_ns)
            np.testing.assert_allclose(bag.groundtruth.p, asl.groundtruth.p, atol=1e-12)
            np.testing.assert_allclose(bag.groundtruth.q_xyzw, asl.groundtruth.q_xyzw, atol=1e-12)

    def test_same_tracks(self, pair):
        from vilib_ros.datasets import open_dataset

        a, b = _tracks(open_dataset(pair[0])), _tracks(open_dataset(pair[1]))
        assert len(a) == len(b) == min(MAX_FRAMES, len(a))
        assert sum(len(x[1]) for x in a) > 50 * len(a)
        for (ta, ia, ua), (tb, ib, ub) in zip(a, b):
            assert ta == tb
            np.testing.assert_array_equal(ia, ib)
            np.testing.assert_array_equal(ua, ub)
