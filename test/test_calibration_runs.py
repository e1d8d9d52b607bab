"""``vilib-ros run`` with a user's own bag: calibration given, never guessed; what the run says.

Bags are written from a generated 3 s stereo sequence (so a fresh clone runs this): one on a
user's topic names without camera_info or tf (a RealSense-like recording), one on EuRoC's topic
names without camera_info. The Kalibr files are written here from the sequence's known
calibration (its ``sensor.yaml`` values, ``T_cam_imu`` = the inverse of ``T_BS``).

Guards: such a bag (and an ASL folder without ``cam0/sensor.yaml``) accepted with exit 0 and
estimated with EuRoC's cam0 intrinsics, ``T_BS`` and IMU noise without a word.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
OWN = ("/camera/infra1/image_rect_raw", "/camera/infra2/image_rect_raw", "/camera/imu")
#: ATE bound of the stereo offline run with the Kalibr files on the 3 s generated sequence: a wide
#: margin over what the exact calibration gives there
ATE_BOUND_M = 0.01


def _run(args, cwd, timeout=900):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "vilib_ros", "run", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    pytest.importorskip("rosbags", reason="rosbags not installed")
    import yaml

    from vilib_ros.datasets import open_dataset
    from vilib_ros.datasets.bag_writer import write_bag
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = tmp_path_factory.mktemp("calib_runs")
    seq = generate_sequence(root / "seq", SequenceConfig(duration_s=3.0, seed=0, name="seq"), progress=False,
                            workers=1)
    ds = open_dataset(seq)
    own = write_bag(ds, root / "own", image_topics=list(OWN[:2]), imu_topic=OWN[2], camera_info=False,
                    tf_static=False)
    euroc = write_bag(ds, root / "euroc_names", camera_info=False, tf_static=False)
    chain = {}
    for i, c in enumerate(ds.cameras):
        T_cam_imu = np.linalg.inv(c.T_BS)
        chain[f"cam{i}"] = {"T_cam_imu": T_cam_imu.tolist(), "camera_model": "pinhole",
                            "distortion_coeffs": [float(v) for v in c.distortion], "distortion_model": "radtan",
                            "intrinsics": [c.fx, c.fy, c.cx, c.cy], "resolution": [c.width, c.height],
                            "rostopic": OWN[i], "timeshift_cam_imu": 0.0}
    camchain = root / "camchain-imucam.yaml"
    camchain.write_text(yaml.safe_dump(chain))
    noise = yaml.safe_load("\n".join(ln for ln in (seq / "mav0" / "imu0" / "sensor.yaml").read_text().splitlines()
                                     if not ln.startswith("%YAML")))
    imu = root / "imu.yaml"
    imu.write_text(yaml.safe_dump({k: noise[k] for k in ("accelerometer_noise_density", "accelerometer_random_walk",
                                                         "gyroscope_noise_density", "gyroscope_random_walk")}
                                  | {"rostopic": OWN[2], "update_rate": 200.0}))
    return {"root": root, "seq": seq, "own": own, "euroc": euroc, "camchain": camchain, "imu": imu, "ds": ds}


class TestRefusals:
    @pytest.mark.parametrize("offline", [False, True])
    def test_own_bag_without_calibration(self, data, tmp_path, offline):
        out = tmp_path / "out"
        r = _run([*(["--offline"] if offline else []), str(data["own"]), "--image-topic", OWN[0],
                  "--out", str(out), "--device", "cpu"], tmp_path)
        assert r.returncode == 2, r.stderr[-3000:]
        assert r.stderr.strip().splitlines()[-1] == (
            f"vilib-ros run: error: {data['own']}: no calibration for {OWN[0]} (no /camera/infra1/camera_info in "
            f"the bag, not EuRoC's topics) and no IMU noise for {OWN[2]} (a bag holds no IMU noise, not EuRoC's "
            "topics): give --calibration camchain-imucam.yaml (Kalibr) or --calibration cam0/sensor.yaml (EuRoC), "
            "and --imu-calibration imu.yaml (Kalibr) or --imu-calibration imu0/sensor.yaml (EuRoC)"), r.stderr
        assert "Traceback" not in r.stderr
        assert not out.exists() and not (tmp_path / "vilib_ros_output").exists()

    def test_two_image_topics_listed(self, data, tmp_path):
        r = _run(["--offline", str(data["own"]), "--imu-calibration", str(data["imu"])], tmp_path)
        assert r.returncode == 2, r.stderr[-3000:]
        assert (f"error: {data['own']}: 2 sensor_msgs/Image topics and no way to tell which is the left camera: "
                f"give --image-topic (and --image-right-topic for stereo) from {OWN[0]}, {OWN[1]}") in r.stderr
        assert not (tmp_path / "vilib_ros_output").exists()

    def test_asl_folder_without_cam0_sensor_yaml(self, data, tmp_path):
        ds = tmp_path / "ds"
        shutil.copytree(data["seq"], ds)
        (ds / "mav0" / "cam0" / "sensor.yaml").unlink()
        r = _run(["--offline", str(ds), "--out", str(tmp_path / "out")], tmp_path)
        assert r.returncode == 2, r.stderr[-3000:]
        assert (f"vilib-ros run: error: {ds}: no calibration for mav0/cam0 (no mav0/cam0/sensor.yaml): give "
                "--calibration camchain-imucam.yaml (Kalibr) or --calibration cam0/sensor.yaml (EuRoC)") in r.stderr
        assert not (tmp_path / "out").exists()


class TestGivenCalibration:
    @pytest.mark.slow
    def test_kalibr_files_give_the_ground_truth_trajectory(self, data, tmp_path):
        """The Kalibr camchain's rostopics pick the bag's two image topics, the imu.yaml's its IMU;
        the stereo estimate follows the ground truth; report and console name every source."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.datasets import read_tum
        from vilib_ros.evaluation import ate_rmse

        out = tmp_path / "out"
        r = _run(["--offline", str(data["own"]), "--calibration", str(data["camchain"]), "--imu-calibration",
                  str(data["imu"]), "--out", str(out), "--device", "cpu", "--no-video"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        cc, imu = data["camchain"], data["imu"]
        assert (f"calibration: cam0 intrinsics, cam0 T_BS, cam1 intrinsics, cam1 T_BS from {cc}; "
                f"IMU noise from {imu}") in r.stderr
        report = (out / "report.md").read_text()
        assert f"| cam0 T_BS | {cc} (Kalibr cam0 T_cam_imu, inverted) |" in report
        assert f"| IMU noise | {imu} (Kalibr imu.yaml) |" in report
        assert "EuRoC's defaults" not in report
        assert "stereo" in report.split("##")[0]
        est = read_tum(out / "trajectory_tum.txt")
        g, _, ok = data["ds"].groundtruth.interpolate(est.t_ns)
        assert ok.all() and len(est) == len(data["ds"].image_stamps(0))
        ate = ate_rmse(est.p, g)
        print(f"\n[own bag, Kalibr files, offline stereo] ATE {1e3 * ate:.1f} mm over {len(est)} poses")
        assert ate < ATE_BOUND_M

    def test_euroc_topic_names_without_camera_info_say_euroc_defaults(self, data, tmp_path):
        r = _run(["--offline", str(data["euroc"]), "--max-frames", "8", "--device", "cpu", "--no-video", "--mono",
                  "--no-backend"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "calibration: cam0 intrinsics, cam0 T_BS from EuRoC's defaults" in r.stderr
        assert ("WARNING: EuRoC's defaults are used for cam0 intrinsics, cam0 T_BS (a bag on EuRoC's own topics "
                "/cam0/image_raw, /cam1/image_raw, /imu0)") in r.stderr
        out = Path(next(ln for ln in r.stderr.splitlines() if "output folder" in ln).split("output folder ")[1])
        report = (out / "report.md").read_text()
        assert "- **warning**: EuRoC's defaults are used for cam0 intrinsics, cam0 T_BS" in report
        assert "| cam0 intrinsics | EuRoC's defaults (a bag on EuRoC's own topics" in report

    @pytest.mark.ros
    @pytest.mark.slow
    def test_ros_path_replays_the_bags_own_topics(self, ros_graph, data, tmp_path):
        """The player gets the run's topics (its image_topic, image_right_topic, imu_topic
        parameters): every frame of the user's bag is tracked over ROS, and the report names the
        calibration's sources."""
        out = tmp_path / "out"
        r = _run([str(data["own"]), "--calibration", str(data["camchain"]), "--imu-calibration", str(data["imu"]),
                  "--out", str(out), "--device", "cpu", "--no-video", "--max-frames", "20", "--domain-id",
                  str(ros_graph.domain), "--namespace", f"calib_{os.getpid()}", "--timeout", "600"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        report = (out / "report.md").read_text()
        assert "recorder got 20/20" in report and f"| cam1 intrinsics | {data['camchain']} (Kalibr cam1) |" in report
        import yaml

        params = yaml.safe_load((out / "params.yaml").read_text())
        player = next(v for k, v in params.items() if k.endswith("player_node"))["ros__parameters"]
        assert (player["image_topic"], player["image_right_topic"], player["imu_topic"]) == OWN
        assert "Time to the first frame" in report
