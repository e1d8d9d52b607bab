"""`vilib-ros eval`: APE/RPE through evo against a known trajectory with injected errors.

The reference is the injected perturbation itself (known rigid/similarity transform and
Gaussian position noise), never the evaluation's own output.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("evo")
from scipy.spatial.transform import Rotation  # noqa: E402

from vilib_ros.evaluation import evaluate, load_trajectory  # noqa: E402


def _gt(n=1500, dt=0.02):
    t = 1_403_715_000.0 + np.arange(n) * dt
    s = np.arange(n) * dt
    p = np.stack([3 * np.sin(0.2 * s), 2 * np.sin(0.13 * s + 0.5), 1 + 0.3 * np.sin(0.4 * s)], 1)
    rot = Rotation.from_euler("zyx", np.stack([0.5 * s, 0.1 * np.sin(s), 0.05 * np.cos(0.7 * s)], 1))
    return t, p, rot


def _write_tum(path, t, p, rot):
    q = rot.as_quat()
    with open(path, "w") as f:
        for ti, pi, qi in zip(t, p, q):
            f.write(f"{ti:.6f} " + " ".join(f"{v:.9f}" for v in (*pi, *qi)) + "\n")
    return path


def _perturb(p, rot, scale=1.0, sigma=0.0, seed=0):
    """Apply a known similarity transform (R, t, s) and position noise."""
    rng = np.random.default_rng(seed)
    Ra = Rotation.from_euler("zyx", [0.7, -0.2, 0.3])
    ta = np.array([5.0, -2.0, 1.5])
    p2 = scale * Ra.apply(p) + ta + rng.normal(0, sigma, p.shape)
    return p2, Ra * rot


class TestApeSe3:
    def test_rigid_offset_and_noise(self, tmp_path):
        t, p, rot = _gt()
        sigma = 0.01
        p2, r2 = _perturb(p, rot, sigma=sigma)
        gt = _write_tum(tmp_path / "gt.txt", t, p, rot)
        est = _write_tum(tmp_path / "est.txt", t, p2, r2)
        res = evaluate(est, gt, out_dir=tmp_path / "out")
        expected = np.sqrt(3) * sigma     # rmse of a 3D isotropic Gaussian
        assert res["matched_poses"] == len(t)
        assert abs(res["ape_m"]["rmse"] - expected) < 0.1 * expected
        assert (tmp_path / "out" / "eval.png").stat().st_size > 10_000
        assert json.loads((tmp_path / "out" / "eval.json").read_text())["alignment"] == "se3"

    def test_alignment_recovers_the_injected_transform(self, tmp_path):
        """The project's Umeyama alignment recovers the injected rotation and translation exactly, and
        ``evaluate`` reports ~0 APE for an offset of metres (it aligns before measuring)."""
        from vilib_ros.evaluation import ate_rmse, umeyama

        t, p, rot = _gt()
        p2, r2 = _perturb(p, rot)                     # known rigid transform, no noise
        raw = np.sqrt(np.mean(np.sum((p2 - p) ** 2, 1)))
        assert raw > 3.0                              # unaligned, the trajectories are metres apart
        R, tr, s = umeyama(p, p2)
        Ra = Rotation.from_euler("zyx", [0.7, -0.2, 0.3]).as_matrix()
        np.testing.assert_allclose(R, Ra, atol=1e-9)
        np.testing.assert_allclose(tr, [5.0, -2.0, 1.5], atol=1e-9)
        assert s == 1.0
        assert ate_rmse(p2, p) < 1e-9
        gt = _write_tum(tmp_path / "gt.txt", t, p, rot)
        est = _write_tum(tmp_path / "est.txt", t, p2, r2)
        assert evaluate(est, gt)["ape_m"]["rmse"] < 1e-6 * raw


class TestUmeyamaInput:
    def test_empty_trajectory_is_a_clear_error(self):
        """Regression: an empty trajectory (a run whose backend never initialised) raised NumPy's
        "SVD did not converge" from ate_rmse."""
        from vilib_ros.evaluation import ate_rmse

        with pytest.raises(ValueError, match="empty trajectory"):
            ate_rmse(np.zeros((0, 3)), np.zeros((0, 3)))

    def test_mismatched_arrays_are_a_clear_error(self):
        from vilib_ros.evaluation import umeyama

        with pytest.raises(ValueError, match="corresponding positions"):
            umeyama(np.zeros((5, 3)), np.zeros((4, 3)))


class TestApeSim3:
    def test_scale_recovered(self, tmp_path):
        t, p, rot = _gt()
        sigma = 0.01
        p2, r2 = _perturb(p, rot, scale=2.0, sigma=sigma)
        gt = _write_tum(tmp_path / "gt.txt", t, p, rot)
        est = _write_tum(tmp_path / "est.txt", t, p2, r2)
        res = evaluate(est, gt, correct_scale=True)
        assert abs(res["scale"] - 0.5) < 0.01
        # the noise is scaled by the alignment too (by 1/2)
        assert abs(res["ape_m"]["rmse"] - np.sqrt(3) * sigma / 2) < 0.15 * np.sqrt(3) * sigma / 2
        res_se3 = evaluate(est, gt, correct_scale=False)
        assert res_se3["ape_m"]["rmse"] > 0.5


class TestRpe:
    def test_rpe_per_metre_matches_noise(self, tmp_path):
        t, p, rot = _gt()
        sigma = 0.01
        p2, r2 = _perturb(p, rot, sigma=sigma, seed=3)
        gt = _write_tum(tmp_path / "gt.txt", t, p, rot)
        est = _write_tum(tmp_path / "est.txt", t, p2, r2)
        res = evaluate(est, gt, rpe_delta_m=1.0)
        rpe = res["rpe_m_per_1m"]
        # relative translation error = R_i^T (n_j - n_i): difference of two independent 3D noises
        expected = np.sqrt(6) * sigma
        assert abs(rpe["rmse"] - expected) < 0.2 * expected


class TestEurocCsv:
    def test_csv_ground_truth(self, tmp_path):
        t, p, rot = _gt(500)
        q = rot.as_quat()
        csv = tmp_path / "mav0" / "state_groundtruth_estimate0" / "data.csv"
        csv.parent.mkdir(parents=True)
        with open(csv, "w") as f:
            f.write("#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], q_RS_z []\n")
            for ti, pi, qi in zip(t, p, q):
                f.write(f"{int(round(ti * 1e9))},{pi[0]},{pi[1]},{pi[2]},{qi[3]},{qi[0]},{qi[1]},{qi[2]}\n")
        est = _write_tum(tmp_path / "est.txt", t, p, rot)
        traj = load_trajectory(tmp_path)      # dataset folder -> its CSV
        assert traj.num_poses == 500
        np.testing.assert_allclose(traj.positions_xyz, p, atol=1e-9)
        res = evaluate(est, tmp_path)
        assert res["ape_m"]["rmse"] < 1e-5

    def test_real_euroc_groundtruth(self, euroc_path, tmp_path):
        gt = euroc_path / "V101_groundtruth_tum.txt"
        if not gt.is_file():
            pytest.skip("no V101_groundtruth_tum.txt in the EuRoC folder")
        traj = load_trajectory(gt)
        p2, r2 = _perturb(traj.positions_xyz, Rotation.from_quat(traj.orientations_quat_wxyz[:, [1, 2, 3, 0]]),
                          sigma=0.02)
        est = _write_tum(tmp_path / "est.txt", traj.timestamps, p2, r2)
        res = evaluate(est, gt)
        assert abs(res["ape_m"]["rmse"] - np.sqrt(3) * 0.02) < 0.1 * np.sqrt(3) * 0.02


class TestCli:
    def test_cli_table_and_plot(self, tmp_path, capsys):
        from vilib_ros.cli import main

        t, p, rot = _gt()
        p2, r2 = _perturb(p, rot, sigma=0.01)
        gt = _write_tum(tmp_path / "gt.txt", t, p, rot)
        est = _write_tum(tmp_path / "est.txt", t, p2, r2)
        assert main(["eval", str(est), str(gt), "--out", str(tmp_path / "o")]) == 0
        out = capsys.readouterr().out
        assert "APE translation" in out and "RPE translation" in out
        assert (tmp_path / "o" / "eval.md").is_file() and (tmp_path / "o" / "eval.png").is_file()

    def test_bad_input_is_clear_error(self, tmp_path, capsys):
        from vilib_ros.cli import main

        bad = tmp_path / "bad.txt"
        bad.write_text("1 2 3\n")
        assert main(["eval", str(bad), str(bad)]) == 2
        err = capsys.readouterr().err
        assert "vilib-ros eval: error:" in err and "8 columns" in err and "Traceback" not in err
        assert main(["eval", str(tmp_path / "missing.txt"), str(bad)]) == 2
