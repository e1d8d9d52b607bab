"""``vilib-ros eval EST GT``: absolute and relative trajectory error through ``evo``.

* APE (translation part) after SE(3) Umeyama alignment, or Sim(3) with ``--correct-scale``.
* RPE (translation part) per metre travelled (``--rpe-delta`` metres, default 1).
* EST and GT may each be a TUM file (``t x y z qx qy qz qw``), a EuRoC ground-truth CSV
  (``state_groundtruth_estimate0/data.csv``: ns stamps, p, q_wxyz) or an ASL dataset folder
  (its ``mav0/state_groundtruth_estimate0/data.csv`` or a ``*groundtruth*.txt`` TUM file).
* Writes ``--out DIR``: ``eval.png`` (top view of both trajectories, APE over time),
  ``eval.json`` and ``eval.md``; always prints the Markdown table.
* Without evo (the ``backend`` extra) it says so in one line: ``vilib-ros eval: error: trajectory
  evaluation needs evo: ...``, exit 2.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from vilib_ros.dependencies import require_evaluation

log = logging.getLogger(__name__)


def umeyama(src: np.ndarray, dst: np.ndarray, scale: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """(R, t, s) minimising |s R src + t - dst| over corresponding points (N, 3) (Umeyama;
    s = 1 unless ``scale``). A light NumPy alignment for reports; ``evaluate`` uses evo. An empty or
    mismatched pair is a ValueError naming the shapes (an empty trajectory: a run whose backend never
    initialised)."""
    src, dst = np.asarray(src, float), np.asarray(dst, float)
    if src.ndim != 2 or src.shape[1:] != (3,) or src.shape != dst.shape:
        raise ValueError(f"umeyama: need two (N, 3) arrays of corresponding positions, got {src.shape} and {dst.shape}")
    if len(src) == 0:
        raise ValueError("umeyama: empty trajectory (no corresponding positions to align)")
    mu_s, mu_d = src.mean(0), dst.mean(0)
    U, S, Vt = np.linalg.svd((src - mu_s).T @ (dst - mu_d) / len(src))
    D = np.eye(3)
    D[2, 2] = np.sign(np.linalg.det(Vt.T @ U.T)) or 1.0
    R = Vt.T @ D @ U.T
    s = float(np.trace(np.diag(S) @ D) / ((src - mu_s) ** 2).sum(1).mean()) if scale else 1.0
    return R, mu_d - s * R @ mu_s, s


def ate_rmse(p: np.ndarray, gt: np.ndarray, scale: bool = False) -> float:
    """RMSE of positions ``p`` against corresponding ``gt`` after SE3 (Sim3 with ``scale``) alignment."""
    R, t, s = umeyama(p, gt, scale)
    return float(np.sqrt(np.mean(np.sum((s * p @ R.T + t - gt) ** 2, 1))))


def resolve_trajectory_file(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        cands = [p / "mav0" / "state_groundtruth_estimate0" / "data.csv",
                 p / "state_groundtruth_estimate0" / "data.csv"]
        cands += sorted(p.glob("*groundtruth*.txt")) + sorted(p.glob("*groundtruth*.tum"))
        for c in cands:
            if c.is_file():
                return c
        raise ValueError(f"{p}: no ground truth found (mav0/state_groundtruth_estimate0/data.csv or *groundtruth*.txt)")
    if not p.is_file():
        raise ValueError(f"{p}: no such trajectory file")
    return p


def load_trajectory(path: str | Path):
    """Read a TUM file or a EuRoC CSV into an evo PoseTrajectory3D (timestamps in seconds)."""
    require_evaluation()                # without evo: one line naming it and the extra (a ValueError)
    from evo.tools import file_interface

    p = resolve_trajectory_file(path)
    with open(p) as f:
        head = ""
        for line in f:
            if line.strip() and not line.startswith("#"):
                head = line
                break
    if not head:
        raise ValueError(f"{p}: empty trajectory file")
    if "," in head:
        return file_interface.read_euroc_csv_trajectory(str(p))
    cols = head.split()
    if len(cols) != 8:
        raise ValueError(f"{p}: expected TUM lines with 8 columns (t x y z qx qy qz qw), got {len(cols)}")
    return file_interface.read_tum_trajectory_file(str(p))


def evaluate(est_path, gt_path, correct_scale: bool = False, rpe_delta_m: float = 1.0,
             max_diff: float = 0.02, out_dir: str | Path | None = None, plot: bool = True) -> dict:
    """APE/RPE of EST against GT; returns a dict of statistics (metres). Without evo a
    :class:`vilib_ros.dependencies.MissingDependency` (a ValueError) names it and the extra."""
    import copy

    require_evaluation()
    from evo.core import metrics, sync
    from evo.core.units import Unit

    traj_est = load_trajectory(est_path)
    traj_ref = load_trajectory(gt_path)
    try:
        traj_ref, traj_est = sync.associate_trajectories(traj_ref, traj_est, max_diff=max_diff)
    except sync.SyncException as exc:
        raise ValueError(f"cannot associate EST with GT: {exc}") from exc
    if traj_est.num_poses < 3:
        raise ValueError(f"only {traj_est.num_poses} poses matched within {max_diff} s between EST and GT")
    est_aligned = copy.deepcopy(traj_est)
    R, t, s = est_aligned.align(traj_ref, correct_scale=correct_scale)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((traj_ref, est_aligned))
    ape_stats = ape.get_all_statistics()
    res = {
        "est": str(est_path), "gt": str(gt_path), "alignment": "sim3" if correct_scale else "se3",
        "matched_poses": int(traj_est.num_poses), "scale": float(s),
        "duration_s": float(traj_ref.timestamps[-1] - traj_ref.timestamps[0]),
        "path_length_m": float(traj_ref.path_length),
        "ape_m": {k: float(v) for k, v in ape_stats.items()},
    }
    try:
        rpe = metrics.RPE(metrics.PoseRelation.translation_part, delta=rpe_delta_m, delta_unit=Unit.meters,
                          all_pairs=False)
        rpe.process_data((traj_ref, est_aligned))
        res["rpe_m_per_%gm" % rpe_delta_m] = {k: float(v) for k, v in rpe.get_all_statistics().items()}
    except Exception as exc:  # trajectory shorter than the RPE delta
        log.warning("RPE not computed: %s", exc)
        res["rpe_m_per_%gm" % rpe_delta_m] = None
    res["markdown"] = markdown_table(res)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if plot:
            res["plot"] = str(plot_trajectories(traj_ref, est_aligned, np.asarray(ape.error), out / "eval.png",
                                                res))
        (out / "eval.json").write_text(json.dumps({k: v for k, v in res.items() if k != "markdown"}, indent=2))
        (out / "eval.md").write_text(res["markdown"] + "\n")
    return res


def markdown_table(res: dict) -> str:
    lines = [f"| metric ({res['alignment']} aligned, {res['matched_poses']} poses, "
             f"{res['path_length_m']:.1f} m) | rmse | mean | median | std | max |",
             "|---|---|---|---|---|---|"]
    a = res["ape_m"]
    lines.append(f"| APE translation [m] | {a['rmse']:.4f} | {a['mean']:.4f} | {a['median']:.4f} | "
                 f"{a['std']:.4f} | {a['max']:.4f} |")
    for k, r in res.items():
        if k.startswith("rpe_m_per_"):
            if r is None:
                lines.append(f"| RPE translation [m / {k[10:]}] | n/a | n/a | n/a | n/a | n/a |")
            else:
                lines.append(f"| RPE translation [m / {k[10:]}] | {r['rmse']:.4f} | {r['mean']:.4f} | "
                             f"{r['median']:.4f} | {r['std']:.4f} | {r['max']:.4f} |")
    if res["alignment"] == "sim3":
        lines.append(f"\nSim(3) scale: {res['scale']:.4f}")
    return "\n".join(lines)


def plot_trajectories(traj_ref, traj_est, ape_err, path, res) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(12, 5))
    pr, pe = traj_ref.positions_xyz, traj_est.positions_xyz
    a0.plot(pr[:, 0], pr[:, 1], "k-", lw=1.5, label="ground truth")
    a0.plot(pe[:, 0], pe[:, 1], "r-", lw=1.0, label=f"estimate ({res['alignment']} aligned)")
    a0.set_xlabel("x [m]")
    a0.set_ylabel("y [m]")
    a0.set_aspect("equal", adjustable="datalim")
    a0.set_title("top view")
    a0.legend()
    t = traj_ref.timestamps - traj_ref.timestamps[0]
    a1.plot(t, ape_err, "b-", lw=1.0)
    a1.set_xlabel("time [s]")
    a1.set_ylabel("APE translation [m]")
    a1.set_title(f"APE rmse {res['ape_m']['rmse']:.4f} m")
    a1.grid(True, alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def configure_parser(p) -> None:
    p.add_argument("est", help="estimated trajectory: TUM file or EuRoC CSV")
    p.add_argument("gt", help="ground truth: TUM file, EuRoC data.csv or an ASL dataset folder")
    p.add_argument("--correct-scale", action="store_true", help="Sim(3) alignment (monocular)")
    p.add_argument("--rpe-delta", type=float, default=1.0, help="RPE delta in metres (default 1)")
    p.add_argument("--max-diff", type=float, default=0.02, help="max timestamp difference for association, s")
    p.add_argument("--out", default=None, help="folder for eval.png, eval.json, eval.md")
    p.add_argument("--no-plot", action="store_true")


def run_command(args) -> int:
    """A bad input raises ``ValueError``: ``vilib-ros`` prints ``vilib-ros eval: error: ...``, exit 2."""
    res = evaluate(args.est, args.gt, correct_scale=args.correct_scale, rpe_delta_m=args.rpe_delta,
                   max_diff=args.max_diff, out_dir=args.out, plot=not args.no_plot)
    print(res["markdown"])
    if res.get("plot"):
        print(f"plot: {res['plot']}")
    return 0
