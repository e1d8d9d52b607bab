"""The generator's imaging conditions (lens distortion rendered through the lens, motion blur, shot and
read noise, auto-exposure steps, vignetting, camera rates, blank frames), each against an independent
reference: the camera model's projection of known 3D points, the true image motion over the exposure
from the poses, the noise model's variance, the falloff formula, the frame period, and the pinhole
renderer for the ray renderer."""
from __future__ import annotations

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from vilib_ros.camera import euroc_cam0, euroc_cam1  # noqa: E402
from vilib_ros.synthetic import SequenceConfig, SyntheticSequence, generate_sequence  # noqa: E402
from vilib_ros.synthetic.scene import Quad, RayGrid, Scene  # noqa: E402


def facing_quad(seq, k, distance, width_m, height_m, texture, cam=0):
    """A quad ``distance`` m in front of camera ``cam`` at frame k, parallel to its image plane, centred
    on the optical axis and facing it; texture row b / column a at t = (b + .5) / H, s = (a + .5) / W
    with s along the camera's x axis and t along its y axis."""
    T = seq.pose_wc(k, cam)
    R, c = T[:3, :3], T[:3, 3]
    U, V = R[:, 0] * width_m, R[:, 1] * height_m
    centre = c + distance * R[:, 2]
    # U x V points away from the camera: flip V's sign via the origin so that the face looks back at it
    q = Quad(centre - U / 2 + V / 2, U, -V, np.ascontiguousarray(texture[::-1]), "target")
    assert q.normal @ (c - q.origin) > 0
    return q


def with_scene(seq, quads):
    seq.scene = Scene(quads, (10.0, 10.0, 10.0), [])
    return seq


def uniform(seq, k, value):
    """One flat grey quad filling the view of frame k."""
    return with_scene(seq, [facing_quad(seq, k, 2.0, 12.0, 10.0, np.full((64, 64), value, np.uint8))])


# ----------------------------------------------------------------------------- lens


class TestLens:
    def test_ray_renderer_matches_pinhole_renderer(self):
        """The ray renderer given a pinhole camera's rays renders what the pinhole renderer (plane-induced
        homography, cv2.warpPerspective) renders: the same texture sampling reached another way."""
        seq = SyntheticSequence(SequenceConfig(duration_s=2.0, image_noise_sigma=0.0, seed=1))
        c = seq.camera(0)
        rays = RayGrid.of_camera(c)
        for k in (0, 17, 33):
            T = seq.pose_wc(k)
            a, za = seq.scene.render(c.K, T[:3, :3], T[:3, 3], c.width, c.height)
            b, zb = seq.scene.render_rays(rays, T[:3, :3], T[:3, 3])
            assert np.mean(np.abs(a - b)) < 0.01 and np.max(np.abs(a - b)) <= 2.0
            np.testing.assert_array_equal(np.isfinite(za), np.isfinite(zb))
            fin = np.isfinite(za)
            np.testing.assert_allclose(zb[fin], za[fin], rtol=1e-5)

    def test_rendered_corners_land_where_the_camera_model_projects_them(self):
        """A checkerboard 2 m in front of cam0 with EuRoC's lens: every board corner found in the rendered
        image (cv2.cornerSubPix, started 1.5 px off) lies within a fraction of a pixel of CameraModel.project
        of its 3D point, over the whole image; the pinhole projection misses the outer corners by pixels
        (the distortion is in the image, not only in the yaml)."""
        seq = SyntheticSequence(SequenceConfig(duration_s=1.0, image_noise_sigma=0.0, lens="euroc", seed=2))
        cam = seq.camera(0)
        assert cam.distortion_model == "radial-tangential"
        np.testing.assert_array_equal(cam.distortion, euroc_cam0().distortion)
        sq, nx, ny = 50, 20, 14                               # texels per square, squares: 5 m x 3.5 m
        a, b = np.meshgrid(np.arange(nx * sq), np.arange(ny * sq))
        board = np.where((a // sq + b // sq) % 2 == 0, 40, 210).astype(np.uint8)
        q = facing_quad(seq, 0, 2.0, 5.0, 3.5, board)
        with_scene(seq, [q])
        img, depth = seq.render(0, 0)
        i, j = np.meshgrid(np.arange(1, nx), np.arange(1, ny))
        s, t = i.ravel() * sq / (nx * sq), j.ravel() * sq / (ny * sq)
        # texture row b is at t = (b + .5) / H of the quad whose V runs the other way (facing_quad flips it)
        X = q.origin + s[:, None] * q.U + (1 - t)[:, None] * q.V
        T = seq.pose_wc(0)
        Xc = (X - T[:3, 3]) @ T[:3, :3]
        uv = cam.project(Xc)
        inside = (uv[:, 0] > 12) & (uv[:, 0] < cam.width - 13) & (uv[:, 1] > 12) & (uv[:, 1] < cam.height - 13)
        assert inside.sum() > 150
        uv = uv[inside]
        start = (uv + [1.5, -1.2]).astype(np.float32).reshape(-1, 1, 2)
        found = cv2.cornerSubPix(img, start, (5, 5), (-1, -1),
                                 (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 100, 1e-4)).reshape(-1, 2)
        err = np.linalg.norm(found - uv, axis=1)
        print(f"\n[lens corners] {len(err)} corners: median {np.median(err):.3f} px, max {err.max():.3f} px")
        # cornerSubPix on the same board rendered without a lens: ~0.06 px median; the image's far corners,
        # where the lens shrinks a square to half its size, are the hardest
        assert np.median(err) < 0.1 and np.percentile(err, 95) < 0.2 and err.max() < 0.35
        assert np.linalg.norm((found - uv).mean(0)) < 0.03            # no bias (a half-pixel convention error)
        K = cam.K
        pin = (Xc[inside] / Xc[inside, 2:]) @ K.T
        assert np.max(np.linalg.norm(pin[:, :2] - uv, axis=1)) > 20
        # the depth at a corner is the camera depth of its 3D point
        r = np.rint(uv[:5]).astype(int)
        np.testing.assert_allclose(depth[r[:, 1], r[:, 0]], Xc[inside][:5, 2], rtol=0.01)

    def test_gt_flow_and_depth_through_the_lens(self):
        """gt_flow and depth_at use the lens: a point's flow to the same frame is the point itself, and the
        stereo flow lands where cam1's model projects the surface point."""
        seq = SyntheticSequence(SequenceConfig(duration_s=1.0, image_noise_sigma=0.0, lens="euroc", seed=2))
        uv = np.array([[30.0, 25.0], [376.0, 240.0], [700.0, 450.0]])
        same, vis = seq.gt_flow(3, 3, uv)
        np.testing.assert_allclose(same[vis], uv[vis], atol=1e-6)
        z = seq.depth_at(3, uv)
        T0 = seq.pose_wc(3, 0)
        X = T0[:3, 3] + z[:, None] * (np.column_stack([seq.camera(0).undistort(uv), np.ones(3)]) @ T0[:3, :3].T)
        T1 = seq.pose_wc(3, 1)
        right, vis1 = seq.gt_flow(3, 3, uv, cam=0, cam_to=1)
        want = seq.camera(1).project((X - T1[:3, 3]) @ T1[:3, :3])
        np.testing.assert_allclose(right[vis1], want[vis1], atol=1e-6)
        np.testing.assert_array_equal(seq.camera(1).distortion, euroc_cam1().distortion)

    def test_sensor_yaml_carries_the_lens(self, tmp_path):
        from vilib_ros.camera import CameraModel
        from vilib_ros.datasets import open_dataset

        cfg = SequenceConfig(duration_s=0.1, lens="euroc", seed=3, blank_intervals_s=((0.04, 0.06),))
        out = generate_sequence(tmp_path / "s", cfg, progress=False, workers=1)
        for c, ref in ((0, euroc_cam0()), (1, euroc_cam1())):
            cam = CameraModel.from_euroc_yaml(out / "mav0" / f"cam{c}" / "sensor.yaml")
            assert cam.distortion_model == "radial-tangential"
            np.testing.assert_array_equal(cam.distortion, ref.distortion)
        ds = open_dataset(out)
        assert ds.cameras[0].distortion_model == "radial-tangential"
        assert len(ds.image_stamps(0)) == 3
        assert ds.load_image(0, 1).max() <= 8            # the blank frame
        import yaml

        saved = yaml.safe_load((out / "synthetic.yaml").read_text())
        assert saved["lens"] == "euroc" and saved["blank_intervals_s"] == [[0.04, 0.06]]
        assert SequenceConfig(**{**saved, "room_size": tuple(saved["room_size"])}) == cfg


# ----------------------------------------------------------------------------- motion blur


class TestMotionBlur:
    @pytest.mark.parametrize("lens", ["pinhole", "euroc"])
    def test_blur_length_is_the_image_motion_over_the_exposure(self, lens):
        """A white dot on a black plane, rendered with a 10 ms exposure while the camera turns fast: the
        smear's length along its main axis (from its second moments, less the sharp dot's) is the distance
        between the dot's projections at the exposure's start and end (the true poses through the camera
        model), its direction that of the motion, and its centre the projection at the stamp."""
        e = 0.010
        seq = SyntheticSequence(SequenceConfig(duration_s=3.0, preset="fast_rotation", image_noise_sigma=0.0,
                                               exposure_s=e, lens=lens, seed=4))
        cam = seq.camera(0)
        # the frame with the fastest turn
        t = seq._t(seq.frame_stamps_ns)
        w = np.linalg.norm(seq.trajectory.sample(t).w_body, axis=1)
        k = int(np.argmax(w[2:-2])) + 2
        a, b = np.meshgrid(np.arange(1200), np.arange(1000))
        dot = np.where((a - 600) ** 2 + (b - 500) ** 2 <= 3 ** 2, 255, 0).astype(np.uint8)
        q = facing_quad(seq, k, 1.5, 6.0, 5.0, dot)
        with_scene(seq, [q])
        X = q.origin + 600.5 / 1200 * q.U + (1 - 500.5 / 1000) * q.V
        t_ns = int(seq.frame_stamps_ns[k])

        def project_at(dt_s):
            T = seq.pose_wb(t_ns + int(round(dt_s * 1e9))) @ cam.T_BS
            return cam.project((X - T[:3, 3]) @ T[:3, :3])[0]

        start, mid, end = project_at(-e / 2), project_at(0.0), project_at(e / 2)
        L = np.linalg.norm(end - start)
        assert L > 8.0                                     # a real smear

        def moments(img):
            v, u = np.nonzero(img > 0)
            wgt = img[v, u].astype(float)
            m = np.array([np.average(u, weights=wgt), np.average(v, weights=wgt)])
            d = np.column_stack([u, v]) - m
            return m, (d * wgt[:, None]).T @ d / wgt.sum()

        blurred, _ = seq.render(k, 0)
        m, C = moments(blurred)
        sharp_seq = SyntheticSequence(SequenceConfig(duration_s=3.0, preset="fast_rotation", image_noise_sigma=0.0,
                                                     lens=lens, seed=4))
        with_scene(sharp_seq, [q])
        _, C0 = moments(sharp_seq.render(k, 0)[0])
        evals, evecs = np.linalg.eigh(C)
        axis = evecs[:, -1]
        n = len(seq.exposure_offsets_ns(k, 0))
        assert n >= 2 * L / 1.0 - 1                       # sub-frames at most blur_step_px (0.5) apart
        var = axis @ C @ axis - axis @ C0 @ axis
        L_meas = np.sqrt(12 * var * n * n / (n * n - 1))
        print(f"\n[blur {lens}] motion {L:.2f} px over {e * 1e3:.0f} ms, smear {L_meas:.2f} px, {n} sub-frames")
        assert L_meas == pytest.approx(L, rel=0.05)
        motion_dir = (end - start) / L
        assert abs(axis @ motion_dir) > np.cos(np.radians(3))
        assert np.linalg.norm(m - mid) < 0.3

    def test_exposure_validation(self):
        with pytest.raises(ValueError, match="exposure_s"):
            SequenceConfig(exposure_s=0.06)               # longer than the 50 ms frame period
        with pytest.raises(ValueError, match="exposure_s"):
            SequenceConfig(exposure_s=-0.001)


# ----------------------------------------------------------------------------- sensor


class TestSensor:
    def test_shot_and_read_noise(self):
        """A flat grey view with shot noise (10 electrons per grey level) and 2 grey levels of read noise:
        the mean is the grey value, the variance that of Poisson(I e) / e plus the read noise plus the
        rounding (I / e + sigma^2 + 1 / 12), so it grows with the intensity; renders are deterministic."""
        e, sigma = 10.0, 2.0
        for value in (40, 160):
            seq = uniform(SyntheticSequence(SequenceConfig(duration_s=1.0, shot_noise_e_per_grey=e,
                                                           image_noise_sigma=sigma, seed=6)), 4, value)
            img, _ = seq.render(4, 0)
            assert img.dtype == np.uint8
            np.testing.assert_array_equal(img, seq.render(4, 0)[0])
            x = img[40:440, 40:712].astype(float)
            assert x.mean() == pytest.approx(value, abs=0.05)
            assert x.var() == pytest.approx(value / e + sigma ** 2 + 1 / 12, rel=0.04)
            assert (seq.render(5, 0)[0] != img).mean() > 0.5       # a new draw per frame

    def test_noise_is_clipped_to_8_bits(self):
        seq = uniform(SyntheticSequence(SequenceConfig(duration_s=1.0, shot_noise_e_per_grey=2.0,
                                                       image_noise_sigma=3.0, seed=6)), 2, 253)
        img, _ = seq.render(2, 0)
        assert img.max() == 255 and (img == 255).mean() > 0.2

    def test_vignetting_profile(self):
        """A flat grey view (200) with vignetting 0.3: every pixel is 200 (1 - 0.3 (r / r_corner)^2), r from
        the principal point, r_corner that of the farthest corner (the formula evaluated here)."""
        seq = uniform(SyntheticSequence(SequenceConfig(duration_s=1.0, image_noise_sigma=0.0, vignetting=0.3,
                                                       seed=6)), 1, 200)
        img, _ = seq.render(1, 0)
        c = seq.camera(0)
        v, u = np.mgrid[0:c.height, 0:c.width]
        r2 = (u - c.cx) ** 2 + (v - c.cy) ** 2
        rc2 = max((x - c.cx) ** 2 + (y - c.cy) ** 2 for x in (0, c.width - 1) for y in (0, c.height - 1))
        want = 200 * (1 - 0.3 * r2 / rc2)
        assert np.max(np.abs(img - want)) <= 0.51
        assert img[int(round(c.cy)), int(round(c.cx))] == 200 and min(img[0, 0], img[-1, -1]) < 150

    def test_exposure_steps(self):
        """Auto-exposure steps: the gain is constant between steps, steps come about every exposure_steps_s
        on average, each changes the gain by 10-30 % (less only where [0.6, 1.6] clips it), and a flat
        grey view's brightness follows the gain."""
        seq = SyntheticSequence(SequenceConfig(duration_s=60.0, image_noise_sigma=0.0, exposure_steps_s=3.0,
                                               seed=8))
        g = np.array([seq.exposure_gain(k) for k in range(seq.num_frames)])
        assert g[0] == 1.0 and g.min() >= 0.6 and g.max() <= 1.6
        steps = np.flatnonzero(np.diff(g) != 0)
        assert 10 <= len(steps) <= 35                       # 20 expected over 60 s (Poisson)
        ratio = g[steps + 1] / g[steps]
        step = np.maximum(ratio, 1 / ratio)
        unclipped = (g[steps + 1] > 0.6) & (g[steps + 1] < 1.6)
        assert np.all(step[unclipped] >= 1.1 - 1e-9) and np.all(step <= 1.3 + 1e-9)
        k = int(steps[0]) + 1
        uniform(seq, k - 1, 100)
        before, _ = seq.render(k - 1, 0)
        uniform(seq, k, 100)
        after, _ = seq.render(k, 0)
        assert before.mean() == pytest.approx(100 * g[k - 1], abs=0.5)
        assert after.mean() == pytest.approx(100 * g[k], abs=0.5)
        assert SyntheticSequence(SequenceConfig(duration_s=1.0)).photometric(3) == (1.0, 0.0)


# ----------------------------------------------------------------------------- timing


class TestRatesAndBlanks:
    @pytest.mark.parametrize("rate_hz,period_ms", [(20.0, 50), (10.0, 100), (20.0 / 3.0, 150)])
    def test_frame_stamps_at_each_rate(self, rate_hz, period_ms):
        """Frames every 50, 100, 150 ms (20, 10, 6.7 Hz) on the IMU's 200 Hz clock, which stays at 5 ms."""
        seq = SyntheticSequence(SequenceConfig(duration_s=3.0, rate_hz=rate_hz))
        np.testing.assert_array_equal(np.diff(seq.frame_stamps_ns), period_ms * 1_000_000)
        assert seq.num_frames == 3000 // period_ms + 1
        imu = seq.imu_stamps_ns
        np.testing.assert_array_equal(np.diff(imu), 5_000_000)
        assert np.isin(seq.frame_stamps_ns, imu).all()

    @pytest.mark.parametrize("rate_hz,period_ms", [(10.0, 100), (20.0 / 3.0, 150)])
    def test_recorded_motion_frame_rates(self, euroc_path, rate_hz, period_ms):
        """The EuRoC V1_01 trajectory at 10 and 6.7 Hz: frames every 100 / 150 ms of the recording, the real
        IMU at its 200 Hz."""
        d = euroc_path
        if not (d / "V101_groundtruth_tum.txt").is_file():
            pytest.skip(f"real EuRoC V1_01 ground truth not found in {d}")
        seq = SyntheticSequence(SequenceConfig(duration_s=6.0, rate_hz=rate_hz, recorded_imu=str(d / "mav0" / "imu0"),
                                               recorded_groundtruth=str(d / "V101_groundtruth_tum.txt")))
        np.testing.assert_allclose(np.diff(seq.frame_stamps_ns) * 1e-6, period_ms, atol=0.1)
        assert np.median(np.diff(seq.imu()[0])) == pytest.approx(5_000_000, rel=0.01)

    def test_rate_as_a_fraction_on_the_command_line(self, tmp_path, capsys):
        from vilib_ros.cli import main
        from vilib_ros.datasets import open_dataset

        out = tmp_path / "r"
        assert main(["generate", str(out), "--duration", "0.3", "--mono", "--rate", "20/3", "--quiet",
                     "--workers", "1"]) == 0
        np.testing.assert_array_equal(np.diff(open_dataset(out).image_stamps(0)), 150_000_000)
        assert main(["generate", str(tmp_path / "bad"), "--duration", "0.3", "--rate", "6.7"]) == 2
        err = capsys.readouterr().err
        assert "error:" in err and "20/3" in err and "Traceback" not in err

    def test_blank_frames(self):
        """Frames inside blank_intervals_s are black (only the read noise), with no depth and no tracks;
        the frames around them are not."""
        from vilib_ros.synthetic.tracks import synthetic_track_frames

        seq = SyntheticSequence(SequenceConfig(duration_s=2.0, blank_intervals_s=((0.5, 1.0),), seed=3))
        blank = [seq.is_blank(k) for k in range(seq.num_frames)]
        assert blank.count(True) == 10 and blank[10] and not blank[9] and not blank[20]
        img, depth = seq.render(12, 1)
        assert img.max() <= 6 and not depth.any()
        assert seq.render(9, 0)[0].std() > 20
        frames = synthetic_track_frames(seq, pixel_sigma=0.0, outlier_fraction=0.0)
        n = [len(f.ids) for f in frames]
        assert all(n[k] == 0 for k in range(10, 20)) and n[9] > 50 and n[25] > 50


class TestCommandLine:
    def test_condition_and_overrides(self, tmp_path):
        """``--condition blur`` sets the degraded options, an explicit option overrides one of them, and the
        files say so (synthetic.yaml, sensor.yaml's lens)."""
        import yaml

        from vilib_ros.cli import main

        out = tmp_path / "b"
        assert main(["generate", str(out), "--duration", "0.1", "--mono", "--quiet", "--workers", "1",
                     "--condition", "blur", "--exposure-ms", "20", "--blank", "0.05:0.1"]) == 0
        saved = yaml.safe_load((out / "synthetic.yaml").read_text())
        assert saved["lens"] == "euroc" and saved["exposure_s"] == pytest.approx(0.020)
        assert saved["shot_noise_e_per_grey"] == 10.0 and saved["image_noise_sigma"] == 2.0
        assert saved["vignetting"] == 0.3 and saved["exposure_steps_s"] == 4.0
        assert saved["blank_intervals_s"] == [[0.05, 0.1]]
        assert "radial-tangential" in (out / "mav0" / "cam0" / "sensor.yaml").read_text()
        with pytest.raises(SystemExit) as exc:           # argparse's own one-line usage error
            main(["generate", str(tmp_path / "x"), "--blank", "3"])
        assert exc.value.code == 2


class TestAccuracyConditions:
    def test_conditions_table_rows(self, tmp_path):
        """``python -m bench accuracy --conditions``: one row per sequence and condition with the keys the
        table promises, the CPU frontend's ATE filled (against the generated ground truth), cuVSLAM's
        skipped with the reason where dim_odom is missing; an unknown condition is one line, exit 2."""
        import json
        import subprocess
        import sys
        from pathlib import Path

        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        pytest.importorskip("evo", reason="evo (backend extra) not installed")
        repo = Path(__file__).resolve().parents[1]
        bad = subprocess.run([sys.executable, "-m", "bench", "accuracy", "--conditions", "fog"], cwd=repo,
                             capture_output=True, text=True, timeout=120)
        assert bad.returncode == 2 and "unknown condition" in bad.stderr and "Traceback" not in bad.stderr
        r = subprocess.run([sys.executable, "-m", "bench", "accuracy", "--conditions", "clean,distort",
                            "--sequences", "synthetic60", "--duration", "3", "--device", "cpu", "--no-peer",
                            "--workers", "1", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "out")],
                           cwd=repo, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-2000:]
        res = json.loads((tmp_path / "out" / "accuracy_conditions.json").read_text())
        assert [row["name"] for row in res["rows"]] == ["synthetic60/clean", "synthetic60/distort"]
        for row in res["rows"]:
            assert {"name", "ours_stereo_ate_m", "ours_stereo_cpu_ate_m", "ours_mono_ate_m", "cuvslam_stereo_ate_m",
                    "vio_fps", "resets"} <= set(row)
            assert row["frontend"] == "cpu" and row["ours_stereo_ate_m"] == row["ours_stereo_cpu_ate_m"]
            assert 0 < row["ours_stereo_ate_m"] < 0.05 and row["ours_mono_ate_m"] is not None
        assert (tmp_path / "out" / "accuracy_conditions.md").read_text().count("| synthetic60 |") == 2
