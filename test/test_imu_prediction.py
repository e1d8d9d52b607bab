"""Gyro integration and rotation-only feature prediction, against closed forms, SciPy, the
camera's own projection of far points, and the synthetic generator's ground-truth flow."""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros import synthetic as syn
from vilib_ros.camera import euroc_cam0
from vilib_ros.frontend.imu_prediction import (GyroPredictor, ImuGapError, camera_rotation, integrate_gyro, predict_points,
                                               so3_exp)

Rotation = pytest.importorskip("scipy.spatial.transform").Rotation


def _gyro(t0, t1, rate_hz, w_fn):
    t = np.arange(t0 - 3_000_000, t1 + 8_000_000, int(1e9 / rate_hz), dtype=np.int64)
    w = np.array([w_fn(ti * 1e-9) for ti in t])
    return np.column_stack([t.astype(np.float64), w])


class TestSo3Exp:
    def test_matches_scipy(self):
        rng = np.random.default_rng(0)
        for _ in range(20):
            v = rng.normal(size=3) * rng.uniform(0, 3)
            assert np.allclose(so3_exp(v), Rotation.from_rotvec(v).as_matrix(), atol=1e-12)
        assert np.allclose(so3_exp(np.zeros(3)), np.eye(3))


class TestIntegrateGyro:
    def test_constant_rate(self):
        w = np.array([0.3, -1.2, 2.0])
        t0, t1 = 1_000_000_000, 1_050_000_000
        g = _gyro(t0, t1, 200, lambda t: w)
        R = integrate_gyro(g, t0, t1)
        assert np.allclose(R, Rotation.from_rotvec(w * 0.05).as_matrix(), atol=1e-12)

    def test_time_varying_rate_about_fixed_axis(self):
        axis = np.array([1.0, 2.0, -0.5]) / np.linalg.norm([1.0, 2.0, -0.5])
        t0, t1 = 2_000_000_000, 2_050_000_000
        # w(t) = (a + b t) axis -> angle = a dt + b (t1^2 - t0^2) / 2 (linear: interpolation is exact)
        a, b = 1.0, 30.0
        g = _gyro(t0, t1, 200, lambda t: (a + b * (t - 2.0)) * axis)
        ang = a * 0.05 + b * ((0.05) ** 2) / 2
        R = integrate_gyro(g, t0, t1)
        assert np.allclose(R, Rotation.from_rotvec(ang * axis).as_matrix(), atol=1e-9)

    def test_gap_nan_and_empty_raise(self):
        t0, t1 = 1_000_000_000, 1_050_000_000
        g = _gyro(t0, t1, 200, lambda t: np.ones(3))
        with pytest.raises(ImuGapError, match="gap"):
            integrate_gyro(g[(g[:, 0] < t0 + 5e6) | (g[:, 0] > t1 - 2e6)], t0, t1, max_gap_ns=20_000_000)
        bad = g.copy()
        bad[4, 2] = np.nan
        with pytest.raises(ImuGapError, match="NaN"):
            integrate_gyro(bad, t0, t1)
        with pytest.raises(ImuGapError):
            integrate_gyro(np.zeros((0, 4)), t0, t1)
        with pytest.raises(ValueError):
            integrate_gyro(np.zeros((5, 3)), t0, t1)


def _integrate_reference(g, t0, t1):
    """integrate_gyro in NumPy arrays, one so3_exp and one 3x3 product per sub-interval in a Python
    loop: the reference of the plain-float version."""
    g = np.asarray(g, np.float64)
    t = g[:, 0]
    if np.any(np.diff(t) <= 0):
        g = g[np.argsort(t, kind="stable")]
        t = g[:, 0]
        keep = np.concatenate([[True], np.diff(t) > 0])
        g, t = g[keep], t[keep]
    inside = t[(t > t0) & (t < t1)]
    knots = np.concatenate([[float(t0)], inside, [float(t1)]])
    R = np.eye(3)
    for a, b in zip(knots[:-1], knots[1:]):
        if b > a:
            w = np.array([np.interp(0.5 * (a + b), t, g[:, i]) for i in (1, 2, 3)])
            R = R @ so3_exp(w * (b - a) * 1e-9)
    return R


class TestIntegrateGyroAgainstTheLoop:
    """integrate_gyro's plain-float quaternion chain (a loop of NumPy calls per sub-interval would cost
    the frontend node's process() more than the rest of its frame) must give the loop's rotation,
    wherever the samples lie."""

    T0, T1 = 1_500_000_000_000_000_000, 1_500_000_000_050_000_000      # stamps as the node's

    def _rates(self, t):
        s = (t - self.T0) * 1e-9
        return np.column_stack([np.sin(40 * s), 2 * np.cos(25 * s), -1.5 + 3 * s])

    @pytest.mark.parametrize("offsets_ms", [
        np.arange(-3, 58, 5),                  # 200 Hz, bracketing the interval (the node's case)
        np.arange(5, 51, 5),                   # the first sample after t0, the last on t1
        np.array([12.0, 31.0]),                # two samples inside: held constant beyond them
        np.array([20.0]),                      # one sample
        np.array([0.0, 50.0]),                 # none inside: on the two frame stamps
        np.arange(0, 50.5, 1.0),               # 1 kHz
    ])
    def test_matches_the_loop(self, offsets_ms):
        t = self.T0 + (np.asarray(offsets_ms) * 1e6).astype(np.int64)
        g = np.column_stack([t.astype(np.float64), self._rates(t)])
        assert np.allclose(integrate_gyro(g, self.T0, self.T1), _integrate_reference(g, self.T0, self.T1), atol=1e-12)

    def test_unsorted_and_repeated_stamps(self):
        t = self.T0 + (np.array([30, 5, 45, 5, 15, 55, 30, -5]) * 1e6).astype(np.int64)
        g = np.column_stack([t.astype(np.float64), self._rates(t) + np.arange(len(t))[:, None]])
        assert np.allclose(integrate_gyro(g, self.T0, self.T1), _integrate_reference(g, self.T0, self.T1), atol=1e-12)

    def test_empty_interval_is_identity(self):
        t = self.T0 + (np.arange(-3, 58, 5) * 1e6).astype(np.int64)
        g = np.column_stack([t.astype(np.float64), self._rates(t)])
        assert np.array_equal(integrate_gyro(g, self.T0, self.T0), np.eye(3))

    def test_large_rates(self):
        t = self.T0 + (np.arange(-3, 58, 5) * 1e6).astype(np.int64)
        g = np.column_stack([t.astype(np.float64), 30 * self._rates(t)])   # up to ~90 rad/s: large steps
        assert np.allclose(integrate_gyro(g, self.T0, self.T1), _integrate_reference(g, self.T0, self.T1), atol=1e-12)


class TestPredictPoints:
    def test_far_points_under_rotation(self):
        """Far points (1 km) seen by the distorted EuRoC cam0 before/after a body rotation:
        prediction = camera.project of the rotated points."""
        cam = euroc_cam0()
        rng = np.random.default_rng(1)
        X0 = np.column_stack([rng.uniform(-0.5, 0.5, 200), rng.uniform(-0.35, 0.35, 200), np.ones(200)]) * 1000.0
        uv0 = cam.project(X0)
        R_b = Rotation.from_rotvec([0.02, -0.05, 0.03]).as_matrix()
        R_c = camera_rotation(R_b, cam.T_BS)
        # independent: express the same world points in the rotated camera
        R_bs = cam.T_BS[:3, :3]
        X1 = (R_bs.T @ R_b.T @ R_bs @ X0.T).T
        uv1 = cam.project(X1)
        pred = predict_points(cam, R_c, uv0)
        ok = (uv1[:, 0] > 0) & (uv1[:, 0] < 751) & (uv1[:, 1] > 0) & (uv1[:, 1] < 479)
        assert np.max(np.linalg.norm(pred[ok] - uv1[ok], axis=1)) < 1e-2

    def test_identity_and_empty(self):
        cam = euroc_cam0()
        uv = np.array([[100.0, 200.0], [400.0, 300.0]])
        assert np.allclose(predict_points(cam, np.eye(3), uv), uv, atol=1e-4)
        assert predict_points(cam, np.eye(3), np.zeros((0, 2))).shape == (0, 2)



class TestGyroPredictor:
    """GyroPredictor is what FeatureTracker uses for its IMU prediction: a real rotation, not only zero."""

    def test_rotation_and_prediction_of_far_points(self):
        cam = euroc_cam0()
        w = np.array([0.8, -1.5, 0.6])
        t0, t1 = 1_000_000_000, 1_050_000_000
        g = _gyro(t0, t1, 200, lambda t: w)
        p = GyroPredictor(cam)
        R_b = Rotation.from_rotvec(w * 0.05).as_matrix()
        R_bs = cam.T_BS[:3, :3]
        assert np.allclose(p.rotation(g, t0, t1), R_bs.T @ R_b @ R_bs, atol=1e-9)
        rng = np.random.default_rng(3)
        X0 = np.column_stack([rng.uniform(-0.5, 0.5, 300), rng.uniform(-0.35, 0.35, 300), np.ones(300)]) * 1000.0
        uv0 = cam.project(X0)
        uv1 = cam.project((R_bs.T @ R_b.T @ R_bs @ X0.T).T)
        pred = p.predict(g, t0, t1, uv0)
        ok = (uv1[:, 0] > 0) & (uv1[:, 0] < 751) & (uv1[:, 1] > 0) & (uv1[:, 1] < 479)
        assert ok.sum() > 100
        assert np.max(np.linalg.norm(pred[ok] - uv1[ok], axis=1)) < 1e-2
        assert np.median(np.linalg.norm(uv1[ok] - uv0[ok], axis=1)) > 10     # a rotation that matters

    def test_gap_and_max_gap(self):
        cam = euroc_cam0()
        t0, t1 = 1_000_000_000, 1_050_000_000
        g = _gyro(t0, t1, 200, lambda t: np.ones(3))
        sparse = g[::6]                                       # 30 ms between samples
        with pytest.raises(ImuGapError, match="gap"):
            GyroPredictor(cam, max_gap_ns=20_000_000).rotation(sparse, t0, t1)
        GyroPredictor(cam, max_gap_ns=40_000_000).rotation(sparse, t0, t1)


def _run_frontend(seq, imgs, use_imu):
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    t_imu, imu, _, _ = seq.imu()
    st = seq.frame_stamps_ns
    ft = FeatureTracker(seq.camera(0), FrontendConfig(imu_prediction=use_imu), device="cpu")
    kept, errs, prev = [], [], None
    for k, img in enumerate(imgs):
        m = (t_imu >= st[k - 1] - 10_000_000) & (t_imu <= st[k] + 10_000_000) if k else np.zeros(len(t_imu), bool)
        fr = ft.process(img, int(st[k]), gyro=np.column_stack([t_imu[m], imu[m, :3]]))
        if prev is not None:
            common, i0, i1 = np.intersect1d(prev.ids, fr.ids, return_indices=True)
            gt, vis = seq.gt_flow(k - 1, k, prev.uv[i0])
            errs.append(np.linalg.norm(fr.uv[i1] - gt, axis=1)[vis])
            kept.append(len(common) / max(1, len(prev)))
        prev = fr
    e = np.concatenate(errs)
    return {"kept": float(np.mean(kept)), "iterations": ft.stats["iterations_total"] / ft.stats["tracked_total"],
            "median_err": float(np.median(e)), "gross": float(np.mean(e > 1.0)), "stats": dict(ft.stats)}


class TestFastRotationPreset:
    """IMU-aided prediction on the fast-rotation synthetic preset (3 rad/s RMS): more tracks kept
    frame to frame and fewer LK iterations than starting from the old positions."""

    @pytest.mark.slow
    def test_prediction_keeps_more_tracks_fewer_iterations(self):
        seq = syn.SyntheticSequence(syn.SequenceConfig(duration_s=0.6, stereo=False, seed=2, preset="fast_rotation"))
        imgs = [seq.render(k)[0] for k in range(10)]
        off = _run_frontend(seq, imgs, False)
        on = _run_frontend(seq, imgs, True)
        for name, r in (("no prediction", off), ("IMU prediction", on)):
            print(f"\nfast_rotation {name}: tracks kept per frame {r['kept']:.1%}, mean LK iterations "
                  f"{r['iterations']:.1f}, median error of kept tracks {r['median_err']:.3f} px, "
                  f"> 1 px {r['gross']:.1%}")
        assert on["stats"]["imu_predicted"] == len(imgs) - 1
        assert on["kept"] > off["kept"] + 0.15
        assert on["iterations"] < off["iterations"]
        assert on["gross"] < off["gross"]
