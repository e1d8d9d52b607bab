"""``python -m bench node-process``: the frontend node's tracker and per-frame steps outside ROS
(no DDS, CPU here). Not a speed test: it checks that the tool builds the node's tracker and that
every variant runs frames (the real EuRoC ones, or the generated sequence's where they are absent)
to tracks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


class TestBenchNodeProcess:
    """``python -m bench node-process``: the node's tracker outside ROS (no DDS)."""

    def test_node_tracker_and_steps(self, sequence_path, tmp_path):
        """It builds the tracker the node builds from the same parameter values (the node's
        FrontendConfig and camera), and every variant runs the frames to tracks, the node
        path with every step timed, and the gyro rotation agrees with a plain loop."""
        import dataclasses

        import numpy as np

        from bench.node_process import NODE_OVERRIDES, NodeSteps
        from vilib_ros.camera import CameraModel
        from vilib_ros.frontend import FrontendConfig
        from vilib_ros.nodes.frontend_setup import default_values

        yaml = sequence_path / "mav0" / "cam0" / "sensor.yaml"
        values = default_values({**NODE_OVERRIDES, "device": "cpu", "camera_yaml": str(yaml), "warm_up_frames": 1,
                                 "detector.threshold": 17.0, "fb_check": False})
        steps = NodeSteps(values)
        # against references outside the parameter code (not the build_config and camera_from_params
        # calls NodeSteps makes): the library's defaults with the values set, and the camera read from
        # the yaml by the dataset code
        want = FrontendConfig()
        want.detector.threshold, want.fb_check, want.stereo = 17.0, False, False   # stereo: NODE_OVERRIDES
        assert steps.tracker.config == want.validate()
        cam = CameraModel.from_euroc_yaml(yaml)
        for f in dataclasses.fields(cam):
            assert np.array_equal(getattr(steps.cam, f.name), getattr(cam, f.name)), f.name
        r = subprocess.run([sys.executable, "-m", "bench", "node-process", "--device", "cpu",
                            "--data", str(sequence_path), "--frames", "3", "--round", "3", "--gaps", "1",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=600,
                           cwd=Path(__file__).resolve().parents[1])
        assert r.returncode == 0, r.stderr[-3000:]
        d = json.loads((tmp_path / "node_process.json").read_text())
        assert d["device"] == "cpu"
        assert set(d["variants"]) == {"bench", "gyro", "message", "node", "node, IMU one by one",
                                      "node, sleep 1 ms", "node, spin 1 ms"}
        for name, v in d["variants"].items():
            assert v["frames"] == 3 and v["tracks"] > 0 and v["process"] > 0, name
        for k in ("imu_messages", "convert", "imu", "publish_encode", "node_total"):
            assert d["variants"]["node"][k] > 0, k
        assert d["gyro_rotation"]["max_difference"] < 1e-12
        assert (tmp_path / "node_process.md").is_file()
