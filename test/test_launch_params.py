"""What the launch files and the frontend derive, without ROS: the replayed dataset's calibration
(vilib_ros.launch_params), the frontend's calibration notice, its configuration checked once on the
way to the tracker, and its count of left images that went without a right image
(vilib_ros.nodes.frontend_setup / stereo_pairing).

Bugs guarded: euroc.launch.py using config/euroc.yaml's EuRoC calibration and stereo for any
dataset; a frontend started without camera_yaml running on EuRoC's calibration without a word; a
stereo frontend on a mono camera saying nothing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml


@pytest.fixture(scope="module")
def short_stereo(tmp_path_factory) -> Path:
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = tmp_path_factory.mktemp("short_stereo") / "seq"
    return generate_sequence(root, SequenceConfig(duration_s=0.5, stereo=True, seed=5), progress=False, workers=1)


def _sensor(seq: Path, name: str) -> dict:
    text = (seq / "mav0" / name / "sensor.yaml").read_text()
    return yaml.safe_load(text.split("\n", 1)[1] if text.startswith("%YAML") else text)


class TestDatasetNodeParams:
    def test_stereo_dataset(self, short_stereo, tmp_path):
        from vilib_ros.camera import CameraModel
        from vilib_ros.launch_params import dataset_node_params

        p = dataset_node_params(short_stereo, tmp_path / "out")
        assert p["stereo"] is True
        assert set(p) == {"camera_yaml", "right.camera_yaml", "imu_yaml", "stereo", "sources"}
        assert any("sensor.yaml" in line for line in p["sources"]), p["sources"]
        for key, cam in (("camera_yaml", "cam0"), ("right.camera_yaml", "cam1")):
            written = CameraModel.from_euroc_yaml(p[key])
            own = _sensor(short_stereo, cam)        # read here with yaml, not through the code under test
            assert [written.fx, written.fy, written.cx, written.cy] == own["intrinsics"]
            assert [written.width, written.height] == own["resolution"]
            assert list(written.distortion) == own["distortion_coefficients"]
            assert np.allclose(written.T_BS.ravel(), own["T_BS"]["data"])
        imu = yaml.safe_load(Path(p["imu_yaml"]).read_text())
        own = _sensor(short_stereo, "imu0")
        for k in ("gyroscope_noise_density", "gyroscope_random_walk", "accelerometer_noise_density",
                  "accelerometer_random_walk"):
            assert imu[k] == pytest.approx(float(own[k]))

    def test_mono_dataset_and_overrides(self, generated_sequence, short_stereo, tmp_path):
        from vilib_ros.launch_params import dataset_node_params

        p = dataset_node_params(generated_sequence, tmp_path / "a")
        assert p["stereo"] is False and "right.camera_yaml" not in p
        assert not (tmp_path / "a" / "cam1.yaml").exists()
        p = dataset_node_params(short_stereo, tmp_path / "b", stereo=False)
        assert p["stereo"] is False and "right.camera_yaml" not in p
        with pytest.raises(ValueError, match=r"stereo:=true, but .* has one camera \(no cam1\)"):
            dataset_node_params(generated_sequence, tmp_path / "c", stereo=True)
        with pytest.raises(FileNotFoundError, match="dataset not found"):
            dataset_node_params(tmp_path / "nowhere", tmp_path / "d")

    def test_a_dataset_without_calibration_is_refused_unless_given(self, short_stereo, tmp_path):
        """The launch never guesses: an ASL folder without cam0/sensor.yaml stops it with the ways to give
        the calibration; with ``calibration`` (that file, kept elsewhere) it runs and names the file."""
        import shutil

        from vilib_ros.launch_params import dataset_node_params

        seq = tmp_path / "seq"
        shutil.copytree(short_stereo, seq)
        kept = tmp_path / "cam0_sensor.yaml"
        shutil.move(seq / "mav0" / "cam0" / "sensor.yaml", kept)
        with pytest.raises(ValueError, match="calibration") as exc:
            dataset_node_params(seq, tmp_path / "a", stereo=False)
        assert "\n" not in str(exc.value)
        p = dataset_node_params(seq, tmp_path / "b", stereo=False, calibration=kept)
        assert any(str(kept) in line for line in p["sources"]), p["sources"]
        assert yaml.safe_load(Path(p["camera_yaml"]).read_text())["intrinsics"] == _sensor(short_stereo, "cam0")["intrinsics"]

    @pytest.mark.parametrize("value,expected", [("", None), ("auto", None), ("true", True), ("False", False),
                                                ("1", True), ("off", False), (True, True), (None, None)])
    def test_parse_stereo(self, value, expected):
        from vilib_ros.launch_params import parse_stereo

        assert parse_stereo(value) is expected

    def test_parse_stereo_refuses(self):
        from vilib_ros.launch_params import parse_stereo

        with pytest.raises(ValueError, match="stereo:=maybe is not true, false or auto"):
            parse_stereo("maybe")


class TestCalibrationNotice:
    def _values(self, **over):
        from vilib_ros.nodes.frontend_setup import default_values

        return default_values(over)

    def test_defaults_are_euroc_and_said(self):
        from vilib_ros.nodes.frontend_setup import calibration_notice

        line, euroc = calibration_notice(self._values(), stereo=False)
        assert euroc and "cam0 from the parameters" in line and "EuRoC V1_01's" in line and "camera_yaml:=" in line
        line, euroc = calibration_notice(self._values(), stereo=True)
        assert euroc and "cam0 and cam1 are EuRoC" in line and "camera_right_yaml" in line

    def test_given_calibration_is_not_flagged(self):
        from vilib_ros.nodes.frontend_setup import calibration_notice

        line, euroc = calibration_notice(self._values(camera_yaml="/x/cam0.yaml"), stereo=False)
        assert not euroc and line == "calibration: cam0 from camera_yaml /x/cam0.yaml"
        line, euroc = calibration_notice(self._values(intrinsics=[400.0, 400.0, 376.0, 240.0]), stereo=False)
        assert not euroc and "intrinsics [400.0, 400.0, 376.0, 240.0]" in line
        line, euroc = calibration_notice(self._values(calibration_source="camera_info"), stereo=True)
        assert not euroc and "camera_info" in line

    def test_right_camera_left_at_the_defaults(self):
        from vilib_ros.nodes.frontend_setup import calibration_notice

        line, euroc = calibration_notice(self._values(camera_yaml="/x/cam0.yaml"), stereo=True)
        assert euroc and "cam1 is EuRoC" in line and "cam0 from camera_yaml /x/cam0.yaml" in line

    def test_config_file_calibration_is_the_defaults(self):
        """config/euroc.yaml's frontend calibration is EuRoC's: started with it alone, the node warns."""
        from vilib_ros.nodes.frontend_setup import calibration_notice

        params = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "euroc.yaml").read_text())
        line, euroc = calibration_notice(self._values(**params["frontend_node"]["ros__parameters"]), stereo=True)
        assert euroc, line


class TestConfigCheckedOnce:
    """The frontend node's configuration is validated once, where the node takes the parameter
    values (build_config); the tracker it is handed to, its pipeline and the factory do not check
    it again. Counted on the configurations' own validate() methods, on a real CPU tracker."""

    @pytest.fixture
    def validations(self, monkeypatch):
        from vilib_ros.frontend.config import DetectorConfig, FrontendConfig, TrackerConfig

        calls: list[str] = []
        for cls in (FrontendConfig, DetectorConfig, TrackerConfig):
            original = cls.validate

            def counting(self, _original=original, _name=cls.__name__):
                calls.append(_name)
                return _original(self)

            monkeypatch.setattr(cls, "validate", counting)
        return calls

    def test_start_validates_once(self, validations):
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.nodes.frontend_setup import build_config, default_values, make_tracker

        values = default_values({"device": "cpu", "detector.threshold": 12.0})
        config = build_config(values)
        tracker = make_tracker(euroc_cam0(), config, "cpu")
        assert tracker.config.detector.threshold == 12.0
        assert sorted(validations) == ["DetectorConfig", "FrontendConfig", "TrackerConfig"], validations

    def test_a_change_is_validated_on_set_only(self, validations):
        """A change: checked on-set (build_config), then built again without a check and applied
        live (validated=True): still one validation per change."""
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.frontend.config import check_fits
        from vilib_ros.nodes.frontend_setup import build_config, default_values, make_tracker

        values = default_values({"device": "cpu"})
        tracker = make_tracker(euroc_cam0(), build_config(values), "cpu")
        validations.clear()
        values["detector.threshold"] = 20.0
        check_fits(752, 480, build_config(values), "cpu")            # on-set
        assert validations.count("FrontendConfig") == 1
        changed = build_config(values, check=False)                   # post-set
        assert tracker.apply_config(changed, validated=True) is True
        assert validations.count("FrontendConfig") == 1, validations
        assert tracker.config.detector.threshold == 20.0

    def test_values_outside_validate_are_refused_where_taken(self):
        from vilib_ros.nodes.frontend_setup import build_config, default_values

        with pytest.raises(ValueError, match="fb_levels"):
            build_config(default_values({"fb_levels": 8}))       # in range, but more than tracker.levels


class TestRightMissing:
    def _pairer(self, has_right: bool):
        from vilib_ros.nodes.stereo_pairing import StereoPairer

        clock = [100.0]
        out = []
        p = StereoPairer(lambda s, img, fid, t, img_right=None: out.append((s, img_right)), lambda: has_right,
                         0.0, lambda: None, clock=lambda: clock[0])
        return p, out, clock

    @pytest.mark.parametrize("has_right", [False, True], ids=["no_right_publisher", "silent_right_publisher"])
    def test_left_images_alone(self, has_right):
        p, out, clock = self._pairer(has_right)
        for k in range(30):
            clock[0] = 100.0 + 0.05 * k
            p.left(k, "L", "", -1.0)
            p.flush()                                  # timeout 0 (flush reads time.monotonic()): waiting lefts go alone
        assert [r for _, r in out] == [None] * len(out) and len(out) >= 29
        assert p.lefts_alone == len(out)
        assert p.right_missing_s(100.0 + 0.05 * 29) == pytest.approx(0.05 * 29, abs=0.06)

    def test_right_images_reset_it(self):
        p, out, clock = self._pairer(True)
        for k in range(10):
            clock[0] = 100.0 + 0.05 * k
            p.left(k, "L", "", -1.0)
            p.flush()
        assert p.right_missing_s(101.0) > 0.5
        p.right(10, "R", 101.0)
        p.left(10, "L", "", 101.0)
        assert out[-1] == (10, "R") and p.right_missing_s(102.0) == 0.0 and p.lefts_alone == 0

    def test_one_left_alone_is_not_missing(self):
        p, out, clock = self._pairer(False)
        p.left(1, "L", "", 100.0)
        assert p.lefts_alone == 1 and p.right_missing_s(200.0) == 0.0
