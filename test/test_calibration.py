"""Calibration readers and resolution (vilib_ros.calibration, the bag topics' choice).

References: hand-written Kalibr / EuRoC files with known values, and transforms checked on a
point worked out by hand, not with the code's own inverse. A bag of one's own camera (other topic
names, no camera_info) is refused naming the ways to give its calibration (guards: such a bag
estimated with EuRoC's cam0 intrinsics, ``T_BS`` and IMU noise without a word).
"""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.calibration import (CalibrationError, CalibrationMissing, read_camera_calibration,
                                   read_imu_calibration, read_kalibr_camchain)

#: cam0: T_cam_imu = a 90 deg turn about z, then (0.1, 0.2, 0.3): p_cam = (-y, x, z) + t for p_imu = (x, y, z)
CAMCHAIN = """\
cam0:
  T_cam_imu:
  - [0.0, -1.0, 0.0, 0.1]
  - [1.0, 0.0, 0.0, 0.2]
  - [0.0, 0.0, 1.0, 0.3]
  - [0.0, 0.0, 0.0, 1.0]
  cam_overlaps: [1]
  camera_model: pinhole
  distortion_coeffs: [-0.28, 0.07, 0.0002, 1.8e-05]
  distortion_model: radtan
  intrinsics: [458.6, 457.3, 367.2, 248.4]
  resolution: [752, 480]
  rostopic: /camera/infra1/image_rect_raw
  timeshift_cam_imu: 0.0
cam1:
  T_cn_cnm1:
  - [1.0, 0.0, 0.0, -0.11]
  - [0.0, 1.0, 0.0, 0.0]
  - [0.0, 0.0, 1.0, 0.0]
  - [0.0, 0.0, 0.0, 1.0]
  camera_model: pinhole
  distortion_coeffs: [0.01, -0.02, 0.003, -0.004]
  distortion_model: equidistant
  intrinsics: [450.0, 451.0, 370.0, 250.0]
  resolution: [752, 480]
  rostopic: /camera/infra2/image_rect_raw
  timeshift_cam_imu: 0.0021
"""


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


class TestKalibrCamchain:
    def test_values_and_extrinsics_by_hand(self, tmp_path):
        s = read_kalibr_camchain(_write(tmp_path, "camchain-imucam.yaml", CAMCHAIN))
        c0, c1 = s.camera(0), s.camera(1)
        i0 = c0.intrinsics
        assert (i0.width, i0.height, i0.fx, i0.fy, i0.cx, i0.cy) == (752, 480, 458.6, 457.3, 367.2, 248.4)
        assert i0.distortion_model == "radial-tangential"
        np.testing.assert_array_equal(i0.distortion, [-0.28, 0.07, 0.0002, 1.8e-05])
        assert c1.intrinsics.distortion_model == "equidistant" and c1.intrinsics.fx == 450.0
        assert (c0.rostopic, c1.rostopic) == ("/camera/infra1/image_rect_raw", "/camera/infra2/image_rect_raw")
        # the IMU point (1, 0, 0) is (0, 1, 0) + t = (0.1, 1.2, 0.3) in cam0: T_BS maps it back
        np.testing.assert_allclose(c0.T_BS @ [0.1, 1.2, 0.3, 1.0], [1, 0, 0, 1], atol=1e-12)
        # cam1 is cam0 shifted by -0.11 in x: the same IMU point is (-0.01, 1.2, 0.3) there
        np.testing.assert_allclose(c1.T_BS @ [-0.01, 1.2, 0.3, 1.0], [1, 0, 0, 1], atol=1e-12)
        assert c0.T_BS_from[1] == "Kalibr cam0 T_cam_imu, inverted"
        assert "T_cn_cnm1" in c1.T_BS_from[1]
        assert any("cam1 timeshift_cam_imu 0.0021 s is not applied" in n for n in s.notes)

    def test_T_imu_cam_as_openvins_writes_it(self, tmp_path):
        text = CAMCHAIN.split("cam1:")[0].replace("T_cam_imu", "T_imu_cam")
        c0 = read_kalibr_camchain(_write(tmp_path, "kalibr_imucam_chain.yaml", text)).camera(0)
        # T_imu_cam maps camera points into the IMU frame: the camera point (1, 0, 0) is (0.1, 1.2, 0.3)
        np.testing.assert_allclose(c0.T_BS @ [1.0, 0, 0, 1], [0.1, 1.2, 0.3, 1], atol=1e-12)

    @pytest.mark.parametrize("edit,needle", [
        (lambda t: t.replace("camera_model: pinhole", "camera_model: omni"), "camera_model 'omni' is not supported"),
        (lambda t: t.replace("distortion_model: radtan", "distortion_model: fov"), "'fov' is not supported"),
        (lambda t: t.replace("[0.0, -1.0, 0.0, 0.1]", "[0.0, -2.0, 0.0, 0.1]"), "not a rigid transform"),
        (lambda t: t.replace("intrinsics: [458.6, 457.3, 367.2, 248.4]", "intrinsics: [458.6, 457.3]"),
         "'intrinsics' must hold 4 numbers, got 2"),
        (lambda t: t.replace("cam0:", "camA:"), "neither a Kalibr camchain"),
    ])
    def test_unusable_files_are_refused_naming_the_value(self, tmp_path, edit, needle):
        with pytest.raises(CalibrationError, match=needle):
            read_camera_calibration(_write(tmp_path, "c.yaml", edit(CAMCHAIN)))

    def test_an_imu_file_given_as_the_camera_calibration(self, tmp_path):
        p = _write(tmp_path, "imu.yaml", "imu0:\n  accelerometer_noise_density: 0.01\n")
        with pytest.raises(CalibrationError, match="IMU calibration: give it with --imu-calibration"):
            read_camera_calibration(p)


class TestImuFiles:
    NOISE = ("accelerometer_noise_density: 0.0186\naccelerometer_random_walk: 0.000433\n"
             "gyroscope_noise_density: 0.00187\ngyroscope_random_walk: 2.66e-05\n")

    def test_kalibr_flat_nested_and_euroc(self, tmp_path):
        flat = read_imu_calibration(_write(tmp_path, "imu.yaml", self.NOISE + "rostopic: /camera/imu\nupdate_rate: 400.0\n"))
        nested = read_imu_calibration(_write(tmp_path, "imu-res.yaml", "imu0:\n" + "".join(
            "  " + ln + "\n" for ln in (self.NOISE + "rostopic: /imu0\nupdate_rate: 200.0\nmodel: calibrated").splitlines())))
        euroc = read_imu_calibration(_write(tmp_path, "sensor.yaml", "%YAML:1.0\nsensor_type: imu\nrate_hz: 200\n" + self.NOISE))
        want = {"accelerometer_noise_density": 0.0186, "accelerometer_random_walk": 0.000433,
                "gyroscope_noise_density": 0.00187, "gyroscope_random_walk": 2.66e-05}
        for s in (flat, nested, euroc):
            assert {k: s.imu_noise[k] for k in want} == want
        assert (flat.imu_rostopic, flat.imu_noise["rate_hz"]) == ("/camera/imu", 400.0)
        assert nested.imu_rostopic == "/imu0" and nested.imu_noise_from[1] == "Kalibr imu.yaml"
        assert euroc.imu_rostopic is None and euroc.imu_noise_from[1] == "EuRoC sensor.yaml"

    def test_a_missing_or_bad_key_is_refused(self, tmp_path):
        with pytest.raises(CalibrationError, match="missing gyroscope_random_walk"):
            read_imu_calibration(_write(tmp_path, "a.yaml", self.NOISE.replace("gyroscope_random_walk", "gyro_rw")))
        with pytest.raises(CalibrationError, match="'gyroscope_noise_density' must be a positive number"):
            read_imu_calibration(_write(tmp_path, "b.yaml", self.NOISE.replace("0.00187", "-1")))
        with pytest.raises(FileNotFoundError, match="IMU calibration not found"):
            read_imu_calibration(tmp_path / "none.yaml")


class TestChooseTopics:
    IMAGES = ["/camera/infra1/image_rect_raw", "/camera/infra2/image_rect_raw"]

    def _choose(self, images, imus, **named):
        from vilib_ros.datasets import Topics
        from vilib_ros.datasets.bags import choose_topics

        return choose_topics("my.bag", images, imus, Topics(**named))

    def test_two_image_topics_are_refused_listing_them(self):
        from vilib_ros.datasets import DatasetError

        with pytest.raises(DatasetError) as err:
            self._choose(self.IMAGES, ["/camera/imu"])
        assert str(err.value) == ("my.bag: 2 sensor_msgs/Image topics and no way to tell which is the left camera: "
                                  "give --image-topic (and --image-right-topic for stereo) from "
                                  "/camera/infra1/image_rect_raw, /camera/infra2/image_rect_raw")

    def test_two_imu_topics_are_refused_listing_them(self):
        from vilib_ros.datasets import DatasetError

        with pytest.raises(DatasetError, match="2 sensor_msgs/Imu topics .* give --imu-topic from /a/imu, /b/imu"):
            self._choose(self.IMAGES[:1], ["/b/imu", "/a/imu"])

    def test_named_topics_pick(self):
        t = self._choose(self.IMAGES, ["/b/imu", "/a/imu"], image=self.IMAGES[1], imu="/a/imu")
        assert (t.image, t.image_right, t.imu) == (self.IMAGES[1], None, "/a/imu")
        t = self._choose(self.IMAGES, ["/imu"], image=self.IMAGES[0], image_right=self.IMAGES[1])
        assert (t.image, t.image_right, t.imu) == (self.IMAGES[0], self.IMAGES[1], "/imu")

    def test_euroc_names_and_the_only_topic(self):
        t = self._choose(["/cam1/image_raw", "/cam0/image_raw", "/other"], ["/imu0", "/imu1"])
        assert (t.image, t.image_right, t.imu) == ("/cam0/image_raw", "/cam1/image_raw", "/imu0")
        t = self._choose(["/camera/image"], ["/imu"])
        assert (t.image, t.image_right, t.imu) == ("/camera/image", None, "/imu")

    def test_a_named_topic_that_is_not_there(self):
        from vilib_ros.datasets import DatasetError

        with pytest.raises(DatasetError, match=r"no sensor_msgs/Image topic /x \(--image-topic\) in the bag "
                                               r"\(Image topics: /camera/infra1/image_rect_raw, "):
            self._choose(self.IMAGES, [], image="/x", origin={"image": "--image-topic"})


@pytest.fixture(scope="module")
def seq(tmp_path_factory):
    """A 0.3 s generated stereo sequence (its calibration known from its sensor.yaml files)."""
    pytest.importorskip("rosbags")
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = generate_sequence(tmp_path_factory.mktemp("calib_bags") / "seq",
                             SequenceConfig(duration_s=0.3, seed=0), progress=False, workers=1)
    return open_dataset(root)


class TestBagCalibration:
    """What a bag holds, and when EuRoC's defaults may fill the rest (bags written from a generated
    sequence whose calibration is known)."""

    def _bag(self, seq, tmp_path, **kw):
        from vilib_ros.datasets.bag_writer import write_bag

        return write_bag(seq, tmp_path / "bag", **kw)

    def test_own_topics_without_calibration_are_refused(self, seq, tmp_path):
        from vilib_ros.datasets import Topics, open_dataset

        bag = self._bag(seq, tmp_path, image_topics=["/camera/infra1/image_rect_raw"], imu_topic="/camera/imu",
                        camera_info=False, tf_static=False)
        with open_dataset(bag, Topics(image="/camera/infra1/image_rect_raw")) as ds:
            assert ds.euroc_defaults is None
            with pytest.raises(CalibrationMissing) as err:
                ds.resolve_calibration()
        assert str(err.value) == (
            f"{bag}: no calibration for /camera/infra1/image_rect_raw (no /camera/infra1/camera_info in the bag, "
            "not EuRoC's topics) and no IMU noise for /camera/imu (a bag holds no IMU noise, not EuRoC's topics): "
            "give --calibration camchain-imucam.yaml (Kalibr) or --calibration cam0/sensor.yaml (EuRoC), "
            "and --imu-calibration imu.yaml (Kalibr) or --imu-calibration imu0/sensor.yaml (EuRoC)")

    def test_camera_info_without_extrinsics_is_refused(self, seq, tmp_path):
        from vilib_ros.datasets import Topics, open_dataset

        bag = self._bag(seq, tmp_path, image_topics=["/left/image", "/right/image"], imu_topic="/imu", tf_static=False)
        with open_dataset(bag, Topics(image="/left/image", image_right="/right/image")) as ds:
            with pytest.raises(CalibrationMissing, match=r"no extrinsics \(T_BS\) for /left/image \(no /tf_static "
                                                         r"from the IMU's frame imu0 to cam0 in the bag, not EuRoC's"):
                ds.resolve_calibration(need_imu=False)

    def test_camera_info_and_tf_static_of_own_topics(self, seq, tmp_path):
        from vilib_ros.datasets import Topics, open_dataset

        bag = self._bag(seq, tmp_path, image_topics=["/left/image", "/right/image"], imu_topic="/imu")
        with open_dataset(bag, Topics(image="/left/image", image_right="/right/image")) as ds:
            cal = ds.resolve_calibration(need_imu=False)
            for got, want in zip(cal.cameras, seq.cameras):
                assert (got.width, got.height) == (want.width, want.height)
                np.testing.assert_allclose([got.fx, got.fy, got.cx, got.cy], [want.fx, want.fy, want.cx, want.cy])
                np.testing.assert_allclose(got.T_BS, want.T_BS, atol=1e-9)
            assert cal.defaults == [] and cal.imu_noise is None
            assert [s[2] for s in cal.sources] == ["/left/camera_info", "/tf_static imu0 -> cam0",
                                                   "/right/camera_info", "/tf_static imu0 -> cam1"]

    def test_euroc_topics_take_euroc_defaults_and_say_so(self, seq, tmp_path):
        from vilib_ros.camera import euroc_cam0
        from vilib_ros.datasets import open_dataset

        bag = self._bag(seq, tmp_path, camera_info=False, tf_static=False)
        with open_dataset(bag) as ds:
            cal = ds.resolve_calibration()
        assert cal.cameras[0].fx == euroc_cam0().fx
        np.testing.assert_array_equal(cal.cameras[0].T_BS, euroc_cam0().T_BS)
        assert cal.defaults == ["cam0 intrinsics", "cam0 T_BS", "cam1 intrinsics", "cam1 T_BS", "IMU noise"]
        assert cal.console_lines()[0] == ("calibration: cam0 intrinsics, cam0 T_BS, cam1 intrinsics, cam1 T_BS, "
                                          "IMU noise from EuRoC's defaults")
        assert cal.console_lines()[1].startswith("WARNING: EuRoC's defaults are used for")

    def test_the_users_files_win_value_by_value(self, seq, tmp_path):
        from vilib_ros.calibration import read_given
        from vilib_ros.datasets import open_dataset

        bag = self._bag(seq, tmp_path)     # EuRoC topics, camera_info and tf of the sequence
        cam = _write(tmp_path, "cam0.yaml", "intrinsics: [400.0, 401.0, 370.0, 250.0]\nresolution: [752, 480]\n"
                                            "distortion_model: radtan\ndistortion_coefficients: [0, 0, 0, 0]\n")
        imu = _write(tmp_path, "imu.yaml", TestImuFiles.NOISE)
        with open_dataset(bag) as ds:
            cal = ds.resolve_calibration(read_given(cam, imu))
        rows = {what: where for what, where, _, _ in cal.sources}
        assert rows == {"cam0 intrinsics": str(cam), "cam0 T_BS": str(bag), "cam1 intrinsics": str(bag),
                        "cam1 T_BS": str(bag), "IMU noise": str(imu)}
        assert cal.cameras[0].fx == 400.0 and cal.imu_noise["gyroscope_noise_density"] == 0.00187

    def test_a_calibration_of_another_resolution_is_refused(self, seq, tmp_path):
        from vilib_ros.calibration import read_given
        from vilib_ros.datasets import open_dataset

        bag = self._bag(seq, tmp_path)
        cam = _write(tmp_path, "cam0.yaml", "intrinsics: [400.0, 401.0, 320.0, 240.0]\nresolution: [640, 480]\n")
        with open_dataset(bag) as ds, pytest.raises(CalibrationError, match=r"is 640x480, its images are 752x480"):
            ds.resolve_calibration(read_given(cam))


class TestTfChain:
    def test_a_chain_through_intermediate_frames(self):
        """camera_link -> imu_frame and camera_link -> infra1 -> infra1_optical, as a RealSense
        driver publishes them: the IMU -> optical frame transform is found by walking the tree."""
        from vilib_ros.datasets.bags import tf_chain

        def T(t, R=np.eye(3)):
            out = np.eye(4)
            out[:3, :3], out[:3, 3] = R, t
            return out

        optical = np.array([[0.0, 0, 1], [-1, 0, 0], [0, -1, 0]])     # x right, y down, z forward
        edges = {("camera_link", "imu_frame"): T([0.0, 0.0, 0.02]),
                 ("camera_link", "infra1"): T([0.0, 0.05, 0.0]),
                 ("infra1", "infra1_optical"): T([0.0, 0.0, 0.0], optical)}
        T_imu_cam = tf_chain(edges, "imu_frame", "infra1_optical")
        # the optical point (0, 0, 1) (1 m ahead) is (1, 0.05, 0) in camera_link, (1, 0.05, -0.02) in the IMU's frame
        np.testing.assert_allclose(T_imu_cam @ [0, 0, 1, 1], [1.0, 0.05, -0.02, 1], atol=1e-12)
        assert tf_chain(edges, "imu_frame", "nowhere") is None
