"""The backend's compiled per-frame helpers against NumPy references written here: the IMU pieces
and the mid-step rotation, the longest IMU gap, the batch checks, and the rotation-compensated
parallax of the keyframe decision. They run on every frame; the estimator's output depends on them
bit for bit, so the references are compared value for value.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from vilib_ros.backend.imu import ImuBuffer, _max_gap, _mid_step_acc, _pieces, batch_ok, gaps_over, propagate_imu
from vilib_ros.backend.keyframes import parallax_px


def _stream(rng, n=400, rate=200.0, jitter=True):
    dt = np.full(n, int(1e9 / rate), np.int64)
    if jitter:
        dt += rng.integers(-200_000, 200_000, n)
    t = 1_500_000_000_000_000_000 + np.cumsum(dt)
    d = np.column_stack([rng.normal(0, 0.5, (n, 3)), rng.normal([0, 0, 9.81], 2.0, (n, 3))])
    return t.astype(np.int64), d


def _pieces_reference(t, d, t_a, t_b):
    """ImuBuffer.pieces in plain NumPy: the compiled version's reference."""
    def at(x):
        i = int(np.searchsorted(t, x, side="left"))
        if i <= 0:
            return d[0]
        if i >= len(t):
            return d[-1]
        t0, t1 = int(t[i - 1]), int(t[i])
        a = (x - t0) / (t1 - t0)
        return (1 - a) * d[i - 1] + a * d[i]
    i0 = int(np.searchsorted(t, t_a, side="right"))
    i1 = int(np.searchsorted(t, t_b, side="left"))
    kt = np.empty(i1 - i0 + 2, np.int64)
    kt[0], kt[1:-1], kt[-1] = t_a, t[i0:i1], t_b
    kd = np.empty((i1 - i0 + 2, 6))
    kd[0], kd[1:-1], kd[-1] = at(t_a), d[i0:i1], at(t_b)
    dt = np.diff(kt) * 1e-9
    m = 0.5 * (kd[:-1] + kd[1:])
    keep = dt > 0
    return m[keep], dt[keep]


class TestPieces:
    def test_bit_identical_to_numpy(self):
        rng = np.random.default_rng(0)
        t, d = _stream(rng)
        for _ in range(300):
            a = int(rng.integers(t[0] - 20_000_000, t[-1]))
            b = a + int(rng.integers(1, 80_000_000))
            for x, y in zip(_pieces(t, d, a, b), _pieces_reference(t, d, a, b)):
                assert x.shape == y.shape and np.array_equal(x, y)

    def test_knots_on_samples_leave_no_empty_piece(self):
        """A window starting and ending on sample stamps: no zero-length piece (dt > 0 everywhere)."""
        t, d = _stream(np.random.default_rng(1), jitter=False)
        m, dt = _pieces(t, d, int(t[10]), int(t[20]))
        assert len(dt) == 10 and (dt > 0).all()
        assert np.isclose(dt.sum(), (t[20] - t[10]) * 1e-9)

    def test_buffer_uses_it(self):
        t, d = _stream(np.random.default_rng(2))
        buf = ImuBuffer(capacity=16)
        buf.extend(t, d)
        for x, y in zip(buf.pieces(int(t[5]) + 1, int(t[50]) - 1), _pieces_reference(t, d, int(t[5]) + 1,
                                                                                      int(t[50]) - 1)):
            assert np.array_equal(x, y)
        m, dt = buf.pieces(10, 5)
        assert m.shape == (0, 6) and dt.shape == (0,)


class TestMidStepAcc:
    def test_bit_identical_to_numpy(self):
        rng = np.random.default_rng(3)
        m = rng.normal(0, 3, (40, 6))
        dt = rng.uniform(0.001, 0.01, 40)
        bg = rng.normal(0, 0.01, 3)
        w = np.ascontiguousarray(m[:, :3])
        f = m[:, 3:]
        th = (w - bg) * (0.5 * dt)[:, None]
        ref = np.empty_like(f)
        ref[:, 0] = f[:, 0] + (th[:, 1] * f[:, 2] - th[:, 2] * f[:, 1])
        ref[:, 1] = f[:, 1] + (th[:, 2] * f[:, 0] - th[:, 0] * f[:, 2])
        ref[:, 2] = f[:, 2] + (th[:, 0] * f[:, 1] - th[:, 1] * f[:, 0])
        a, w2 = _mid_step_acc(m, dt, bg)
        assert np.array_equal(a, ref) and np.array_equal(w2, w)


class TestMaxGap:
    def test_against_numpy(self):
        def ref(t, t_a, t_b):
            if not len(t):
                return t_b - t_a
            i0 = max(int(np.searchsorted(t, t_a, side="right")) - 1, 0)
            i1 = int(np.searchsorted(t, t_b, side="left"))
            knots = t[i0:i1 + 1]
            gap = int(np.max(np.diff(knots))) if len(knots) > 1 else 0
            if t_a < t[0]:
                gap = max(gap, int(t[0]) - int(t_a))
            if t_b > t[-1]:
                gap = max(gap, int(t_b) - int(t[-1]))
            return gap
        rng = np.random.default_rng(4)
        t, _ = _stream(rng, n=100)
        t[40:] += 300_000_000                    # a hole
        for _ in range(300):
            a = int(rng.integers(t[0] - 50_000_000, t[-1] + 50_000_000))
            b = a + int(rng.integers(0, 500_000_000))
            assert _max_gap(t, a, b) == ref(t, a, b)
        assert _max_gap(np.zeros(0, np.int64), 5, 12) == 7


class TestBatchChecks:
    def test_accepts_a_good_batch_and_rejects_each_fault(self):
        t, d = _stream(np.random.default_rng(5), n=20)
        assert batch_ok(t, d, -1, 35.0, 160.0) and batch_ok(t, d, int(t[0]) - 1, 35.0, 160.0)
        assert not batch_ok(t, d, int(t[0]), 35.0, 160.0)            # not after the last sample
        for bad in (np.nan, np.inf, 36.0):
            d2 = d.copy()
            d2[7, 1] = bad
            assert not batch_ok(t, d2, -1, 35.0, 160.0)
        d2 = d.copy()
        d2[3, 5] = -161.0
        assert not batch_ok(t, d2, -1, 35.0, 160.0)
        t2 = t.copy()
        t2[9] = t2[8]
        assert not batch_ok(t2, d, -1, 35.0, 160.0)

    def test_gaps_over(self):
        t = np.array([100, 105, 110, 140, 145, 200], np.int64) * 1_000_000
        assert gaps_over(t, -1, 20_000_000) == [3, 5]                 # -1: no sample before the batch
        assert gaps_over(t, 70_000_000, 20_000_000) == [0, 3, 5]
        assert gaps_over(t, 90_000_000, 20_000_000) == [3, 5]
        assert gaps_over(t[:0], -1, 1) == []


def _parallax_reference(kf_ids, kf_xy, ids, xy, R_cc):
    """KeyframePolicy's parallax in plain NumPy (with nan_median), in normalised units: the compiled
    parallax_px's reference."""
    order = np.argsort(kf_ids, kind="stable")
    srt = kf_ids[order]
    pos = np.searchsorted(srt, ids)
    pos[pos >= len(srt)] = 0
    hit = srt[pos] == ids
    ia = order[pos[hit]]
    if len(ia) == 0:
        return 0, math.nan
    a = kf_xy[ia]
    f = np.column_stack([xy[hit], np.ones(int(hit.sum()))]) @ R_cc.T
    v = np.linalg.norm(f[:, :2] / f[:, 2:3] - a, axis=1)
    v = np.sort(v[~np.isnan(v)])
    n = len(v)
    return len(ia), (float((v[(n - 1) // 2] + v[n // 2]) / 2) if n else math.nan)


class TestParallax:
    @pytest.mark.parametrize("seed", range(5))
    def test_against_numpy(self, seed):
        from scipy.spatial.transform import Rotation

        rng = np.random.default_rng(seed)
        kf_ids = rng.permutation(400)[:150].astype(np.int64)
        kf_xy = rng.uniform(-0.6, 0.6, (150, 2))
        ids = np.concatenate([rng.choice(kf_ids, 100, replace=False), 1000 + np.arange(30)]).astype(np.int64)
        rng.shuffle(ids)
        xy = rng.uniform(-0.6, 0.6, (len(ids), 2))
        xy[3] = np.nan                                              # a NaN bearing is left out of the median
        R = Rotation.from_rotvec(rng.normal(0, 0.05, 3)).as_matrix()
        order = np.argsort(kf_ids, kind="stable")
        n, med = parallax_px(kf_ids[order], order, kf_xy, ids, xy, R)
        n_ref, med_ref = _parallax_reference(kf_ids, kf_xy, ids, xy, R)
        assert n == n_ref == 100
        assert abs(med - med_ref) <= 1e-15 * max(1.0, med_ref)

    def test_nothing_shared(self):
        ids = np.arange(5, dtype=np.int64)
        n, med = parallax_px(ids, ids, np.zeros((5, 2)), ids + 10, np.zeros((5, 2)), np.eye(3))
        assert n == 0 and math.isnan(med)
        n, _ = parallax_px(ids[:0], ids[:0], np.zeros((0, 2)), ids, np.zeros((5, 2)), np.eye(3))
        assert n == 0


def _propagate_reference(R, p, v, bg, ba, m, dt, gravity):
    """VioEstimator.propagate's integration as a NumPy loop: the compiled propagate_imu's reference."""
    g = np.array([0, 0, -gravity])
    for k in range(len(dt)):
        w, a, h = m[k, :3] - bg, m[k, 3:] - ba, float(dt[k])
        acc_w = R @ a + g
        p = p + v * h + 0.5 * acc_w * h * h
        v = v + acc_w * h
        th = np.linalg.norm(w) * h
        if th > 1e-12:
            kx = w / np.linalg.norm(w)
            K = np.array([[0, -kx[2], kx[1]], [kx[2], 0, -kx[0]], [-kx[1], kx[0], 0]])
            R = R @ (np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K)
    return R, p, v


class TestPropagateImu:
    """backend.imu.propagate_imu (the IMU-rate state) against a NumPy loop."""

    def test_against_reference(self):
        rng = np.random.default_rng(3)
        for _ in range(20):
            q, _r = np.linalg.qr(rng.normal(size=(3, 3)))
            R = q * np.sign(np.linalg.det(q))
            p, v, bg, ba = (rng.normal(size=3) for _ in range(4))
            k = int(rng.integers(0, 12))
            m = np.column_stack([rng.normal(0, 2.0, (k, 3)), rng.normal(0, 5.0, (k, 3))])
            if k:
                m[0, :3] = bg                   # a piece with no rotation at all
            dt = rng.uniform(0.0005, 0.006, k)
            got = propagate_imu(R, p, v, bg, ba, m, dt, 9.81)
            ref = _propagate_reference(R, p, v, bg, ba, m, dt, 9.81)
            for a, b in zip(got, ref):
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
            np.testing.assert_allclose(got[0] @ got[0].T, np.eye(3), atol=1e-12)

    def test_inputs_untouched(self):
        R, p, v = np.eye(3), np.zeros(3), np.ones(3)
        m = np.array([[0.1, 0.2, 0.3, 0.0, 0.0, 9.81]])
        R2, p2, v2 = propagate_imu(R, p, v, np.zeros(3), np.zeros(3), m, np.array([0.005]), 9.81)
        assert (R == np.eye(3)).all() and (p == 0).all() and (v == 1).all()
        assert not np.allclose(R2, R) and np.allclose(p2, v * 0.005)


class TestRotToQuat:
    """The per-frame output's rotation -> quaternion on plain floats, against scipy, every branch of
    Shepperd's method (trace positive, then each diagonal element largest)."""

    def test_against_scipy(self):
        from scipy.spatial.transform import Rotation

        from vilib_ros.backend.rotation import rot_to_quat_xyzw

        rng = np.random.default_rng(4)
        rots = list(Rotation.random(500, random_state=rng).as_matrix())
        rots += [Rotation.from_rotvec(np.pi * 0.999 * np.eye(3)[i]).as_matrix() for i in range(3)]
        branches = set()
        for R in rots:
            q = rot_to_quat_xyzw(R)
            ref = Rotation.from_matrix(R).as_quat()
            ref = -ref if ref[3] < 0 else ref
            assert q.shape == (4,) and q[3] >= 0 and abs(np.linalg.norm(q) - 1) < 1e-15
            np.testing.assert_allclose(q, ref, rtol=0, atol=1e-14)
            d = np.diag(R)
            branches.add("trace" if d.sum() > 0 else int(np.argmax(d)))
        assert branches == {"trace", 0, 1, 2}


class TestPreintegrate:
    """backend.imu.preintegrate / predict_nav (every frame's prediction, compiled) against gtsam's own
    ``PreintegratedCombinedMeasurements`` and its ``predict``: the independent reference, fed the same steps."""

    @staticmethod
    def _gtsam_pim(bias6):
        gtsam = pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        from vilib_ros.backend.imu import make_preintegration_params

        p = make_preintegration_params({}, 9.81)
        return gtsam, gtsam.PreintegratedCombinedMeasurements(p, gtsam.imuBias.ConstantBias(bias6[:3], bias6[3:]))

    @pytest.mark.parametrize("rate_scale", [0.0, 0.3, 3.0])     # no rotation, a drone's, a fast spin
    def test_deltas_and_prediction_equal_gtsam(self, rate_scale):
        from vilib_ros.backend.imu import predict_nav, preintegrate

        rng = np.random.default_rng(int(rate_scale * 10))
        for _ in range(5):
            bias6 = rng.normal(0, 0.05, 6)
            gtsam, pim = self._gtsam_pim(bias6)
            n = 50
            a = rng.normal([0, 0, 9.81], 2.0, (n, 3))
            w = rng.normal(0, 1.0, (n, 3)) * rate_scale
            dt = rng.uniform(0.004, 0.006, n)
            delta = np.zeros(10)
            for k in range(0, n, 9):                # in frame-sized batches, as the estimator calls it
                for ak, wk, dk in zip(a[k:k + 9], w[k:k + 9], dt[k:k + 9]):
                    pim.integrateMeasurement(ak, wk, dk)
                preintegrate(delta, a[k:k + 9], w[k:k + 9], dt[k:k + 9], bias6)
            np.testing.assert_allclose(delta[:3], gtsam.Rot3.Logmap(pim.deltaRij()), rtol=0, atol=1e-13)
            np.testing.assert_allclose(delta[3:6], pim.deltaPij(), rtol=0, atol=1e-13)
            np.testing.assert_allclose(delta[6:9], pim.deltaVij(), rtol=0, atol=1e-13)
            assert delta[9] == pytest.approx(pim.deltaTij(), abs=1e-15)
            q, _r = np.linalg.qr(rng.normal(size=(3, 3)))
            T_i = np.eye(4)
            T_i[:3, :3], T_i[:3, 3] = q * np.sign(np.linalg.det(q)), rng.normal(0, 3, 3)
            v_i = rng.normal(0, 2, 3)
            ns = pim.predict(gtsam.NavState(gtsam.Pose3(T_i), v_i), gtsam.imuBias.ConstantBias(bias6[:3], bias6[3:]))
            T, v = np.full((4, 4), np.nan), np.full(3, np.nan)      # poisoned: every element written
            predict_nav(delta, T_i, v_i, 9.81, T, v)
            np.testing.assert_allclose(T, ns.pose().matrix(), rtol=0, atol=1e-12)
            np.testing.assert_allclose(v, ns.velocity(), rtol=0, atol=1e-12)

    def test_no_steps_predicts_the_state(self):
        from vilib_ros.backend.imu import predict_nav, preintegrate

        delta = np.zeros(10)
        preintegrate(delta, np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0), np.zeros(6))
        T_i, v_i = np.eye(4), np.array([1.0, 2.0, 3.0])
        T_i[:3, 3] = [4.0, 5.0, 6.0]
        T, v = np.empty((4, 4)), np.empty(3)
        predict_nav(delta, T_i, v_i, 9.81, T, v)
        assert (T == T_i).all() and (v == v_i).all()

    def test_steps_are_what_integrate_feeds_gtsam(self):
        """ImuBuffer.steps against steps built here from the NumPy pieces and the mid-step rotation
        written out (first order, the rate less the gyro bias over half a step), and ImuBuffer.integrate's
        gtsam preintegration against a fresh one fed those reference steps (not integrate() against
        steps(), which it calls): a wrong bias or a dropped mid-step rotation in the compiled _steps
        fails."""
        from vilib_ros.backend.imu import preintegrate

        rng = np.random.default_rng(5)
        t, d = _stream(rng)
        buf = ImuBuffer()
        buf.extend(t, d)
        bias6 = rng.normal(0, 0.05, 6)
        t_a, t_b = int(t[10]) + 1234567, int(t[300]) - 777
        m, dt_ref = _pieces_reference(t, d, t_a, t_b)
        w_ref, f = m[:, :3], m[:, 3:]
        th = (w_ref - bias6[3:]) * (0.5 * dt_ref)[:, None]
        a_ref = f + np.cross(th, f)
        a, w, dt = buf.steps(t_a, t_b, bias6[3:].copy())
        np.testing.assert_allclose(a, a_ref, rtol=0, atol=1e-12)
        assert np.array_equal(w, w_ref) and np.array_equal(dt, dt_ref)
        assert np.abs(a - f).max() > 1e-4              # the rotation is there to be checked
        gtsam, pim = self._gtsam_pim(bias6)
        buf.integrate(pim, t_a, t_b)
        _, ref = self._gtsam_pim(bias6)
        for ak, wk, dk in zip(a_ref, w_ref, dt_ref):
            ref.integrateMeasurement(ak, wk, dk)
        np.testing.assert_allclose(pim.deltaPij(), ref.deltaPij(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(pim.deltaVij(), ref.deltaVij(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(gtsam.Rot3.Logmap(pim.deltaRij()), gtsam.Rot3.Logmap(ref.deltaRij()), rtol=0,
                                   atol=1e-12)
        delta = np.zeros(10)
        preintegrate(delta, a, w, dt, bias6)
        np.testing.assert_allclose(delta[6:9], pim.deltaVij(), rtol=0, atol=1e-12)
        assert delta[9] == pytest.approx((t_b - t_a) * 1e-9, abs=1e-12)
