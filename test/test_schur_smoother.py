"""The backend's own smoother (``BackendConfig.solver = 'schur'``) against gtsam on the same factors.

References, independent of the code under test: gtsam's linearisation of its own factors
(``GenericStereoFactor3D``, ``GenericProjectionFactorCal3_S2``, ``PriorFactorPoint3``,
``CombinedImuFactor``, robust Huber noise), a dense NumPy solve of the full system (landmarks
kept), gtsam's Gauss-Newton step (``linearize().optimize()``) and gtsam's elimination of the
marginalised variables (``eliminatePartialMultifrontal``)."""
from __future__ import annotations

import numpy as np
import pytest

gtsam = pytest.importorskip("gtsam")

from vilib_ros.backend import schur_kernels as schur  # noqa: E402
from vilib_ros.backend.schur_smoother import IndeterminantSystem, SchurSmoother  # noqa: E402

X, V, B, L = (lambda i, c=c: (ord(c) << 56) | i for c in "xvbl")
SIGMA, HUBER, BASE = 1.0 / 450, 1.345, 0.11


def _rot(rng, scale):
    return gtsam.Rot3.Expmap(rng.normal(0, scale, 3)).matrix()


def _T(R, t):
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, t
    return T


def _problem(seed=0, n_states=3, n_lm=12, behind=True, all_priors=False, n_only0=0):
    """A small window: camera looking along the body's +x (EuRoC-like ``T_bs``), states moving
    along y, landmarks 2-6 m ahead; observations noisy (some past the Huber threshold), one
    landmark behind the cameras of one state, stereo and mono (cam0 / cam1) kinds."""
    rng = np.random.default_rng(seed)
    R_bs = np.array([[0.0, 0, 1], [-1, 0, 0], [0, -1, 0]]) @ _rot(rng, 0.02)   # cam z = body x
    T_bs0 = _T(R_bs, np.array([0.02, -0.06, 0.01]))
    T_bs1 = T_bs0 @ _T(np.eye(3), np.array([BASE, 0, 0]))
    poses = [_T(_rot(rng, 0.05), np.array([0.0, 0.3 * i, 0.0]) + rng.normal(0, 0.02, 3)) for i in range(n_states)]
    P = np.column_stack([rng.uniform(2, 6, n_lm), rng.uniform(-2, 3, n_lm), rng.uniform(-1.5, 1.5, n_lm)])
    if behind:
        P[0] = [-3.0, 0.5, 0.2]                   # behind every camera: contributes nothing
    obs = []                                       # (state, landmark, kind, z): kind 0 stereo, 1 cam0, 2 cam1
    for s, T in enumerate(poses):
        for li in range(n_lm):
            how = (li + 2 * s) % 4                     # 0: not seen, 1: stereo, 2: cam0 only, 3: cam0 + raw cam1
            if li >= n_lm - n_only0:                   # the last n_only0: seen by state 0 alone, in stereo
                how = 1 if s == 0 else 0
            if how == 0:
                continue
            kinds = {1: (0,), 2: (1,), 3: (1, 2)}[how]
            for kind in kinds:
                q = np.linalg.inv(T @ (T_bs1 if kind == 2 else T_bs0)) @ np.append(P[li], 1.0)
                z = np.array([q[0] / q[2], (q[0] - BASE) / q[2], q[1] / q[2]]) if kind == 0 else \
                    np.array([q[0] / q[2], q[1] / q[2], np.nan])
                z[:2 if kind else 3] += rng.normal(0, SIGMA, 2 if kind else 3)
                if (li * 7 + s) % 11 == 0:
                    z[0] += 8 * SIGMA                # an outlier: the Huber weight below 1
                obs.append((s, li, kind, z))
    P_est = P + rng.normal(0, 0.05, P.shape)
    prior = np.where(np.arange(n_lm) % 2 == 1, 2.0, 0.0)   # none on the one behind the cameras
    if all_priors:                                 # every landmark determined (gtsam's solve needs it)
        prior[:] = 2.0
    return dict(T_bs0=T_bs0, T_bs1=T_bs1, poses=poses, P=P_est, obs=obs, prior_sigma=prior, prior_p=P_est.copy(),
                rng=rng)


def _arrays(pb):
    o = pb["obs"]
    return (np.array([a for a, *_ in o], np.int64), np.array([b for _, b, *_ in o], np.int64),
            np.array([k for *_, k, _ in o], np.int64), np.array([z for *_, z in o], np.float64))


def _kernel(pb, lm_on=None, obs_on=None):
    S, Ln = len(pb["poses"]), len(pb["P"])
    st, lm, kind, z = _arrays(pb)
    Rs = np.array([T[:3, :3] for T in pb["poses"]])
    ts = np.array([T[:3, 3] for T in pb["poses"]])
    Rbs = np.stack([pb["T_bs0"][:3, :3], pb["T_bs1"][:3, :3]])
    tbs = np.stack([pb["T_bs0"][:3, 3], pb["T_bs1"][:3, 3]])
    lm_on = np.ones(Ln, bool) if lm_on is None else lm_on
    obs_on = np.ones(len(st), bool) if obs_on is None else obs_on
    # the isotropic priors as linear factors: information I / sigma^2, zero gradient at their mean
    sg = pb["prior_sigma"]
    info = np.divide(1.0, sg * sg, out=np.zeros_like(sg), where=sg > 0)
    prior_H = info[:, None, None] * np.eye(3)
    args = (Rs, ts, Rbs, tbs, BASE, pb["P"], lm_on, prior_H, np.zeros((Ln, 3)), pb["prior_p"], st, lm, kind, z,
            obs_on, SIGMA, HUBER, S)
    n = schur.STATE_DIM * S
    H, g = np.zeros((n, n)), np.zeros(n)
    Hi, gl, Hpl = np.zeros((Ln, 3, 3)), np.zeros((Ln, 3)), np.zeros((len(st), 6, 3))
    used = schur.visual_normal_equations(*args, H, g, Hi, gl, Hpl)
    return args, (H, g, Hi, gl, Hpl), used


def _gtsam_graph(pb):
    """The same visual factors and landmark priors as gtsam objects, with their values."""
    huber = gtsam.noiseModel.mEstimator.Huber.Create(HUBER)
    n3 = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(3, SIGMA))
    n2 = gtsam.noiseModel.Robust.Create(huber, gtsam.noiseModel.Isotropic.Sigma(2, SIGMA))
    Ks, Km = gtsam.Cal3_S2Stereo(1, 1, 0, 0, 0, BASE), gtsam.Cal3_S2(1, 1, 0, 0, 0)
    bs0, bs1 = gtsam.Pose3(pb["T_bs0"]), gtsam.Pose3(pb["T_bs1"])
    graph, vals = gtsam.NonlinearFactorGraph(), gtsam.Values()
    for s, li, kind, z in pb["obs"]:
        if kind == 0:
            graph.add(gtsam.GenericStereoFactor3D(gtsam.StereoPoint2(*z), n3, X(s), L(li), Ks, bs0))
        else:
            graph.add(gtsam.GenericProjectionFactorCal3_S2(z[:2], n2, X(s), L(li), Km, bs0 if kind == 1 else bs1))
    for li, sg in enumerate(pb["prior_sigma"]):
        if sg > 0:
            graph.add(gtsam.PriorFactorPoint3(L(li), pb["prior_p"][li], gtsam.noiseModel.Isotropic.Sigma(3, sg)))
    for s, T in enumerate(pb["poses"]):
        vals.insert(X(s), gtsam.Pose3(T))
    for li, p in enumerate(pb["P"]):
        vals.insert(L(li), p)
    return graph, vals


def _full_from_gtsam(pb):
    """gtsam's normal equations over [poses (6 per state), landmarks (3 each)]: (H, g)."""
    graph, vals = _gtsam_graph(pb)
    order = gtsam.Ordering()
    for s in range(len(pb["poses"])):
        order.push_back(X(s))
    for li in range(len(pb["P"])):
        order.push_back(L(li))
    A, b = graph.linearize(vals).jacobian(order)
    return A.T @ A, -A.T @ b


def _pose_rows(S):
    return np.concatenate([np.arange(schur.STATE_DIM * s, schur.STATE_DIM * s + 6) for s in range(S)])


class TestVisualNormalEquations:
    def test_reference_equals_gtsams_linearisation(self):
        """The NumPy reference (landmarks kept) is gtsam's own linearisation of the same factors:
        stereo, both monos, Huber past its threshold, a point behind the cameras, landmark priors."""
        pb = _problem()
        args, _, _ = _kernel(pb)
        H, g = schur.visual_normal_equations_reference(*args)
        S = len(pb["poses"])
        keep = np.concatenate([_pose_rows(S), np.arange(schur.STATE_DIM * S, len(g))])
        Hg, gg = _full_from_gtsam(pb)
        scale = np.abs(Hg).max()
        assert np.abs(H[np.ix_(keep, keep)] - Hg).max() <= 1e-9 * scale
        assert np.abs(g[keep] - gg).max() <= 1e-9 * np.abs(gg).max()

    def test_compiled_equals_reference_with_landmarks_eliminated(self):
        pb = _problem(seed=1)
        args, (H, g, Hi, gl, Hpl), used = _kernel(pb)
        Hf, gf = schur.visual_normal_equations_reference(*args)
        n = schur.STATE_DIM * len(pb["poses"])
        lm = np.arange(n, len(gf))
        Hll = Hf[np.ix_(lm, lm)]
        live = np.abs(Hll).sum(axis=1) > 0        # the landmark behind the cameras has no rows
        lm = lm[live]
        Hsl = Hf[np.ix_(np.arange(n), lm)]
        # block-diagonal: each landmark's own (pseudo-)inverse; a landmark seen once in mono
        # without a prior has a free depth (rank 2)
        Hll_inv = np.linalg.pinv(Hf[np.ix_(lm, lm)], rcond=1e-9, hermitian=True)
        Hs = Hf[:n, :n] - Hsl @ Hll_inv @ Hsl.T
        gs = gf[:n] - Hsl @ Hll_inv @ gf[lm]
        assert np.abs(H - Hs).max() <= 1e-8 * np.abs(Hs).max()
        assert np.abs(g - gs).max() <= 1e-8 * np.abs(gs).max()
        assert used == sum(1 for s, li, *_ in pb["obs"] if li != 0)      # landmark 0 is behind the cameras
        assert np.all(Hi[0] == 0)
        ranks = [np.linalg.matrix_rank(Hf[n + 3 * i:n + 3 * i + 3, n + 3 * i:n + 3 * i + 3]) for i in range(1, len(pb["P"]))]
        assert 2 in ranks          # the case of the pseudo-inverse is in the problem

    def test_back_substitution_equals_the_dense_solve(self):
        pb = _problem(seed=2, behind=False)
        args, (H, g, Hi, gl, Hpl), _ = _kernel(pb)
        Hf, gf = schur.visual_normal_equations_reference(*args)
        n = schur.STATE_DIM * len(pb["poses"])
        # the visual factors alone leave velocities / biases and the gauge free: a prior on everything
        reg = np.zeros(len(gf))
        reg[:n] = 1e6
        d_full = np.linalg.solve(Hf + np.diag(reg), -gf)
        d = np.linalg.solve(H + np.diag(reg[:n]), -g)
        st, lm, _, _ = _arrays(pb)
        dP = np.full((len(pb["P"]), 3), np.nan)            # poisoned: every row must be written
        schur.landmark_steps(d, Hi, gl, Hpl, st, lm, np.ones(len(st), bool), np.ones(len(pb["P"]), bool), dP)
        assert np.allclose(d, d_full[:n], rtol=0, atol=1e-10)
        assert np.all(np.isfinite(dP))
        # landmarks with a full-rank block (a free depth has no unique step in the dense solve)
        full = [i for i in range(len(pb["P"]))
                if np.linalg.matrix_rank(Hf[n + 3 * i:n + 3 * i + 3, n + 3 * i:n + 3 * i + 3]) == 3]
        assert len(full) >= 8
        assert np.allclose(dP[full], d_full[n:].reshape(-1, 3)[full], rtol=0, atol=1e-9)

    def test_observations_switched_off_contribute_nothing(self):
        pb = _problem(seed=3)
        st = _arrays(pb)[0]
        off = np.arange(len(st)) % 2 == 0
        _, (H1, g1, *_), _ = _kernel(pb, obs_on=~off)
        kept = dict(pb, obs=[o for o, f in zip(pb["obs"], off) if not f])
        _, (H2, g2, *_), _ = _kernel(kept)
        assert np.allclose(H1, H2, rtol=1e-12, atol=0) and np.allclose(g1, g2, rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------- the smoother
def _imu_params():
    p = gtsam.PreintegrationCombinedParams.MakeSharedU(9.81)
    p.setAccelerometerCovariance(np.eye(3) * 4e-4)
    p.setGyroscopeCovariance(np.eye(3) * 3e-6)
    p.setIntegrationCovariance(np.eye(3) * 1e-8)
    p.setBiasAccCovariance(np.eye(3) * 1e-5)
    p.setBiasOmegaCovariance(np.eye(3) * 1e-7)
    return p


def _window(pb, dt=0.25):
    """The states of ``pb`` with IMU factors between them (measurements consistent with the
    poses to first order, noisy), priors on the first state; the estimate perturbed."""
    rng = pb["rng"]
    S = len(pb["poses"])
    graph, vals = gtsam.NonlinearFactorGraph(), gtsam.Values()
    v = np.array([0.0, 0.3 / dt, 0.0])
    for s, T in enumerate(pb["poses"]):
        Tp = gtsam.Pose3(T).retract(rng.normal(0, 0.01, 6))
        vals.insert(X(s), Tp)
        vals.insert(V(s), v + rng.normal(0, 0.02, 3))
        vals.insert(B(s), gtsam.imuBias.ConstantBias(rng.normal(0, 0.01, 3), rng.normal(0, 1e-3, 3)))
    graph.add(gtsam.PriorFactorPose3(X(0), gtsam.Pose3(pb["poses"][0]), gtsam.noiseModel.Isotropic.Sigma(6, 1e-3)))
    graph.add(gtsam.PriorFactorVector(V(0), v, gtsam.noiseModel.Isotropic.Sigma(3, 0.1)))
    graph.add(gtsam.PriorFactorConstantBias(B(0), gtsam.imuBias.ConstantBias(),
                                            gtsam.noiseModel.Isotropic.Sigma(6, 0.05)))
    for s in range(1, S):
        pim = gtsam.PreintegratedCombinedMeasurements(_imu_params(), gtsam.imuBias.ConstantBias())
        R0, R1 = pb["poses"][s - 1][:3, :3], pb["poses"][s][:3, :3]
        w = gtsam.Rot3.Logmap(gtsam.Rot3(R0.T @ R1)) / dt
        for _ in range(50):
            pim.integrateMeasurement(R1.T @ np.array([0, 0, 9.81]) + rng.normal(0, 0.02, 3), w + rng.normal(0, 2e-3, 3),
                                     dt / 50)
        graph.add(gtsam.CombinedImuFactor(X(s - 1), V(s - 1), X(s), V(s), B(s - 1), B(s), pim))
    return graph, vals


def _smoother(pb, lag=100.0, relinearize_threshold=0.0):
    """Every factor linearised anew at every step (threshold 0): gtsam's Gauss-Newton exactly."""
    return SchurSmoother(lag, SIGMA, HUBER, pb["T_bs0"], BASE, pb["T_bs1"], relinearize_threshold)


def _feed(sm, pb, graph, vals, stamps_of_state):
    for li, p in enumerate(pb["P"]):
        sm.add_landmark(L(li), p, pb["prior_sigma"][li])
    add = sm.obs_adder()
    obs = pb["obs"]
    for n, (s, li, kind, z) in enumerate(obs):
        if kind == 0:
            add(X(s), L(li), (z[0], z[2]), z[1], None)
        elif kind == 1:
            nxt = obs[n + 1] if n + 1 < len(obs) else None
            raw = (nxt[3][0], nxt[3][1]) if nxt is not None and nxt[:3] == (s, li, 2) else None
            add(X(s), L(li), (z[0], z[1]), None, raw)      # with the raw right ray where there is one
    stamps = {}
    for s in range(len(pb["poses"])):
        stamps.update({X(s): stamps_of_state[s], V(s): stamps_of_state[s], B(s): stamps_of_state[s]})
    for li, _ in enumerate(pb["P"]):
        seen = [s for s, lj, *_ in pb["obs"] if lj == li]
        stamps[L(li)] = max(stamps_of_state[s] for s in seen) if seen else 0.0
    sm.update(graph, vals, stamps)


def _whole(pb, graph, vals):
    """gtsam's graph of everything the smoother was fed (inertial + visual factors) and its values
    (states and landmarks), and gtsam's Gauss-Newton step from them: (graph, values, stepped values)."""
    vis, _ = _gtsam_graph(pb)
    full = gtsam.NonlinearFactorGraph(graph)
    full.push_back(vis)
    full_vals = gtsam.Values(vals)
    for li, p in enumerate(pb["P"]):
        full_vals.insert(L(li), p)
    return full, full_vals, full_vals.retract(full.linearize(full_vals).optimize())


class TestSchurSmootherStep:
    def test_one_update_is_gtsams_gauss_newton_step(self):
        """One update with nothing leaving = one Gauss-Newton step of gtsam on the same factors."""
        pb = _problem(seed=4, behind=False, all_priors=True)
        graph, vals = _window(pb)
        _, _, expected = _whole(pb, graph, vals)
        sm = _smoother(pb)
        _feed(sm, pb, graph, vals, [0.25 * s for s in range(len(pb["poses"]))])
        est = sm.estimate()
        for s in range(len(pb["poses"])):
            assert np.allclose(est.atPose3(X(s)).matrix(), expected.atPose3(X(s)).matrix(), rtol=0, atol=1e-9)
            assert np.allclose(est.atVector(V(s)), expected.atVector(V(s)), rtol=0, atol=1e-8)
            assert np.allclose(est.atConstantBias(B(s)).vector(), expected.atConstantBias(B(s)).vector(),
                               rtol=0, atol=1e-8)
        for li in range(len(pb["P"])):
            assert np.allclose(est.atPoint3(L(li)), expected.atPoint3(L(li)), rtol=0, atol=1e-8)
        assert sm.removed_landmarks == set()

    def test_covariance_is_the_inverse_of_the_marginal_information(self):
        pb = _problem(seed=5, behind=False, all_priors=True)
        graph, vals = _window(pb)
        sm = _smoother(pb)
        _feed(sm, pb, graph, vals, [0.25 * s for s in range(len(pb["poses"]))])
        full, full_vals, _ = _whole(pb, graph, vals)
        # gtsam's marginals at the linearisation point the update used (before its step)
        m = gtsam.Marginals(full, full_vals)
        last = len(pb["poses"]) - 1
        for key in (X(last), V(last)):
            ref = m.marginalCovariance(key)
            assert np.allclose(sm.marginalCovariance(key), ref, rtol=1e-6, atol=1e-12 * np.abs(ref).max())


class TestSchurSmootherMarginalisation:
    def test_marginal_is_gtsams_elimination(self):
        """State 0 leaves (now 1.2 s, lag 0.6 s), and with it every landmark it observes (VINS-Mono's
        marginalisation). Its inertial factors and those landmarks, all their observations included,
        go into a prior on the remaining states: gtsam's elimination of the same variables from the
        same factors, linearised where the smoother stood after its step."""
        pb = _problem(seed=6, n_states=4, n_lm=16, behind=False, all_priors=True, n_only0=3)
        graph, vals = _window(pb)
        sm = _smoother(pb, lag=0.6)
        _feed(sm, pb, graph, vals, [0.0, 0.7, 0.95, 1.2])
        seen = {s: {li for t, li, *_ in pb["obs"] if t == s} for s in range(4)}
        only0 = seen[0] - seen[1] - seen[2] - seen[3]
        leaving_lm = seen[0]
        assert only0 and seen[0] - only0
        assert sm.removed_landmarks == {L(li) for li in leaving_lm}
        assert len(sm._slots) == 3 and len(sm._priors) == 1
        prior = sm._priors[0]
        keys, Hp, gp = prior.keys, prior.H, prior.g
        # the smoother marginalised at its post-step estimate: gtsam's Gauss-Newton step of the same
        # problem (TestSchurSmootherStep shows they agree)
        vis, _ = _gtsam_graph(pb)
        _, _, full_vals = _whole(pb, graph, vals)
        for n, i in enumerate(prior.kf):          # its linearisation point
            T = full_vals.atPose3(X(i)).matrix()
            assert np.allclose(prior.R[n], T[:3, :3], atol=1e-9) and np.allclose(prior.t[n], T[:3, 3], atol=1e-9)
            assert np.allclose(prior.v[n], full_vals.atVector(V(i)), atol=1e-9)
            assert np.allclose(prior.b[n], full_vals.atConstantBias(B(i)).vector(), atol=1e-9)
        nl = gtsam.NonlinearFactorGraph()
        for i in range(graph.size()):
            f = graph.at(i)
            if {X(0), V(0), B(0)} & set(f.keys()):
                nl.add(f)
        out = {L(li) for li in leaving_lm}
        for i in range(vis.size()):
            f = vis.at(i)
            ks = set(f.keys())
            if ks & out:
                nl.add(f)
            assert X(0) not in ks or ks & out     # every landmark state 0 saw leaves
        leaving = gtsam.Ordering()
        for k in (X(0), V(0), B(0), *sorted(out)):
            leaving.push_back(k)
        _, rest = nl.linearize(full_vals).eliminatePartialMultifrontal(leaving)
        touched = set(rest.keys())
        dims = {ord("x"): 6, ord("v"): 3, ord("b"): 6}
        rows, r0 = [], 0
        order = gtsam.Ordering()
        for k in keys:
            if k in touched:
                rows.extend(range(r0, r0 + dims[k >> 56]))
                order.push_back(k)
            r0 += dims[k >> 56]
        rows = np.array(rows)
        A, b = rest.jacobian(order)
        scale = np.abs(Hp).max()
        assert np.allclose(Hp[np.ix_(rows, rows)], A.T @ A, rtol=1e-6, atol=1e-7 * scale)
        assert np.allclose(gp[rows], -A.T @ b, rtol=1e-6, atol=1e-7 * np.abs(gp).max())
        other = np.setdiff1d(np.arange(len(gp)), rows)
        assert np.abs(Hp[other]).sum() <= 1e-9 * scale and np.abs(gp[other]).sum() <= 1e-9 * np.abs(gp).max()

    def test_an_extra_step_keeps_what_the_update_removed(self):
        """Regression: an extra step (``update()`` without arguments: ``BackendConfig.extra_updates``)
        reset ``removed_landmarks``; the estimator then kept the landmarks the keyframe's update had
        marginalised and read one of them: KeyError (every V1_01 column, stereo and mono)."""
        pb = _problem(seed=6, n_states=4, n_lm=16, behind=False, all_priors=True, n_only0=3)
        graph, vals = _window(pb)
        sm = _smoother(pb, lag=0.6)
        _feed(sm, pb, graph, vals, [0.0, 0.7, 0.95, 1.2])
        removed = {L(li) for s, li, *_ in pb["obs"] if s == 0}
        assert removed and sm.removed_landmarks == removed
        sm.update()                                   # the extra step: nothing more leaves
        assert sm.removed_landmarks == removed
        assert not any(sm.estimate().exists(k) for k in removed)
        sm.update(gtsam.NonlinearFactorGraph(), gtsam.Values(), {})   # a keyframe's update starts anew
        assert sm.removed_landmarks == set()

    def test_kept_landmarks_go_on_with_their_remaining_observations(self):
        """``keep_landmarks`` (BackendConfig.schur_keep_landmarks): the marginal is the same as
        without it (every landmark state 0 saw is eliminated into it); afterwards a landmark with at
        least that many observations by the remaining states stays, at its estimate, with exactly
        those observations, and only the others are reported removed."""
        stamps = [0.0, 0.7, 0.95, 1.2]
        runs = {}
        for keep in (0, 2):
            pb = _problem(seed=6, n_states=4, n_lm=16, behind=False, all_priors=True, n_only0=3)
            graph, vals = _window(pb)
            sm = SchurSmoother(0.6, SIGMA, HUBER, pb["T_bs0"], BASE, pb["T_bs1"], 0.0, keep_landmarks=keep)
            _feed(sm, pb, graph, vals, stamps)
            runs[keep] = (sm, pb)
        (sm0, pb), (sm2, _) = runs[0], runs[2]
        p0, p2 = sm0._priors[0], sm2._priors[0]
        assert p0.keys == p2.keys and np.allclose(p0.H, p2.H, rtol=0, atol=0) and np.allclose(p0.g, p2.g, rtol=0, atol=0)
        obs = pb["obs"]
        seen0 = {li for s, li, *_ in obs if s == 0}
        remaining = {li: sum(1 for s, lj, *_ in obs if lj == li and s > 0) for li in seen0}
        stays = {li for li, n in remaining.items() if n >= 2}
        assert stays and seen0 - stays                      # both cases occur
        assert sm2.removed_landmarks == {L(li) for li in seen0 - stays}
        t = sm2._lm
        assert set(t.keys.tolist()) == {L(li) for li in range(16) if li not in seen0 - stays}
        est0 = sm0.estimate()
        for li in stays:
            r = t.row[L(li)]
            # the state-0 observations are gone; the others kept, their states renumbered (1, 2, 3 -> 0, 1, 2)
            kept = sorted(t.o_state[t.o_lm == r].tolist())
            assert kept == sorted(s - 1 for s, lj, *_ in obs if lj == li and s > 0)
            assert len(kept) == remaining[li]
        # the same step, so the states and the kept landmarks sit where they sat without the option
        est2 = sm2.estimate()
        for s in (1, 2, 3):
            assert np.allclose(est2.atPose3(X(s)).matrix(), est0.atPose3(X(s)).matrix(), rtol=0, atol=0)
        pb_again = _problem(seed=6, n_states=4, n_lm=16, behind=False, all_priors=True, n_only0=3)
        stepped = _whole(pb_again, *_window(pb_again))[2]     # gtsam's Gauss-Newton step of the same problem
        for li in stays:
            assert np.allclose(est2.atPoint3(L(li)), stepped.atPoint3(L(li)), rtol=0, atol=1e-8)

    def test_singular_window_raises(self):
        """No pose prior, no landmark prior and no inertial factor, velocities and biases held by
        priors: the gauge (a rigid motion of every pose and landmark together) is the one freedom
        left, and the update raises IndeterminantSystem from its Cholesky (potrf) in the second
        state's pose columns (LAPACK info 16-21, 1-based), the first column where the gauge shows.
        The same window with a prior on the first pose solves. The window has velocity / bias
        priors and no landmark priors (which would fix the gauge): a failure at the first velocity
        column would say nothing about the gauge."""
        pb = _problem(seed=7, n_states=2, behind=False)
        pb["prior_sigma"] = np.zeros_like(pb["prior_sigma"])       # no landmark prior either
        # the premise, in gtsam's linearisation of the visual factors: landmarks eliminated
        # (pseudo-inverse: a landmark seen once in mono has a free depth of its own), the poses'
        # system has exactly the 6 null directions of the gauge
        Hg, _ = _full_from_gtsam(pb)
        n = 6 * len(pb["poses"])
        Hpl = Hg[:n, n:]
        S = Hg[:n, :n] - Hpl @ np.linalg.pinv(Hg[n:, n:], rcond=1e-9, hermitian=True) @ Hpl.T
        w = np.linalg.eigvalsh(S) / np.abs(S).max()
        assert np.sum(np.abs(w) < 1e-12) == 6 and np.sort(np.abs(w))[6] > 1e-4, w

        def window(pose_prior):
            graph, vals = gtsam.NonlinearFactorGraph(), gtsam.Values()
            for s, T in enumerate(pb["poses"]):
                vals.insert(X(s), gtsam.Pose3(T))
                vals.insert(V(s), np.zeros(3))
                vals.insert(B(s), gtsam.imuBias.ConstantBias())
                graph.add(gtsam.PriorFactorVector(V(s), np.zeros(3), gtsam.noiseModel.Isotropic.Sigma(3, 0.1)))
                graph.add(gtsam.PriorFactorConstantBias(B(s), gtsam.imuBias.ConstantBias(),
                                                        gtsam.noiseModel.Isotropic.Sigma(6, 0.05)))
            if pose_prior:
                graph.add(gtsam.PriorFactorPose3(X(0), gtsam.Pose3(pb["poses"][0]),
                                                 gtsam.noiseModel.Isotropic.Sigma(6, 1e-3)))
            return graph, vals

        sm = _smoother(pb)
        msg = r"^the window's system is not positive definite \(LAPACK potrf info (1[6-9]|2[01])\)$"
        with pytest.raises(IndeterminantSystem, match=msg):
            _feed(sm, pb, *window(pose_prior=False), [0.0, 0.25])
        sm = _smoother(pb)
        _feed(sm, pb, *window(pose_prior=True), [0.0, 0.25])          # the gauge fixed: no exception
        assert np.all(np.isfinite(sm.estimate().atPose3(X(1)).matrix()))


class TestPoseLocal:
    def test_equals_gtsams_local_coordinates(self):
        rng = np.random.default_rng(8)
        out = np.zeros(6)
        # rotations up to 3 rad (a prior's states move millimetres and milliradians; near pi the
        # axis is ill-conditioned and the two methods part at ~1e-6)
        for scale in (1e-9, 1e-6, 1e-3, 0.3, 1.5, 3.0):
            for _ in range(20):
                a = gtsam.Pose3(gtsam.Rot3.Expmap(rng.normal(0, 1, 3)), rng.normal(0, 2, 3))
                xi = rng.normal(0, 1, 6)
                xi[:3] *= scale / np.linalg.norm(xi[:3])
                b = a.retract(xi)
                Ta, Tb = a.matrix(), b.matrix()
                schur.pose_local(Ta[:3, :3], Ta[:3, 3], Tb[:3, :3], Tb[:3, 3], out)
                assert np.allclose(out, a.localCoordinates(b), rtol=0, atol=1e-7), scale


class TestRetract:
    def test_equals_gtsams_retract(self):
        rng = np.random.default_rng(9)
        for scale in (0.0, 1e-12, 1e-6, 1e-2, 0.5, 2.0):
            Rs, ts, vs, bs, d, ref = [], [], [], [], [], []
            for _ in range(10):
                a = gtsam.Pose3(gtsam.Rot3.Expmap(rng.normal(0, 1, 3)), rng.normal(0, 2, 3))
                xi = rng.normal(0, 1, 15)
                xi[:3] *= scale / np.linalg.norm(xi[:3]) if scale else 0.0
                Rs.append(a.rotation().matrix())
                ts.append(a.translation())
                vs.append(rng.normal(0, 1, 3))
                bs.append(rng.normal(0, 0.1, 6))
                d.append(xi)
                ref.append((a.retract(xi[:6]).matrix(), vs[-1] + xi[6:9], bs[-1] + xi[9:]))
            Rs, ts, vs, bs = np.array(Rs), np.array(ts), np.array(vs), np.array(bs)
            schur.retract_states(Rs, ts, vs, bs, np.concatenate(d))
            for s, (T, v, b) in enumerate(ref):
                assert np.allclose(Rs[s], T[:3, :3], rtol=0, atol=1e-12) and np.allclose(ts[s], T[:3, 3], atol=1e-12)
                assert np.allclose(vs[s], v, atol=1e-15) and np.allclose(bs[s], b, atol=1e-15)


def _counted_linearisations(sm) -> list:
    """Counts gtsam linearisations of the smoother's state factors: the real
    ``StateFactors._linearise`` wrapped (it still does the work); returns the list it appends to."""
    calls = []
    real = sm._factors._linearise

    def counted(j, st):
        calls.append(j)
        return real(j, st)

    sm._factors._linearise = counted
    return calls


class TestRelinearisationThreshold:
    TH = 0.01       # iSAM2's default, BackendConfig's
    UPDATES = 5     # the first update with the factors, then four Gauss-Newton steps more

    def _run(self, pb, th):
        graph, vals = _window(dict(pb, rng=np.random.default_rng(3)))
        sm = _smoother(pb, relinearize_threshold=th)
        calls = _counted_linearisations(sm)
        per_update = []
        _feed(sm, pb, graph, vals, [0.25 * s for s in range(len(pb["poses"]))])
        per_update.append(len(calls))
        for _ in range(self.UPDATES - 1):
            sm.update()
            per_update.append(len(calls) - sum(per_update))
        est = sm.estimate()
        x = np.concatenate([np.concatenate([est.atPose3(X(s)).matrix()[:3].ravel(), est.atVector(V(s)),
                                            est.atConstantBias(B(s)).vector()]) for s in range(len(pb["poses"]))])
        return sm, per_update, x

    def test_cached_linearisations_stay_within_the_threshold(self):
        """With iSAM2's threshold (0.01) a factor whose variables all moved less keeps its
        linearisation, carried to the estimate to first order (gtsam's LinearContainerFactor):
        strictly fewer gtsam linearisations than with threshold 0 (every factor anew at every
        update), and the same states to second order in the threshold: the carried gradient
        ``g + H d0`` differs from the one at the estimate by O(|d0|^2) with |d0| <= 0.01 per
        coordinate, so the estimate moves by O(0.01^2) = 1e-4 (poses, velocities, biases in their
        own units). Five updates, so that several linearisations are cached: a cache that never
        carries its gradient, or that relinearises everything, fails."""
        pb = _problem(seed=10, behind=False, all_priors=True)
        sm0, per0, x0 = self._run(pb, 0.0)
        n_factors = sm0._factors.n
        assert n_factors == 2 * len(pb["poses"]) - 1            # 3 priors on state 0, 2 inertial factors
        assert per0 == [n_factors] * self.UPDATES              # threshold 0: every factor at every update
        sm1, per1, x1 = self._run(pb, self.TH)
        assert per1[0] == n_factors                             # new factors are linearised once
        assert sum(per1) < sum(per0), (per1, per0)
        assert sum(per1) <= sum(per0) - 5, (per1, per0)        # the cache is used, not once by chance
        d = np.abs(x1 - x0)
        assert d.max() <= self.TH ** 2, d.max()
        # no threshold at all (never relinearised): each factor once; further from threshold 0
        _, per_inf, x_inf = self._run(pb, 1e9)
        assert per_inf == [n_factors] + [0] * (self.UPDATES - 1)
        assert np.abs(x_inf - x0).max() > 10 * d.max()
