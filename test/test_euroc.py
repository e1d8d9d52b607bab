"""EuRoC ASL folder reader: values checked against the raw files (cv2.imread, plain text parsing)."""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from vilib_ros.datasets import FrameError, Groundtruth, open_dataset, read_tum
from vilib_ros.datasets.asl import AslDataset


def _raw_csv_rows(path: Path) -> list[list[str]]:
    return [ln.strip().split(",") for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def make_asl(root: Path, frames: list[np.ndarray], t0: int = 1_000_000_000_000, cams: int = 1,
             imu_n: int = 50, gt: bool = True, calibration: bool = False) -> Path:
    """A tiny ASL folder written with plain file I/O (independent of the code under test);
    ``calibration``: with EuRoC's cam0/cam1 ``sensor.yaml`` values and an imu0 ``sensor.yaml``."""
    mav = root / "mav0"
    for c in range(cams):
        d = mav / f"cam{c}" / "data"
        d.mkdir(parents=True)
        lines = ["#timestamp [ns],filename"]
        for k, f in enumerate(frames):
            t = t0 + k * 50_000_000
            cv2.imwrite(str(d / f"{t}.png"), f if c == 0 else f[:, ::-1].copy())
            lines.append(f"{t},{t}.png")
        (mav / f"cam{c}" / "data.csv").write_text("\n".join(lines) + "\n")
    imu = mav / "imu0"
    imu.mkdir(parents=True)
    rows = ["#timestamp [ns],w_RS_S_x [rad s^-1],w_RS_S_y [rad s^-1],w_RS_S_z [rad s^-1],"
            "a_RS_S_x [m s^-2],a_RS_S_y [m s^-2],a_RS_S_z [m s^-2]"]
    for i in range(imu_n):
        rows.append(f"{t0 + i * 5_000_000},{0.01 * i},{-0.02 * i},{0.5},{9.8},{0.1 * i},{-1.5}")
    (imu / "data.csv").write_text("\n".join(rows) + "\n")
    if calibration:
        import json

        from vilib_ros.camera import euroc_cam0, euroc_cam1

        for c in range(cams):
            cam = euroc_cam0() if c == 0 else euroc_cam1()
            (mav / f"cam{c}" / "sensor.yaml").write_text(json.dumps(cam.to_euroc_dict()))    # JSON is YAML
        (imu / "sensor.yaml").write_text("gyroscope_noise_density: 1.6968e-04\ngyroscope_random_walk: 1.9393e-05\n"
                                         "accelerometer_noise_density: 2.0e-3\naccelerometer_random_walk: 3.0e-3\n")
    if gt:
        g = mav / "state_groundtruth_estimate0"
        g.mkdir()
        (g / "data.csv").write_text(
            "#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], q_RS_z [], "
            "v_RS_R_x [m s^-1], v_RS_R_y [m s^-1], v_RS_R_z [m s^-1], b_w_RS_S_x [rad s^-1], b_w_RS_S_y [rad s^-1], "
            "b_w_RS_S_z [rad s^-1], b_a_RS_S_x [m s^-2], b_a_RS_S_y [m s^-2], b_a_RS_S_z [m s^-2]\n"
            f"{t0},1,2,3,0.5,0.5,-0.5,0.5,0.1,0.2,0.3,0.01,0.02,0.03,-0.1,-0.2,-0.3\n"
            f"{t0 + 5_000_000},1.5,2,3,1,0,0,0,0,0,0,0,0,0,0,0,0\n")
    return root


@pytest.fixture(scope="module")
def real(euroc_path):
    return open_dataset(euroc_path)


class TestOpenAslReal:
    def test_images(self, real, euroc_path):
        assert isinstance(real, AslDataset)
        st = real.image_stamps(0)
        assert st.dtype == np.int64 and st.shape == (95,)
        assert np.all(np.diff(st) > 0)
        files = sorted((euroc_path / "mav0" / "cam0" / "data").glob("*.png"))
        assert [int(f.stem) for f in files] == st.tolist()
        for k in (0, 47, 94):
            img = real.load_image(0, k)
            assert img.dtype == np.uint8 and img.shape == (480, 752)
            np.testing.assert_array_equal(img, cv2.imread(str(files[k]), cv2.IMREAD_GRAYSCALE))

    def test_camera(self, real):
        assert len(real.cameras) == 1
        c = real.cameras[0]
        assert (c.width, c.height) == (752, 480)
        assert c.fx == pytest.approx(458.654) and c.fy == pytest.approx(457.296)
        assert c.cx == pytest.approx(367.215) and c.cy == pytest.approx(248.375)
        assert c.distortion_model == "radial-tangential"
        assert c.T_BS[0, 3] == pytest.approx(-0.0216401454975)

    def test_imu(self, real, euroc_path):
        rows = _raw_csv_rows(euroc_path / "mav0" / "imu0" / "data.csv")
        assert real.imu_stamps.shape == (len(rows),) and real.imu_data.shape == (len(rows), 6)
        assert np.all(np.diff(real.imu_stamps) > 0)
        assert np.median(np.diff(real.imu_stamps)) == pytest.approx(5_000_000, abs=2000)  # 200 Hz
        for i in (0, 1234, len(rows) - 1):
            assert real.imu_stamps[i] == int(rows[i][0])
            np.testing.assert_array_equal(real.imu_data[i], [float(x) for x in rows[i][1:7]])
        assert real.imu_noise["gyroscope_noise_density"] == pytest.approx(1.6968e-4)
        assert real.imu_noise["accelerometer_random_walk"] == pytest.approx(3.0e-3)

    def test_groundtruth_tum(self, real, euroc_path):
        gt = real.groundtruth
        assert gt is not None
        lines = [ln.split() for ln in (euroc_path / "V101_groundtruth_tum.txt").read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")]
        assert len(gt) == len(lines)
        # '1403715273.26214' -> exact integer nanoseconds
        assert gt.t_ns[0] == int(lines[0][0].replace(".", "")) * 10 ** (9 - len(lines[0][0].split(".")[1]))
        np.testing.assert_allclose(gt.p[0], [float(x) for x in lines[0][1:4]])
        np.testing.assert_allclose(gt.q_xyzw[0], [float(x) for x in lines[0][4:8]])
        np.testing.assert_allclose(np.linalg.norm(gt.q_xyzw, axis=1), 1.0, atol=1e-4)
        assert np.all(np.diff(gt.t_ns) > 0)


class TestIterEvents:
    def test_order_and_counts(self, real):
        evs = list(real.iter_events())
        imgs = [e for e in evs if e[0] == "image"]
        imus = [e for e in evs if e[0] == "imu"]
        assert len(imgs) == 95 and len(imus) == len(real.imu_stamps)
        t = [e[1] if e[0] == "imu" else e[2] for e in evs]
        assert all(a <= b for a, b in zip(t, t[1:]))
        assert [e[3] for e in imgs] == list(range(95))
        # The first image and the first IMU sample share a stamp: IMU first.
        assert real.imu_stamps[0] == real.image_stamps(0)[0]
        assert evs[0][0] == "imu" and evs[1][0] == "image"
        np.testing.assert_array_equal(np.concatenate([imus[5][2], imus[5][3]]), real.imu_data[5])


class TestSmallAsl:
    def test_stereo_and_groundtruth_csv(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:3], cams=2)
        ds = open_dataset(root)     # no sensor.yaml: the streams open, the calibration is refused (below)
        assert ds.num_cameras == 2
        np.testing.assert_array_equal(ds.load_image(1, 2), generated_frames[2][:, ::-1])
        gt = ds.groundtruth
        np.testing.assert_allclose(gt.q_xyzw[0], [0.5, -0.5, 0.5, 0.5])  # from w, x, y, z columns
        np.testing.assert_allclose(gt.v[0], [0.1, 0.2, 0.3])
        np.testing.assert_allclose(gt.bg[0], [0.01, 0.02, 0.03])
        np.testing.assert_allclose(gt.ba[0], [-0.1, -0.2, -0.3])
        np.testing.assert_allclose(gt.p[1], [1.5, 2, 3])

    def test_groundtruth_csv_write_read(self, tmp_path):
        rng = np.random.default_rng(0)
        q = rng.normal(size=(4, 4))
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        g = Groundtruth(np.array([1, 2, 3, 1403715273262142976]), rng.normal(size=(4, 3)), q,
                        rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 3)))
        path = tmp_path / "gt.csv"
        g.write_euroc_csv(path)
        first = path.read_text().splitlines()[0]
        assert first.startswith("#timestamp, p_RS_R_x [m],") and first.endswith("b_a_RS_S_z [m s^-2]")
        row = path.read_text().splitlines()[1].split(",")
        assert float(row[4]) == pytest.approx(q[0, 3])  # q_RS_w column
        tum = tmp_path / "gt.txt"
        g.write_tum(tum)
        back = read_tum(tum)
        np.testing.assert_array_equal(back.t_ns, g.t_ns)
        np.testing.assert_allclose(back.p, g.p, atol=1e-8)

    def test_mav0_path_accepted(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        assert len(open_dataset(root / "mav0").image_stamps(0)) == 2


class TestBadInput:
    def test_missing_folder(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="nope"):
            open_dataset(tmp_path / "nope")

    def test_not_a_dataset(self, tmp_path):
        (tmp_path / "x").mkdir()
        with pytest.raises(ValueError, match="not an EuRoC"):
            open_dataset(tmp_path / "x")

    def test_missing_cam_csv(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        (root / "mav0" / "cam0" / "data.csv").unlink()
        with pytest.raises(FileNotFoundError, match=r"cam0/data\.csv"):
            open_dataset(root)

    def test_missing_imu_csv(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        (root / "mav0" / "imu0" / "data.csv").unlink()
        with pytest.raises(FileNotFoundError, match=r"imu0/data\.csv"):
            open_dataset(root)

    def test_corrupt_image(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        bad = sorted((root / "mav0" / "cam0" / "data").glob("*.png"))[1]
        bad.write_bytes(b"\x89PNG garbage")
        ds = open_dataset(root)
        ds.load_image(0, 0)
        with pytest.raises(FrameError, match=bad.name) as err:
            ds.load_image(0, 1)
        assert err.value.reason == "corrupt"

    def test_missing_image(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        gone = sorted((root / "mav0" / "cam0" / "data").glob("*.png"))[0]
        gone.unlink()
        with pytest.raises(FrameError, match=gone.name) as err:
            open_dataset(root).load_image(0, 0)
        assert err.value.reason == "missing_file"

    def test_bad_csv_line(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2])
        p = root / "mav0" / "imu0" / "data.csv"
        p.write_text(p.read_text() + "12x,1,2,3,4,5,6\n")
        with pytest.raises(ValueError, match=r"imu0/data\.csv:\d+"):
            open_dataset(root)

    def test_non_monotonic_images_counted_skip(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:3])
        p = root / "mav0" / "cam0" / "data.csv"
        lines = p.read_text().splitlines()
        p.write_text("\n".join([lines[0], lines[2], lines[1], lines[3]]) + "\n")   # frame 1 listed after 2
        ds = open_dataset(root)
        assert ds.stats["images_non_monotonic_dropped"] == 1
        assert ds.image_stamps(0).tolist() == [int(lines[2].split(",")[0]), int(lines[3].split(",")[0])]
        assert any("line 3" in w for w in ds.warnings)
        np.testing.assert_array_equal(ds.load_image(0, 1), generated_frames[2])

    def test_non_monotonic_imu_counted_skip(self, tmp_path, generated_frames):
        root = make_asl(tmp_path / "seq", generated_frames[:2], imu_n=10)
        p = root / "mav0" / "imu0" / "data.csv"
        lines = p.read_text().splitlines()
        p.write_text("\n".join(lines[:6] + [lines[3]] + lines[6:]) + "\n")  # a repeated old sample
        ds = open_dataset(root)
        assert ds.stats["imu_non_monotonic_dropped"] == 1
        assert len(ds.imu_stamps) == 10 and np.all(np.diff(ds.imu_stamps) > 0)

    def test_camera_index(self, real):
        with pytest.raises(ValueError, match="camera index"):
            real.image_stamps(1)

    def test_wrong_image_size(self, tmp_path, generated_frames):
        """A frame of another size than the camera's first is a counted skip (size_mismatch)."""
        root = make_asl(tmp_path / "seq", generated_frames[:3])
        f = sorted((root / "mav0" / "cam0" / "data").glob("*.png"))[1]
        cv2.imwrite(str(f), generated_frames[1][:240, :376])
        ds = open_dataset(root)
        np.testing.assert_array_equal(ds.load_image(0, 0), generated_frames[0])
        with pytest.raises(FrameError, match="differs from the camera's other images") as err:
            ds.load_image(0, 1)
        assert err.value.reason == "size_mismatch"
        assert ds.image_size(0) == (752, 480)


class TestAslCalibration:
    """Guards: an ASL folder without ``cam0/sensor.yaml`` estimated with EuRoC's cam0 calibration (and
    without ``imu0/sensor.yaml`` with EuRoC's IMU noise), saying so only in a warning."""

    def test_missing_sensor_yaml_is_refused_naming_the_ways_to_give_it(self, tmp_path, generated_frames):
        from vilib_ros.calibration import CalibrationMissing

        root = make_asl(tmp_path / "seq", generated_frames[:3], cams=2)
        ds = open_dataset(root)
        with pytest.raises(CalibrationMissing) as err:
            ds.resolve_calibration()
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith(f"{root}: no calibration for mav0/cam0 (no mav0/cam0/sensor.yaml) and no calibration "
                              "for mav0/cam1 (no mav0/cam1/sensor.yaml) and no IMU noise for mav0/imu0 "
                              "(no mav0/imu0/sensor.yaml): give --calibration camchain-imucam.yaml"), msg
        assert "--imu-calibration imu.yaml (Kalibr)" in msg and "--mono" in msg
        with pytest.raises(CalibrationMissing):
            ds.cameras      # the dataset's own calibration: the same refusal

    def test_a_sensor_yaml_whose_resolution_does_not_fit_the_images(self, tmp_path, generated_frames):
        import json

        from vilib_ros.calibration import CalibrationError
        from vilib_ros.camera import euroc_cam0

        root = make_asl(tmp_path / "seq", [f[:240, :376].copy() for f in generated_frames[:2]])
        (root / "mav0" / "cam0" / "sensor.yaml").write_text(json.dumps(euroc_cam0().to_euroc_dict()))   # 752x480
        ds = open_dataset(root)
        with pytest.raises(CalibrationError, match=r"mav0/cam0 .* is 752x480, its images are 376x240"):
            ds.resolve_calibration()

    def test_sensor_yaml_values_and_sources(self, real, euroc_path):
        cal = real.resolve_calibration()
        assert cal.defaults == []
        rows = {what: (where, how) for what, where, how, _ in cal.sources}
        # the same file, wherever a link in the folder's path points (the sources name the resolved path)
        where, how = rows["cam0 intrinsics"]
        assert (Path(where).resolve(), how) == ((euroc_path / "mav0" / "cam0" / "sensor.yaml").resolve(),
                                                "EuRoC sensor.yaml")
        assert Path(rows["IMU noise"][0]).resolve() == (euroc_path / "mav0" / "imu0" / "sensor.yaml").resolve()
        assert cal.imu_noise["gyroscope_random_walk"] == pytest.approx(1.9393e-05)

    def test_imu_sensor_yaml_without_a_noise_key_is_refused(self, tmp_path, generated_frames):
        from vilib_ros.calibration import CalibrationError

        root = make_asl(tmp_path / "seq", generated_frames[:2])
        (root / "mav0" / "imu0" / "sensor.yaml").write_text(
            "gyroscope_noise_density: 1.0e-4\ngyroscope_random_walk: 1.0e-5\naccelerometer_noise_density: 2.0e-3\n")
        with pytest.raises(CalibrationError, match="missing accelerometer_random_walk"):
            open_dataset(root).found_calibration
