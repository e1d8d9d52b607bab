"""Compiled normal equations of the visual factors, landmarks eliminated (Schur complement).

The solver of :class:`.schur_smoother.SchurSmoother`: per update, every visual observation is
linearised at the current estimate and the landmarks are eliminated in closed form (each one's 3x3
block), leaving a dense system over the window's states; after the state step the landmarks'
steps follow by back-substitution. The factors are gtsam's, in gtsam's conventions:

* stereo (``GenericStereoFactor3D`` with ``Cal3_S2Stereo(1, 1, 0, 0, 0, baseline)``: normalised
  coordinates): camera point ``q = T_bs^-1 T_wb^-1 p``, error ``(q_x / q_z, (q_x - b) / q_z,
  q_y / q_z) - (uL, uR, v)``;
* mono (``GenericProjectionFactor`` with ``Cal3_S2(1, 1, 0, 0, 0)``): ``(q_x / q_z, q_y / q_z) -
  (u, v)``, through cam0's or cam1's ``T_bs``;
* isotropic noise ``sigma``, robust Huber ``k`` (gtsam's ``Robust`` with block reweighting: the
  weight of the whitened error's norm, ``sqrt(w)`` on the row block);
* a point with ``q_z <= 0`` contributes nothing (gtsam's cheirality handling: zero Jacobians);
* pose perturbation ``T_wb Exp(xi)``, ``xi = (rotation, translation)`` (``Pose3``'s chart);
* a landmark's optional prior (``PriorFactorPoint3``, isotropic ``prior_sigma``).

Normal equations: ``H = sum w J^T J``, ``g = sum w J^T e`` (whitened ``e``); the step solves
``H d = -g``. States are laid out 15 to a slot (pose 6, velocity 3, bias 6); a pose block is the
slot's first 6 rows.

:func:`visual_normal_equations_reference` is the same in plain NumPy, observation by observation
(the tests' reference, beside gtsam's own linearisation).
"""
from __future__ import annotations

import numba
import numpy as np

STATE_DIM = 15


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def _obs_terms(R, t, Rbs, tbs, baseline, p, kind, z, isig, huber_k, Q, u, bb, A, M) -> bool:
    """One observation's weighted normal-equation terms in closed form: with ``M`` the whitened
    derivative of its residual by the body-frame point (n x 3) and ``e`` its whitened residual,
    ``Q = w M^T M`` (3x3), ``u = w M^T e`` (3), ``w`` the Huber weight of ``|e|``; ``bb`` the body
    point. The Jacobians follow: by the pose ``[M [b]x, -M]``, by the landmark ``M R^T``. False
    where the point is behind the camera (no terms). ``A``, ``M``: 3x3 scratch."""
    d0, d1, d2 = p[0] - t[0], p[1] - t[1], p[2] - t[2]
    b0 = R[0, 0] * d0 + R[1, 0] * d1 + R[2, 0] * d2
    b1 = R[0, 1] * d0 + R[1, 1] * d1 + R[2, 1] * d2
    b2 = R[0, 2] * d0 + R[1, 2] * d1 + R[2, 2] * d2
    bb[0], bb[1], bb[2] = b0, b1, b2
    c0, c1, c2 = b0 - tbs[0], b1 - tbs[1], b2 - tbs[2]
    q0 = Rbs[0, 0] * c0 + Rbs[1, 0] * c1 + Rbs[2, 0] * c2
    q1 = Rbs[0, 1] * c0 + Rbs[1, 1] * c1 + Rbs[2, 1] * c2
    q2 = Rbs[0, 2] * c0 + Rbs[1, 2] * c1 + Rbs[2, 2] * c2
    if q2 <= 0.0:
        return False
    iz = 1.0 / q2
    x, y = q0 * iz, q1 * iz
    # residual rows: d/dq of (x, y[, x - b/z]) = iz * (1, 0, -x), iz * (0, 1, -y), iz * (1, 0, -(x - b iz))
    e0 = (x - z[0]) * isig
    if kind == 0:
        xr = (q0 - baseline) * iz
        e1 = (xr - z[1]) * isig
        e2 = (y - z[2]) * isig
        nrm = np.sqrt(e0 * e0 + e1 * e1 + e2 * e2)
    else:
        e1 = (y - z[1]) * isig
        xr, e2 = 0.0, 0.0
        nrm = np.sqrt(e0 * e0 + e1 * e1)
    w = 1.0 if nrm <= huber_k else huber_k / nrm
    s = iz * isig
    # rows of dh/dq (whitened), then M = rows Rbs^T
    A[0, 0], A[0, 1], A[0, 2] = s, 0.0, -x * s
    if kind == 0:
        A[1, 0], A[1, 1], A[1, 2] = s, 0.0, -xr * s
        A[2, 0], A[2, 1], A[2, 2] = 0.0, s, -y * s
        ee = (e0, e1, e2)
    else:
        A[1, 0], A[1, 1], A[1, 2] = 0.0, s, -y * s
        A[2, 0], A[2, 1], A[2, 2] = 0.0, 0.0, 0.0
        ee = (e0, e1, 0.0)
    for r in range(3):
        for c in range(3):
            M[r, c] = A[r, 0] * Rbs[c, 0] + A[r, 1] * Rbs[c, 1] + A[r, 2] * Rbs[c, 2]
    for a in range(3):
        u[a] = w * (M[0, a] * ee[0] + M[1, a] * ee[1] + M[2, a] * ee[2])
        for c in range(a, 3):
            v = w * (M[0, a] * M[0, c] + M[1, a] * M[1, c] + M[2, a] * M[2, c])
            Q[a, c] = v
            Q[c, a] = v
    return True


@numba.njit(cache=True, nogil=True, error_model="numpy", fastmath=True)
def visual_normal_equations(Rs, ts, Rbs, tbs, baseline, P, lm_on, prior_H, prior_g, prior_P, obs_state, obs_lm,
                            obs_kind, obs_z, obs_on, sigma, huber_k, n_states, H, g, Hll_inv, gl, Hpl):
    """Adds the visual factors' normal equations, landmarks eliminated, to ``H`` (15S x 15S) and ``g``
    (15S); keeps what back-substitution needs: ``Hll_inv`` (L, 3, 3), ``gl`` (L, 3), ``Hpl`` (O, 6, 3).

    ``Rs``, ``ts`` (S, 3, 3), (S, 3): body -> world of the state slots; ``Rbs``, ``tbs`` (2, 3, 3),
    (2, 3): cam0 / cam1 in the body; ``P`` (L, 3) landmarks, ``lm_on`` (L,) the ones in the system;
    each landmark's prior, a linear factor (``prior_H`` (L, 3, 3) information, ``prior_g`` (L, 3)
    gradient at ``prior_P`` (L, 3); zero where none): its gradient at ``P`` is ``prior_g + prior_H
    (P - prior_P)``; observation ``o``: state
    slot ``obs_state[o]``, landmark ``obs_lm[o]``, ``obs_kind[o]`` 0 stereo / 1 mono cam0 / 2 mono
    cam1, measurement ``obs_z[o]`` (uL, uR, v | u, v, -), used where ``obs_on[o]``. Returns the
    number of observations that contributed (in front of their camera)."""
    L = P.shape[0]
    O = obs_state.shape[0]
    Hll = np.zeros((L, 3, 3))
    for i in range(L):
        for a in range(3):
            gl[i, a] = 0.0
    Q, K, W = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
    S1, S2 = np.empty((3, 3)), np.empty((3, 3))
    u, bb = np.empty(3), np.empty(3)
    isig = 1.0 / sigma
    used = 0
    # per-landmark observation lists (CSR)
    cnt = np.zeros(L + 1, np.int64)
    for o in range(O):
        if obs_on[o] and lm_on[obs_lm[o]]:
            cnt[obs_lm[o] + 1] += 1
    for i in range(L):
        cnt[i + 1] += cnt[i]
    order = np.empty(cnt[L], np.int64)
    fill = cnt[:L].copy()
    for o in range(O):
        for a in range(6):
            for c in range(3):
                Hpl[o, a, c] = 0.0
        if not (obs_on[o] and lm_on[obs_lm[o]]):
            continue
        li, s = obs_lm[o], obs_state[o]
        order[fill[li]] = o
        fill[li] += 1
        cam = 0 if obs_kind[o] != 2 else 1
        R = Rs[s]
        if not _obs_terms(R, ts[s], Rbs[cam], tbs[cam], baseline, P[li], obs_kind[o], obs_z[o], isig, huber_k,
                          Q, u, bb, S1, S2):
            continue
        used += 1
        b0, b1, b2 = bb[0], bb[1], bb[2]
        base = STATE_DIM * s
        # W = Q [b]x (columns of [b]x: (0, b2, -b1), (-b2, 0, b0), (b1, -b0, 0))
        for i in range(3):
            W[i, 0] = Q[i, 1] * b2 - Q[i, 2] * b1
            W[i, 1] = -Q[i, 0] * b2 + Q[i, 2] * b0
            W[i, 2] = Q[i, 0] * b1 - Q[i, 1] * b0
        for j in range(3):
            # H_rr = [b]x^T Q [b]x = -(b x W[:, j]);  H_rt = [b]x^T (-Q) = b x Q[:, j]; H_tt = Q
            w0, w1, w2 = W[0, j], W[1, j], W[2, j]
            H[base + 0, base + j] -= b1 * w2 - b2 * w1
            H[base + 1, base + j] -= b2 * w0 - b0 * w2
            H[base + 2, base + j] -= b0 * w1 - b1 * w0
            q0, q1, q2 = Q[0, j], Q[1, j], Q[2, j]
            r0, r1, r2 = b1 * q2 - b2 * q1, b2 * q0 - b0 * q2, b0 * q1 - b1 * q0
            H[base + 0, base + 3 + j] += r0
            H[base + 1, base + 3 + j] += r1
            H[base + 2, base + 3 + j] += r2
            H[base + 3 + j, base + 0] += r0
            H[base + 3 + j, base + 1] += r1
            H[base + 3 + j, base + 2] += r2
            for i in range(3):
                H[base + 3 + i, base + 3 + j] += Q[i, j]
        # g_r = [b]x^T u = u x b, g_t = -u
        g[base + 0] += u[1] * b2 - u[2] * b1
        g[base + 1] += u[2] * b0 - u[0] * b2
        g[base + 2] += u[0] * b1 - u[1] * b0
        g[base + 3] -= u[0]
        g[base + 4] -= u[1]
        g[base + 5] -= u[2]
        # K = Q R^T; Hpl = [[b]x^T K; -K]; Hll += R K; gl += R u
        for i in range(3):
            for j in range(3):
                K[i, j] = Q[i, 0] * R[j, 0] + Q[i, 1] * R[j, 1] + Q[i, 2] * R[j, 2]
        for j in range(3):
            k0, k1, k2 = K[0, j], K[1, j], K[2, j]
            Hpl[o, 0, j] = k1 * b2 - k2 * b1
            Hpl[o, 1, j] = k2 * b0 - k0 * b2
            Hpl[o, 2, j] = k0 * b1 - k1 * b0
            Hpl[o, 3, j] = -k0
            Hpl[o, 4, j] = -k1
            Hpl[o, 5, j] = -k2
        for i in range(3):
            gl[li, i] += R[i, 0] * u[0] + R[i, 1] * u[1] + R[i, 2] * u[2]
            for j in range(3):
                Hll[li, i, j] += R[i, 0] * K[0, j] + R[i, 1] * K[1, j] + R[i, 2] * K[2, j]
    # landmark priors, then eliminate each landmark
    T1 = np.zeros((6, 3))
    T2 = np.zeros((6, 6))
    for li in range(L):
        if not lm_on[li]:
            continue
        for a in range(3):
            ga = prior_g[li, a]
            for c in range(3):
                Hll[li, a, c] += prior_H[li, a, c]
                ga += prior_H[li, a, c] * (P[li, c] - prior_P[li, c])
            gl[li, a] += ga
        A = Hll[li]
        Ai = Hll_inv[li]
        # inverse of the 3x3 block; where it is (nearly) singular, e.g. a single mono observation
        # without a prior (its depth free), the pseudo-inverse: the unobserved direction gives the
        # poses no information and the landmark does not move along it
        c00 = A[1, 1] * A[2, 2] - A[1, 2] * A[2, 1]
        c01 = A[1, 2] * A[2, 0] - A[1, 0] * A[2, 2]
        c02 = A[1, 0] * A[2, 1] - A[1, 1] * A[2, 0]
        det = A[0, 0] * c00 + A[0, 1] * c01 + A[0, 2] * c02
        tr = A[0, 0] + A[1, 1] + A[2, 2]
        if tr <= 0.0:
            for a in range(3):
                for c in range(3):
                    Ai[a, c] = 0.0
            continue
        if det > 1e-9 * tr * tr * tr:
            idet = 1.0 / det
            Ai[0, 0], Ai[0, 1], Ai[0, 2] = c00 * idet, (A[0, 2] * A[2, 1] - A[0, 1] * A[2, 2]) * idet, \
                (A[0, 1] * A[1, 2] - A[0, 2] * A[1, 1]) * idet
            Ai[1, 0], Ai[1, 1], Ai[1, 2] = c01 * idet, (A[0, 0] * A[2, 2] - A[0, 2] * A[2, 0]) * idet, \
                (A[0, 2] * A[1, 0] - A[0, 0] * A[1, 2]) * idet
            Ai[2, 0], Ai[2, 1], Ai[2, 2] = c02 * idet, (A[0, 1] * A[2, 0] - A[0, 0] * A[2, 1]) * idet, \
                (A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]) * idet
        else:
            w, U = np.linalg.eigh(A)
            for a in range(3):
                for c in range(3):
                    acc = 0.0
                    for m in range(3):
                        if w[m] > 1e-9 * w[2]:
                            acc += U[a, m] * U[c, m] / w[m]
                    Ai[a, c] = acc
        # Schur complement: H_pp -= Hpl_a Ai Hpl_b^T, g_p -= Hpl_a Ai gl
        for ia in range(cnt[li], cnt[li + 1]):
            oa = order[ia]
            sa = STATE_DIM * obs_state[oa]
            for a in range(6):
                for c in range(3):
                    T1[a, c] = Hpl[oa, a, 0] * Ai[0, c] + Hpl[oa, a, 1] * Ai[1, c] + Hpl[oa, a, 2] * Ai[2, c]
            for a in range(6):
                g[sa + a] -= T1[a, 0] * gl[li, 0] + T1[a, 1] * gl[li, 1] + T1[a, 2] * gl[li, 2]
            for ib in range(ia, cnt[li + 1]):
                ob = order[ib]
                sb = STATE_DIM * obs_state[ob]
                for a in range(6):
                    for b in range(6):
                        T2[a, b] = T1[a, 0] * Hpl[ob, b, 0] + T1[a, 1] * Hpl[ob, b, 1] + T1[a, 2] * Hpl[ob, b, 2]
                for a in range(6):
                    for b in range(6):
                        H[sa + a, sb + b] -= T2[a, b]
                if ib != ia:            # the transposed block
                    for a in range(6):
                        for b in range(6):
                            H[sb + b, sa + a] -= T2[a, b]
    return used


@numba.njit(cache=True, nogil=True, error_model="numpy")
def landmark_steps(d, Hll_inv, gl, Hpl, obs_state, obs_lm, obs_on, lm_on, dP):
    """Back-substitution: ``dP[l] = -Hll_inv[l] (gl[l] + sum_o Hpl[o]^T d[pose of o])`` for the
    landmarks in the system (``lm_on``), from the states' step ``d``."""
    L = dP.shape[0]
    r = gl.copy()
    for o in range(obs_state.shape[0]):
        li = obs_lm[o]
        if not (obs_on[o] and lm_on[li]):
            continue
        s = STATE_DIM * obs_state[o]
        for c in range(3):
            acc = 0.0
            for a in range(6):
                acc += Hpl[o, a, c] * d[s + a]
            r[li, c] += acc
    for li in range(L):
        for c in range(3):
            dP[li, c] = 0.0
            if lm_on[li]:
                dP[li, c] = -(Hll_inv[li, c, 0] * r[li, 0] + Hll_inv[li, c, 1] * r[li, 1] + Hll_inv[li, c, 2] * r[li, 2])


@numba.njit(cache=True, nogil=True, error_model="numpy")
def pose_local(R0, t0, R1, t1, out) -> None:
    """``Pose3(R0, t0).localCoordinates(Pose3(R1, t1))`` (gtsam's chart: ``Logmap(T0^-1 T1)``,
    rotation first) into ``out`` (6,)."""
    R = np.empty((3, 3))
    t = np.empty(3)
    for i in range(3):
        for j in range(3):
            R[i, j] = R0[0, i] * R1[0, j] + R0[1, i] * R1[1, j] + R0[2, i] * R1[2, j]
        t[i] = R0[0, i] * (t1[0] - t0[0]) + R0[1, i] * (t1[1] - t0[1]) + R0[2, i] * (t1[2] - t0[2])
    c = 0.5 * (R[0, 0] + R[1, 1] + R[2, 2] - 1.0)
    c = min(1.0, max(-1.0, c))
    th = np.arccos(c)
    v0, v1, v2 = R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]
    if th < 1e-5:
        k = 0.5 + th * th / 12.0                     # th / (2 sin th) near 0
        w0, w1, w2 = k * v0, k * v1, k * v2
    elif th > np.pi - 1e-5:
        # near pi: the axis from the largest diagonal element of (R + I) / 2
        B = 0.5 * (R + np.eye(3))
        i = 0 if B[0, 0] >= B[1, 1] and B[0, 0] >= B[2, 2] else (1 if B[1, 1] >= B[2, 2] else 2)
        a = B[:, i] / np.sqrt(max(B[i, i], 1e-300))
        n = np.sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2])
        w0, w1, w2 = th * a[0] / n, th * a[1] / n, th * a[2] / n
        if w0 * v0 + w1 * v1 + w2 * v2 < 0.0:
            w0, w1, w2 = -w0, -w1, -w2
    else:
        k = th / (2.0 * np.sin(th))
        w0, w1, w2 = k * v0, k * v1, k * v2
    out[0], out[1], out[2] = w0, w1, w2
    n = np.sqrt(w0 * w0 + w1 * w1 + w2 * w2)
    if n < 1e-10:
        out[3], out[4], out[5] = t[0], t[1], t[2]
        return
    # u = V^-1 t: t - (n/2) W t + (1 - n / (2 tan(n/2))) W W t, W = [w / n]x
    a0, a1, a2 = w0 / n, w1 / n, w2 / n
    Wt0 = a1 * t[2] - a2 * t[1]
    Wt1 = a2 * t[0] - a0 * t[2]
    Wt2 = a0 * t[1] - a1 * t[0]
    WWt0 = a1 * Wt2 - a2 * Wt1
    WWt1 = a2 * Wt0 - a0 * Wt2
    WWt2 = a0 * Wt1 - a1 * Wt0
    f = 1.0 - n / (2.0 * np.tan(0.5 * n))
    out[3] = t[0] - 0.5 * n * Wt0 + f * WWt0
    out[4] = t[1] - 0.5 * n * Wt1 + f * WWt1
    out[5] = t[2] - 0.5 * n * Wt2 + f * WWt2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def states_local(slots, R0, t0, v0, b0, Rs, ts, vs, bs, out) -> None:
    """Local coordinates (15 per state: pose, velocity, bias) of the current states ``slots`` at a
    prior's linearisation point (``R0`` ... ``b0``, one row per prior slot) into ``out``."""
    d = np.empty(6)
    for k in range(slots.shape[0]):
        s = slots[k]
        pose_local(R0[k], t0[k], Rs[s], ts[s], d)
        for j in range(6):
            out[STATE_DIM * k + j] = d[j]
        for j in range(3):
            out[STATE_DIM * k + 6 + j] = vs[s, j] - v0[k, j]
        for j in range(6):
            out[STATE_DIM * k + 9 + j] = bs[s, j] - b0[k, j]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def so3_exp(w0, w1, w2, E) -> None:
    """``E[:] =`` Exp([w0, w1, w2]) (Rodrigues: ``I + a [w]x + b [w]x^2``; first order below 1e-10 rad), as
    gtsam's ``Rot3::Expmap`` to rounding. The one rotation exponential of the backend's compiled code."""
    th2 = w0 * w0 + w1 * w1 + w2 * w2
    if th2 < 1e-20:
        E[0, 0], E[0, 1], E[0, 2] = 1.0, -w2, w1
        E[1, 0], E[1, 1], E[1, 2] = w2, 1.0, -w0
        E[2, 0], E[2, 1], E[2, 2] = -w1, w0, 1.0
        return
    th = np.sqrt(th2)
    a, b = np.sin(th) / th, (1.0 - np.cos(th)) / th2
    E[0, 0] = 1.0 - b * (w1 * w1 + w2 * w2)
    E[1, 1] = 1.0 - b * (w0 * w0 + w2 * w2)
    E[2, 2] = 1.0 - b * (w0 * w0 + w1 * w1)
    E[0, 1], E[1, 0] = -a * w2 + b * w0 * w1, a * w2 + b * w0 * w1
    E[0, 2], E[2, 0] = a * w1 + b * w0 * w2, -a * w1 + b * w0 * w2
    E[1, 2], E[2, 1] = -a * w0 + b * w1 * w2, a * w0 + b * w1 * w2


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _expmap_retract(R, t, xi):
    """``Pose3(R, t).retract(xi)`` (gtsam's chart: ``T Expmap(xi)``), in place."""
    w0, w1, w2 = xi[0], xi[1], xi[2]
    v0, v1, v2 = xi[3], xi[4], xi[5]
    th2 = w0 * w0 + w1 * w1 + w2 * w2
    E = np.empty((3, 3))
    so3_exp(w0, w1, w2, E)
    if th2 < 1e-20:
        # t = v + w x v / 2
        u0 = v0 + 0.5 * (w1 * v2 - w2 * v1)
        u1 = v1 + 0.5 * (w2 * v0 - w0 * v2)
        u2 = v2 + 0.5 * (w0 * v1 - w1 * v0)
    else:
        # t = (w x v - E (w x v) + w (w . v)) / th^2
        c0, c1, c2 = w1 * v2 - w2 * v1, w2 * v0 - w0 * v2, w0 * v1 - w1 * v0
        d = w0 * v0 + w1 * v1 + w2 * v2
        u0 = (c0 - (E[0, 0] * c0 + E[0, 1] * c1 + E[0, 2] * c2) + w0 * d) / th2
        u1 = (c1 - (E[1, 0] * c0 + E[1, 1] * c1 + E[1, 2] * c2) + w1 * d) / th2
        u2 = (c2 - (E[2, 0] * c0 + E[2, 1] * c1 + E[2, 2] * c2) + w2 * d) / th2
    Rn = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            Rn[i, j] = R[i, 0] * E[0, j] + R[i, 1] * E[1, j] + R[i, 2] * E[2, j]
    for i in range(3):
        t[i] += R[i, 0] * u0 + R[i, 1] * u1 + R[i, 2] * u2
    for i in range(3):
        for j in range(3):
            R[i, j] = Rn[i, j]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def retract_states(Rs, ts, vs, bs, d) -> None:
    """The states' step ``d`` (15 per slot) applied in place: pose by ``Pose3.retract``, velocity
    and bias by addition."""
    for s in range(Rs.shape[0]):
        b = STATE_DIM * s
        _expmap_retract(Rs[s], ts[s], d[b:b + 6])
        for j in range(3):
            vs[s, j] += d[b + 6 + j]
        for j in range(6):
            bs[s, j] += d[b + 9 + j]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def factor_normal_equations(s0, two, used_rows, Hf, cf, linR, lint, linv, linb, Rs, ts, vs, bs, thresh, on, H, g,
                            stale) -> None:
    """The inertial and prior factors from their cached linearisations: factor ``f`` spans the
    state slots ``s0[f]`` (and ``s0[f] + 1`` where ``two[f]``), its rows ``used_rows[f]`` (30: 15 per
    slot) of ``Hf[f]`` (30 x 30) and ``cf[f]`` (``A^T b``) taken at ``lin*[f]`` (2 slots). Where
    every variable it touches lies within ``thresh`` (local coordinates) of that point, adds
    ``Hf`` and the gradient ``Hf d0 - cf`` (``d0``: the estimate's local coordinates there; gtsam's
    ``LinearContainerFactor``, iSAM2's relinearisation threshold); else marks it ``stale`` for
    the caller to linearise anew. Only factors with ``on[f]``."""
    d0 = np.zeros(2 * STATE_DIM)
    dp = np.empty(6)
    for f in range(s0.shape[0]):
        stale[f] = False
        if not on[f]:
            continue
        k = 2 if two[f] else 1
        for q in range(k):
            s = s0[f] + q
            pose_local(linR[f, q], lint[f, q], Rs[s], ts[s], dp)
            o = STATE_DIM * q
            for j in range(6):
                d0[o + j] = dp[j]
            for j in range(3):
                d0[o + 6 + j] = vs[s, j] - linv[f, q, j]
            for j in range(6):
                d0[o + 9 + j] = bs[s, j] - linb[f, q, j]
        # variables: (start, size) of pose, velocity, bias per slot
        for q in range(k):
            for (a, n) in ((0, 6), (6, 3), (9, 6)):
                r0 = STATE_DIM * q + a
                if used_rows[f, r0]:
                    for j in range(n):
                        if abs(d0[r0 + j]) > thresh:
                            stale[f] = True
        if stale[f]:
            continue
        n = STATE_DIM * k
        base = STATE_DIM * s0[f]
        for i in range(n):
            acc = -cf[f, i]
            for j in range(n):
                acc += Hf[f, i, j] * d0[j]
                H[base + i, base + j] += Hf[f, i, j]
            g[base + i] += acc


def visual_normal_equations_reference(Rs, ts, Rbs, tbs, baseline, P, lm_on, prior_H, prior_g, prior_P, obs_state,
                                      obs_lm, obs_kind, obs_z, obs_on, sigma, huber_k, n_states):
    """The same as :func:`visual_normal_equations` in NumPy, the landmarks kept: the full normal
    equations over [states (15S), landmarks (3L)] -> (H, g). The tests eliminate the landmarks
    with a dense solve and compare."""
    S, L = n_states, P.shape[0]
    N = STATE_DIM * S + 3 * L
    H, g = np.zeros((N, N)), np.zeros(N)
    for o in range(len(obs_state)):
        li, s, kind = int(obs_lm[o]), int(obs_state[o]), int(obs_kind[o])
        if not (obs_on[o] and lm_on[li]):
            continue
        cam = 1 if kind == 2 else 0
        R, t = Rs[s], ts[s]
        pb = R.T @ (P[li] - t)
        q = Rbs[cam].T @ (pb - tbs[cam])
        if q[2] <= 0:
            continue
        if kind == 0:
            h = np.array([q[0] / q[2], (q[0] - baseline) / q[2], q[1] / q[2]])
            dh = np.array([[1 / q[2], 0, -q[0] / q[2] ** 2], [1 / q[2], 0, -(q[0] - baseline) / q[2] ** 2],
                           [0, 1 / q[2], -q[1] / q[2] ** 2]])
        else:
            h = q[:2] / q[2]
            dh = np.array([[1 / q[2], 0, -q[0] / q[2] ** 2], [0, 1 / q[2], -q[1] / q[2] ** 2]])
        e = (h - obs_z[o][:len(h)]) / sigma
        skew = np.array([[0, -pb[2], pb[1]], [pb[2], 0, -pb[0]], [-pb[1], pb[0], 0]])
        Jp = dh @ Rbs[cam].T @ np.hstack([skew, -np.eye(3)]) / sigma
        Jl = dh @ Rbs[cam].T @ R.T / sigma
        nrm = np.linalg.norm(e)
        w = 1.0 if nrm <= huber_k else huber_k / nrm
        J = np.zeros((len(h), N))
        J[:, STATE_DIM * s:STATE_DIM * s + 6] = Jp
        J[:, STATE_DIM * S + 3 * li:STATE_DIM * S + 3 * li + 3] = Jl
        H += w * J.T @ J
        g += w * J.T @ e
    for li in range(L):
        if lm_on[li]:
            k = STATE_DIM * S + 3 * li
            H[k:k + 3, k:k + 3] += prior_H[li]
            g[k:k + 3] += prior_g[li] + prior_H[li] @ (P[li] - prior_P[li])
    return H, g


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernels now (at the smoother's construction)."""
    Rs, ts = np.eye(3)[None].copy(), np.zeros((1, 3))
    Rbs, tbs = np.stack([np.eye(3), np.eye(3)]), np.zeros((2, 3))
    P = np.array([[0.0, 0.0, 2.0]])
    on = np.ones(1, np.bool_)
    H, g = np.zeros((STATE_DIM, STATE_DIM)), np.zeros(STATE_DIM)
    Hi, gl, Hpl = np.zeros((1, 3, 3)), np.zeros((1, 3)), np.zeros((1, 6, 3))
    z = np.zeros((1, 3))
    zi = np.zeros(1, np.int64)
    visual_normal_equations(Rs, ts, Rbs, tbs, 0.1, P, on, Hi, gl, P, zi, zi, zi, z, on, 1.0, 1.345, 1,
                            H, g, Hi.copy(), gl.copy(), Hpl)
    landmark_steps(g, Hi, gl, Hpl, zi, zi, on, on, np.zeros((1, 3)))
    states_local(zi, Rs, ts, ts, g[None, :6], Rs, ts, ts, g[None, :6], np.zeros(STATE_DIM))
    pose_local(Rs[0], ts[0], Rs[0], ts[0], np.zeros(6))
    retract_states(Rs, ts, ts.copy(), np.zeros((1, 6)), np.zeros(STATE_DIM))
    z30 = np.zeros((1, 2 * STATE_DIM))
    factor_normal_equations(zi, ~on, z30 > 0, np.zeros((1, 30, 30)), z30, np.stack((Rs, Rs), axis=1),
                            np.stack((ts, ts), axis=1), np.zeros((1, 2, 3)), np.zeros((1, 2, 6)), Rs, ts, ts.copy(),
                            np.zeros((1, 6)), 0.01, on, H, g, on.copy())
