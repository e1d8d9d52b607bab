"""Camera calibration input: every malformed or non-finite value is an error naming the file and
the key; the EuRoC defaults live with the model.

Guards: NaN intrinsics or distortion accepted (every tracks message then carries NaN points, the
backend drops them all, the run reports every frame tracked); a sensor.yaml without intrinsics
failing with ``KeyError: 'intrinsics'``, a T_BS of 15 numbers with a reshape error.
"""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.camera import CameraModel, default_camera, euroc_cam0, euroc_cam1

EUROC_CAM0_YAML = """%YAML:1.0
sensor_type: camera
comment: VI-Sensor cam0 (MT9M034)
T_BS:
  cols: 4
  rows: 4
  data: [0.0148655429818, -0.999880929698, 0.00414029679422, -0.0216401454975,
         0.999557249008, 0.0149672133247, 0.025715529948, -0.064676986768,
        -0.0257744366974, 0.00375618835797, 0.999660727178, 0.00981073058949,
         0.0, 0.0, 0.0, 1.0]
rate_hz: 20
resolution: [752, 480]
camera_model: pinhole
intrinsics: [458.654, 457.296, 367.215, 248.375] #fu, fv, cu, cv
distortion_model: radial-tangential
distortion_coefficients: [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]
"""


def _write(tmp_path, text):
    p = tmp_path / "sensor.yaml"
    p.write_text(text)
    return p


class TestFromEurocYaml:
    def test_the_euroc_file(self, tmp_path):
        c = CameraModel.from_euroc_yaml(_write(tmp_path, EUROC_CAM0_YAML))
        ref = euroc_cam0()
        assert (c.width, c.height, c.fx, c.fy, c.cx, c.cy) == (752, 480, 458.654, 457.296, 367.215, 248.375)
        np.testing.assert_array_equal(c.distortion, ref.distortion)
        np.testing.assert_array_equal(c.T_BS, ref.T_BS)
        assert c.distortion_model == "radial-tangential"

    @pytest.mark.parametrize("old,new,key,what", [
        ("intrinsics: [458.654, 457.296, 367.215, 248.375]", "intrinsics: [.nan, 457.296, 367.215, 248.375]",
         "intrinsics", "non-finite"),
        ("intrinsics: [458.654, 457.296, 367.215, 248.375]", "intrinsics: [458.654, .inf, 367.215, 248.375]",
         "intrinsics", "non-finite"),
        ("intrinsics: [458.654, 457.296, 367.215, 248.375]", "", "intrinsics", "missing"),
        ("intrinsics: [458.654, 457.296, 367.215, 248.375]", "intrinsics: [458.654, 457.296]", "intrinsics",
         "4 numbers, got 2"),
        ("intrinsics: [458.654, 457.296, 367.215, 248.375]", "intrinsics: fast", "intrinsics", "4 numbers"),
        ("resolution: [752, 480]", "", "resolution", "missing"),
        ("resolution: [752, 480]", "resolution: [752.5, 480]", "resolution", "integers"),
        ("[-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]", "[-0.28340811, .nan, 0.00019359, 1.76187114e-05]",
         "distortion_coefficients", "non-finite"),
        ("distortion_model: radial-tangential", "distortion_model: kannala-brandt", "distortion_model", "one of"),
        ("         0.0, 0.0, 0.0, 1.0]", "         0.0, 0.0, 0.0]", "T_BS", "16 numbers, got 15"),
        ("0.0148655429818,", ".nan,", "T_BS", "non-finite"),
    ])
    def test_bad_value_names_file_and_key(self, tmp_path, old, new, key, what):
        assert old in EUROC_CAM0_YAML
        path = _write(tmp_path, EUROC_CAM0_YAML.replace(old, new))
        with pytest.raises(ValueError) as err:
            CameraModel.from_euroc_yaml(path)
        msg = str(err.value)
        assert str(path) in msg and key in msg and what in msg, msg

    def test_negative_focal_length(self, tmp_path):
        path = _write(tmp_path, EUROC_CAM0_YAML.replace("[458.654,", "[-458.654,"))
        with pytest.raises(ValueError, match=f"{path}: focal lengths must be positive"):
            CameraModel.from_euroc_yaml(path)

    @pytest.mark.parametrize("text", ["", "- just\n- a list\n", "key: [unclosed\n"])
    def test_not_a_calibration(self, tmp_path, text):
        path = _write(tmp_path, text)
        with pytest.raises(ValueError, match=str(path)):
            CameraModel.from_euroc_yaml(path)

    @pytest.mark.parametrize("name,model", [("radtan", "radial-tangential"), ("plumb_bob", "radial-tangential"),
                                            ("equidistant", "equidistant"), ("fisheye", "equidistant")])
    def test_model_aliases(self, tmp_path, name, model):
        path = _write(tmp_path, EUROC_CAM0_YAML.replace("distortion_model: radial-tangential",
                                                        f"distortion_model: {name}"))
        assert CameraModel.from_euroc_yaml(path).distortion_model == model


class TestModel:
    @pytest.mark.parametrize("kw,what", [({"fx": float("nan")}, "finite"), ({"cy": float("inf")}, "finite"),
                                         ({"distortion": [0.1, np.nan, 0, 0]}, "distortion"),
                                         ({"T_BS": np.eye(4).ravel()[:15]}, "16 numbers"),
                                         ({"fy": -1.0}, "positive"), ({"distortion_model": "pinhole++"}, "one of")])
    def test_rejects(self, kw, what):
        args = dict(width=752, height=480, fx=458.0, fy=457.0, cx=367.0, cy=248.0, distortion_model="radial-tangential")
        args.update(kw)
        with pytest.raises(ValueError, match=what):
            CameraModel(**args)

    def test_defaults_live_with_the_model(self):
        assert default_camera(0).fx == euroc_cam0().fx == 458.654
        assert default_camera(1).fx == euroc_cam1().fx == 457.587
