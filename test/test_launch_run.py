"""The launch files, run for real: Jazzy's ``launch`` / ``launch_ros`` (vendored, installed by
``tools/install_launch.py``), the package in colcon's install layout, real DDS on this machine.

Each test runs one launch file through a ``LaunchService`` (``test/helpers/run_launch.py``, as
``ros2 launch`` does) in its own process, watches what arrives on the topics and what the
launch prints, then stops it with SIGINT: every process the launch started must end with exit 0
("process has finished cleanly") and none may be left over.

Bugs guarded: ``euroc.launch.py`` on a mono EuRoC folder starting a stereo frontend and backend
that wait, silently, for right images that never come; on a generated stereo sequence using
config/euroc.yaml's EuRoC lens calibration instead of the dataset's own and estimating nothing; a
stereo frontend without right images saying nothing.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from launch_support import LaunchRun, alive, colcon_install, launch_env, launch_missing

pytestmark = [pytest.mark.ros, pytest.mark.slow]

#: first tracks: a CPU frontend's first start compiles its kernels (numba, cached on disk afterwards)
START_TIMEOUT = 240.0
#: launch's own shutdown: SIGINT, then SIGTERM after 5 s, then SIGKILL; the backend writes its files
STOP_TIMEOUT = 90.0
#: the generated stereo sequence replayed by euroc.launch.py and vio.launch.py
STEREO_SECONDS = 6.0
#: bound on the trajectory's APE RMSE (SE(3)-aligned) on the generated stereo sequence: about ten
#: times what this test reaches with the dataset's calibration
ATE_BOUND_M = 0.02


@pytest.fixture(scope="module", autouse=True)
def _launch_installed():
    reason = launch_missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> Path:
    """The package installed as colcon installs it (share/, lib/vilib_ros/)."""
    root = tmp_path_factory.mktemp("colcon")
    return colcon_install(root / "install" / "vilib_ros", root / "build")


@pytest.fixture(scope="module")
def stereo_sequence(tmp_path_factory) -> Path:
    """A generated stereo sequence (pinhole cameras, no lens distortion: not EuRoC's calibration)."""
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = tmp_path_factory.mktemp("launch_stereo") / "synthetic_stereo"
    return generate_sequence(root, SequenceConfig(duration_s=STEREO_SECONDS, stereo=True, seed=3), progress=False,
                             workers=1)


@pytest.fixture
def start(ros_graph, prefix, tmp_path):
    """start(launch_file_name, **args) -> LaunchRun on the module's domain; every launch still running
    at the end is killed."""
    runs = []

    def _start(name: str, **args) -> LaunchRun:
        env = launch_env(prefix, ros_graph.domain, tmp_path / "ros_log")
        run = LaunchRun(prefix / "share" / "vilib_ros" / "launch" / name, args, env,
                        tmp_path / f"{name}.{len(runs)}.log")
        runs.append(run)
        return run

    yield _start
    for run in runs:
        run.kill()


@pytest.fixture
def topics(ros_graph):
    """The module graph's client counting what arrives on /tracks, /odometry, /diagnostics (the next
    test gets a client of its own)."""
    yield Topics(ros_graph)
    ros_graph.reset()


class Topics:
    def __init__(self, graph):
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import Odometry
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud

        self.client = graph.client
        self.tracks = graph.collect(PointCloud, "/tracks", qos_profile_sensor_data)
        self.odometry = graph.collect(Odometry, "/odometry", qos_profile_sensor_data)
        self.diagnostics = graph.collect(DiagnosticArray, "/diagnostics", 50)

    def wait(self, predicate, run: LaunchRun, timeout: float, what: str) -> None:
        """Spin until ``predicate()``; fails on timeout or when the launch ends first."""
        def check():
            if run.proc.poll() is not None:
                raise AssertionError(f"the launch ended (rc {run.proc.returncode}) before {what}:\n{run.tail()}")
            return predicate()

        if not self.client.spin_until(check, timeout, 0.1):
            raise AssertionError(f"no {what} within {timeout:.0f} s:\n{run.tail()}")


def stop_cleanly(run: LaunchRun, expect: set[str]) -> str:
    """SIGINT to the launch: it returns 0, every process it started finished cleanly, none is left."""
    rc = run.interrupt(STOP_TIMEOUT)
    out = run.output()
    started, ended = run.started(), run.ended()
    assert {name.rsplit("-", 1)[0] for name in started} == expect, out[-4000:]
    assert ended == {name: 0 for name in started}, f"not every process finished cleanly: {ended}\n{out[-4000:]}"
    left = [pid for pid in started.values() if alive(pid)]
    assert not left, f"processes left over after the launch ended: {left}"
    assert rc == 0, out[-4000:]
    return out


def seq_yaml(seq: Path, sensor: str) -> str:
    return str(seq / "mav0" / sensor / "sensor.yaml")


def start_player(graph, seq: Path, tmp_path: Path, stereo: bool):
    """A player_node on ``graph`` replaying ``seq`` on /cam0/image_raw (/cam1/image_raw), /imu0, real
    time, started once the frontend and the backend (or only the frontend) listen."""
    params = {"dataset": str(seq), "rate": 1.0, "publish_cam1": stereo, "wait_for_subscribers": 1,
              "wait_for_imu_subscribers": 1, "wait_timeout_s": START_TIMEOUT, "progress": False}
    remaps = {"cam0/image_raw": "/cam0/image_raw", "cam1/image_raw": "/cam1/image_raw", "imu0": "/imu0",
              "tracks": "/tracks"}
    return graph.start("player_node", params=params, remaps=remaps, log=tmp_path / "player_node.log")


def calibration_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if "[frontend_node]: calibration: " in ln]
    assert lines, f"the frontend did not say where its calibration comes from:\n{out[-3000:]}"
    return lines[0]


class TestVio:
    def test_player_fed_tracks_and_odometry(self, ros_graph, start, topics, stereo_sequence, tmp_path):
        """vio.launch.py device:=cpu with the sequence's sensor.yaml files, fed by a player_node:
        tracks and odometry arrive; SIGINT stops both nodes cleanly."""
        seq = stereo_sequence
        run = start("vio.launch.py", device="cpu", camera_yaml=seq_yaml(seq, "cam0"),
                    camera_right_yaml=seq_yaml(seq, "cam1"), imu_yaml=seq_yaml(seq, "imu0"))
        player = start_player(ros_graph, seq, tmp_path, stereo=True)
        try:
            topics.wait(lambda: len(topics.tracks) >= 20, run, START_TIMEOUT, "20 tracks messages")
            topics.wait(lambda: len(topics.odometry) >= 5, run, 120.0, "5 odometry messages")
        finally:
            player.stop()
        out = stop_cleanly(run, {"frontend_node", "backend_node"})
        assert f"cam0 from camera_yaml {seq_yaml(seq, 'cam0')}" in calibration_line(out)
        assert max(len(m.points) for m in topics.tracks) >= 30


class TestEuroc:
    def test_stereo_dataset_own_calibration_on_ground_truth(self, start, topics, stereo_sequence, tmp_path):
        """euroc.launch.py on a generated stereo sequence: the dataset's own sensor.yaml calibration
        reaches the nodes (pinhole, no distortion; not config/euroc.yaml's EuRoC lens), stereo is
        detected, and the trajectory lies on the ground truth."""
        from vilib_ros.camera import CameraModel
        from vilib_ros.evaluation import evaluate

        seq = stereo_sequence
        calib, traj = tmp_path / "calibration", tmp_path / "trajectory_tum.txt"
        run = start("euroc.launch.py", dataset=str(seq), rviz="false", device="cpu", rate="1.0",
                    calibration_dir=str(calib), trajectory_path=str(traj))
        run.wait_for_text("replay done", START_TIMEOUT + 3 * STEREO_SECONDS)
        _wait_until_quiet(traj, run)
        out = stop_cleanly(run, {"player_node", "frontend_node", "backend_node"})

        assert f"{seq}: stereo (from the dataset)" in out
        line = calibration_line(out)
        assert f"cam0 from camera_yaml {calib / 'cam0.yaml'}" in line and \
            f"cam1 from right.camera_yaml {calib / 'cam1.yaml'}" in line and "EuRoC" not in line
        for cam in ("cam0", "cam1"):      # the files the nodes read hold the dataset's cameras
            given, own = CameraModel.from_euroc_yaml(calib / f"{cam}.yaml"), CameraModel.from_euroc_yaml(
                seq_yaml(seq, cam))
            assert (given.fx, given.fy, given.cx, given.cy) == (own.fx, own.fy, own.cx, own.cy)
            assert np.array_equal(given.distortion, own.distortion) and not np.any(own.distortion)
            assert np.allclose(given.T_BS, own.T_BS)
        res = evaluate(traj, seq / "groundtruth_tum.txt", plot=False)
        # estimated from the first seconds on, to the end (the poses are the keyframes')
        assert res["matched_poses"] >= 20 and res["duration_s"] >= 0.7 * STEREO_SECONDS, res
        assert res["ape_m"]["rmse"] < ATE_BOUND_M, res["markdown"]

    @pytest.mark.parametrize("how", ["detected", "stereo_false"])
    def test_mono(self, how, start, topics, generated_sequence, stereo_sequence, tmp_path):
        """Mono: detected from a dataset without cam1 (with rviz:=true where rviz2 is not installed:
        a warning, the rest runs), or asked for with stereo:=false on a stereo dataset. Frontend and
        backend are mono (no right-image warning, only cam0's calibration), tracks arrive."""
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix

        if how == "detected":
            seq, args = generated_sequence, {}
            try:
                get_package_prefix("rviz2")
                args["rviz"] = "false"
                no_rviz = False
            except PackageNotFoundError:
                no_rviz = True
        else:
            seq, args, no_rviz = stereo_sequence, {"stereo": "false", "rviz": "false"}, False
        run = start("euroc.launch.py", dataset=str(seq), device="cpu", calibration_dir=str(tmp_path / "calib"),
                    **args)
        topics.wait(lambda: len(topics.tracks) >= 20, run, START_TIMEOUT, "20 tracks messages")
        out = stop_cleanly(run, {"player_node", "frontend_node", "backend_node"})
        assert f"{seq}: mono ({'from the dataset' if how == 'detected' else 'stereo:=false'})" in out
        line = calibration_line(out)
        assert "cam0 from camera_yaml" in line and "cam1" not in line
        assert "[backend_node]: backend: VioEstimator (mono)" in out, out[-3000:]
        assert "stereo is on" not in out
        assert not (tmp_path / "calib" / "cam1.yaml").exists()
        if no_rviz:
            assert "rviz:=true, but rviz2 is not installed" in out and "rviz2-" not in str(run.started())

    def test_refusals(self, start, generated_sequence, tmp_path):
        """A dataset that is not there, stereo:=true for one camera, a rate that is not a number: one
        line says why, nothing starts."""
        cases = [({"dataset": str(tmp_path / "nowhere")}, "dataset not found"),
                 ({"dataset": str(generated_sequence), "stereo": "true"}, "has one camera (no cam1)"),
                 ({"dataset": str(generated_sequence), "rate": "fast"}, "rate:=fast is not a number")]
        for args, why in cases:
            run = start("euroc.launch.py", rviz="false", **args)
            rc = run.wait(60.0)
            out = run.output()
            said = [ln for ln in out.splitlines() if "euroc.launch.py: cannot start: " in ln]
            assert rc != 0 and len(said) == 1 and why in said[0], out
            assert not run.started(), out


class TestFrontendAlone:
    def test_no_right_images_and_euroc_defaults_said(self, ros_graph, start, topics, generated_sequence, tmp_path):
        """frontend.launch.py alone, stereo (config/euroc.yaml's) and no camera_yaml, fed mono images:
        tracks arrive; it warns that its calibration is EuRoC's defaults, and within seconds that no
        right image comes (naming the topic and stereo:=false), in its log and its diagnostics."""
        run = start("frontend.launch.py", device="cpu")
        player = start_player(ros_graph, generated_sequence, tmp_path, stereo=False)
        try:
            topics.wait(lambda: len(topics.tracks) >= 5, run, START_TIMEOUT, "5 tracks messages")
            t_tracks = time.monotonic()
            run.wait_for_text("stereo is on, but no image came on /cam1/image_raw", 30.0)
            said_after = time.monotonic() - t_tracks

            def right_missing():
                for arr in topics.diagnostics:
                    for st in arr.status:
                        values = {kv.key: kv.value for kv in st.values}
                        if float(values.get("stereo.right_missing_s", 0)) > 0 and "stereo:=false" in st.message:
                            return st
                return None

            topics.wait(lambda: right_missing() is not None, run, 30.0, "diagnostics saying right images are missing")
        finally:
            player.stop()
        out = stop_cleanly(run, {"frontend_node"})
        warning = [ln for ln in out.splitlines() if "stereo is on, but no image came" in ln][0]
        assert "[WARN]" in warning and "stereo:=false" in warning
        assert said_after < 15.0
        assert right_missing().level in (1, b"\x01")
        line = calibration_line(out)
        assert "[WARN]" in line and "EuRoC V1_01's" in line and "camera_yaml:=" in line


def _wait_until_quiet(traj: Path, run: LaunchRun, quiet_s: float = 4.0, limit_s: float = 120.0) -> None:
    """The backend may lag the player: wait until its trajectory file stops growing (bounded)."""
    end, last, t_last = time.monotonic() + limit_s, -1, time.monotonic()
    while time.monotonic() < end and time.monotonic() - t_last < quiet_s:
        assert run.proc.poll() is None, run.tail()
        size = traj.stat().st_size if traj.exists() else 0
        if size != last:
            last, t_last = size, time.monotonic()
        time.sleep(0.5)
