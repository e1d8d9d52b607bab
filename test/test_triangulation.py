"""The backend's batched triangulation of new landmarks (vilib_ros.backend.triangulation) against
a per-landmark NumPy reference and against the true points."""
import numpy as np
import pytest

from vilib_ros.backend.triangulation import triangulate_candidates, triangulate_reference

CHI2_S, CHI2_M, SIGMA = 11.34, 9.21, 1.0 / 460.0
T_C1C0 = np.eye(4)
T_C1C0[0, 3] = -0.11                    # a rectified pair with an 11 cm baseline


def _proj(R_wc, c_w):
    """3x4 world -> camera projection of a camera at c_w with orientation R_wc (camera -> world)."""
    R = R_wc.T
    return np.hstack([R, (-R @ c_w)[:, None]])


def _scene(rng, C, stereo, noise=0.3, outliers=0.0, behind=0, planted=None):
    """C candidates, 2-5 observations each from cameras moving along x, looking along +z.
    ``planted``: a list that receives, per candidate, which of its observations were made outliers."""
    cands = []
    for c in range(C):
        n = int(rng.integers(2, 6))
        X = np.array([rng.uniform(-2, 2), rng.uniform(-1.5, 1.5), rng.uniform(1.5, 8.0)])
        obs = []
        bad = np.zeros(n, bool)
        for j in range(n):
            a = 0.05 * j + rng.uniform(-0.01, 0.01)
            R = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
            P = _proj(R, np.array([0.15 * j, 0.02 * rng.standard_normal(), 0.0]))
            pc = P @ np.append(X, 1.0)
            xy = pc[:2] / pc[2] + rng.standard_normal(2) * noise * SIGMA
            if rng.random() < outliers:
                xy += rng.choice([-1, 1], 2) * 25 * SIGMA
                bad[j] = True
            xr, has = np.zeros(2), False
            if stereo and rng.random() < 0.8:
                pr = T_C1C0[:3, :3] @ pc + T_C1C0[:3, 3]
                xr, has = pr[:2] / pr[2] + rng.standard_normal(2) * noise * SIGMA, True
            gate = (CHI2_S if has else CHI2_M) * (4.0 if j == n - 1 else 1.0) * SIGMA ** 2
            obs.append((P, xy, xr, has, gate))
        cands.append((X, obs))
        if planted is not None:
            planted.append(bad)
    return cands


def _pack(cands):
    """The kernel's flat layout: every observation its own view (projection) row."""
    obs = [o for _, ob in cands for o in ob]
    start = np.concatenate([[0], np.cumsum([len(ob) for _, ob in cands])]).astype(np.int64)
    P = np.array([o[0] for o in obs])
    view = np.arange(len(obs), dtype=np.int64)
    xy, xr = np.array([o[1] for o in obs]), np.array([o[2] for o in obs])
    m_r, gate = np.array([o[3] for o in obs], bool), np.array([o[4] for o in obs])
    return P, view, xy, xr, m_r, gate, start


def _run(cands, stereo, min_parallax=1.5, max_depth=25.0):
    P, view, xy, xr, m_r, gate, start = _pack(cands)
    C = len(cands)
    X = np.full((C, 3), np.nan)
    keep, drops = np.ones(len(view), bool), np.zeros(C, np.int64)
    ok = triangulate_candidates(P, view, xy, xr, m_r, gate, start, stereo, T_C1C0, 0.3, max_depth, min_parallax, X,
                                keep, drops)
    return ok, X, [keep[start[c]:start[c + 1]] for c in range(C)], drops


class TestTriangulateCandidates:
    @pytest.mark.parametrize("stereo", [True, False])
    def test_matches_per_landmark_reference(self, stereo):
        rng = np.random.default_rng(7 + stereo)
        cands = _scene(rng, 60, stereo, noise=0.5, outliers=0.15)
        ok, X, keep, drops = _run(cands, stereo)
        for c, (_, obs) in enumerate(cands):
            P, xy, xr, h, g = (np.array([o[i] for o in obs]) for i in range(5))
            ref, ref_keep, ref_drops = triangulate_reference(P, xy, xr, h.astype(bool), g, stereo, T_C1C0, 0.3, 25.0,
                                                             1.5)
            assert ok[c] == (ref is not None), c
            assert drops[c] == ref_drops, c
            if ref is not None:
                np.testing.assert_allclose(X[c], ref, rtol=1e-9, atol=1e-9)
                np.testing.assert_array_equal(keep[c], ref_keep)

    def test_recovers_true_points_and_drops_outliers(self):
        """The observations dropped are exactly the planted outliers (25 sigma off): for every
        landmark made, a planted outlier's keep flag is False and every other observation's True
        (dropping an inlier instead of the outlier, a wrong argmax or the wrong row cleared, fails)."""
        rng = np.random.default_rng(3)
        planted = []
        cands = _scene(rng, 80, True, noise=0.3, outliers=0.1, planted=planted)
        ok, X, keep, drops = _run(cands, True)
        assert ok.mean() > 0.8
        truth = np.array([x for x, _ in cands])
        err = np.linalg.norm(X[ok] - truth[ok], axis=1) / truth[ok, 2]
        # 0.3 px noise on an 11 cm baseline at 460 px focal length: ~5 % depth error at 8 m
        assert np.median(err) < 0.01 and err.max() < 0.12
        with_outliers = [c for c in np.flatnonzero(ok) if planted[c].any()]
        assert len(with_outliers) >= 10            # the case is exercised (15 with this seed)
        for c in np.flatnonzero(ok):
            np.testing.assert_array_equal(keep[c], ~planted[c], err_msg=f"candidate {c}")
            assert drops[c] == planted[c].sum(), c
        # a landmark made from a candidate with an outlier sits where its inliers put it
        e = np.linalg.norm(X[with_outliers] - truth[with_outliers], axis=1) / truth[with_outliers, 2]
        assert e.max() < 0.12, e.max()

    def test_mono_needs_parallax(self):
        rng = np.random.default_rng(5)
        cands = _scene(rng, 40, False, noise=0.0)
        ok_low, X, _, _ = _run(cands, False, min_parallax=0.0)
        ok_high, _, _, _ = _run(cands, False, min_parallax=45.0)
        assert ok_low.all() and not ok_high.any()
        truth = np.array([x for x, _ in cands])
        np.testing.assert_allclose(X, truth, rtol=1e-6)

    def test_mono_parallax_threshold_is_the_angle_in_degrees(self):
        """At the threshold: a candidate is made iff the angle between its first and last rays
        (here from the true point and the camera centres, noise-free) reaches min_parallax_deg,
        with the threshold 1e-6 degrees below / above a candidate's own angle, so that a threshold
        off by a factor (radians, the half angle, the cosine compared) fails."""
        rng = np.random.default_rng(5)
        cands = _scene(rng, 40, False, noise=0.0)
        angle = []
        for X, obs in cands:
            (P0, *_), (P1, *_) = obs[0], obs[-1]
            a, b = X + P0[:, :3].T @ P0[:, 3], X + P1[:, :3].T @ P1[:, 3]      # X - camera centre
            angle.append(np.degrees(np.arccos(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))))
        angle = np.array(angle)
        assert angle.min() > 1.0 and angle.max() < 20.0
        # the default (BackendConfig.mono_min_parallax_deg = 1.5) and three candidates' own angles
        for thr in (1.5, *np.sort(angle)[[5, 20, 30]]):
            for t in (thr - 1e-6, thr + 1e-6):
                ok, _, _, _ = _run(cands, False, min_parallax=t)
                np.testing.assert_array_equal(ok, angle >= t, err_msg=f"min_parallax {t}")
            if thr != 1.5:   # the candidate at the threshold: made just below it, refused just above
                c = int(np.flatnonzero(angle == thr)[0])
                assert _run(cands, False, min_parallax=thr - 1e-6)[0][c]
                assert not _run(cands, False, min_parallax=thr + 1e-6)[0][c]

    def test_stereo_needs_a_right_ray_and_depth_in_range(self):
        rng = np.random.default_rng(9)
        cands = _scene(rng, 10, True, noise=0.0)
        no_right = [(x, [(P, a, b, False, g / CHI2_S * CHI2_M) for P, a, b, _, g in obs]) for x, obs in cands]
        ok, _, _, drops = _run(no_right, True)
        assert not ok.any() and not drops.any()
        ok, _, _, _ = _run(cands, True)
        assert ok.all()
        ok, _, _, _ = _run(cands, True, max_depth=1.0)
        truth = np.array([x for x, _ in cands])
        assert not ok[truth[:, 2] > 1.5].any()     # every point beyond max_depth (1 m) is refused
