"""``vilib-ros run [DATASET]``: replay a dataset through player, frontend and backend processes.

The same node processes the launch files start (``python -m vilib_ros.nodes.<node>
--ros-args ...``) talk over DDS on this machine only (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``,
a ``ROS_DOMAIN_ID`` picked from this process's id unless ``--domain-id`` is given). A
recorder_node writes every tracks and odometry message to ``recorded.jsonl``; afterwards
this command writes into the output folder (default ``./vilib_ros_output/<name>``):

* ``tracks.mp4`` (cv2.VideoWriter, mp4v) -- or ``tracks_frames/*.png`` + ``tracks.gif`` where
  no mp4 encoder is available -- the images with the received tracks drawn;
* ``trajectory_tum.txt`` (from the backend) and ``groundtruth_tum.txt`` where there is ground truth;
* ``trajectory.png``: the trajectory against ground truth (SE(3)-aligned), when both exist;
* ``timing.json``: per-stage frontend times, latency, backend per-frame time, wall times;
* ``report.md``: a short summary; ``logs/*.log``: each process's output; ``params.yaml``.

Without DATASET a short synthetic stereo-inertial sequence is generated
(:func:`vilib_ros.synthetic.generate_sequence`) and replayed, so ``vilib-ros run`` works
end to end on a fresh machine without a GPU. Ctrl-C or any failure stops every child
cleanly (SIGINT, then SIGTERM, then SIGKILL); a child that dies unexpectedly makes the
command exit non-zero.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from vilib_ros.nodes.processes import NodeProcess, node_argv, ros_env

def configure_parser(p) -> None:
    p.add_argument("dataset", nargs="*", default=None,
                   help="EuRoC ASL folder, ROS 1 .bag or ROS 2 bag folder (default: generate a synthetic sequence); "
                        "several with --offline")
    p.add_argument("--offline", action="store_true",
                   help="player, frontend and backend in one process tree without ROS (vilib_ros.offline); "
                        "several datasets give a summary table")
    p.add_argument("--out", default=None, help="output folder (default ./vilib_ros_output/<name>)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="replay speed, 1.0 = real time; 0 = as fast as the frontend accepts (default)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--duration", type=float, default=10.0, help="length of the generated sequence, s")
    p.add_argument("--max-frames", type=int, default=0, help="replay at most this many frames (0 = all)")
    p.add_argument("--mono", action="store_true", help="use cam0 only even where the dataset is stereo")
    p.add_argument("--no-backend", action="store_true", help="run the backend in record-only mode")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: picked from the pid)")
    p.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0 = never)")
    p.add_argument("--no-video", action="store_true", help="skip the tracks video")


# ---------------------------------------------------------------------------------------------
# children
# ---------------------------------------------------------------------------------------------
def pick_domain_id() -> int:
    # 101..200: away from the default 0 and the small ids people set by hand.
    return 101 + (os.getpid() % 100)


# ---------------------------------------------------------------------------------------------
# output helpers (also used by the tests)
# ---------------------------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict]:
    out = []
    if not Path(path).exists():
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line being written
    return out


def read_tum(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_ns, p (N,3), q_xyzw (N,4)) from a TUM file."""
    rows_t, rows = [], []
    for line in Path(path).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        sec, _, frac = parts[0].partition(".")
        rows_t.append(int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]))
        rows.append([float(v) for v in parts[1:8]])
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return np.asarray(rows_t, dtype=np.int64), a[:, :3], a[:, 3:7]


def write_tum(path: Path, t_ns, p, q) -> None:
    with open(path, "w") as f:
        for ti, pi, qi in zip(np.asarray(t_ns, np.int64), p, q):
            values = " ".join(f"{x:.9f}" for x in (*pi, *qi))
            f.write(f"{ti // 1_000_000_000}.{ti % 1_000_000_000:09d} {values}\n")


def associate(t_a: np.ndarray, t_b: np.ndarray, max_dt_ns: int = 20_000_000) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) with |t_a[i] - t_b[j]| <= max_dt_ns, nearest neighbour in t_b."""
    if len(t_a) == 0 or len(t_b) == 0:
        return np.zeros(0, int), np.zeros(0, int)
    j = np.clip(np.searchsorted(t_b, t_a), 1, len(t_b) - 1)
    j = np.where(np.abs(t_b[j - 1] - t_a) <= np.abs(t_b[j] - t_a), j - 1, j)
    ok = np.abs(t_b[j] - t_a) <= max_dt_ns
    return np.nonzero(ok)[0], j[ok]


def _id_color(i: int) -> tuple[int, int, int]:
    h = (int(i) * 2654435761) & 0xFFFFFF
    return (h & 255, (h >> 8) & 255, (h >> 16) & 255)


def render_tracks_video(ds, tracks: list[dict], out_dir: Path, fps: float) -> tuple[str, Path | None]:
    """Write the tracks overlay: mp4 (mp4v) or PNG frames + GIF. Returns (kind, path)."""
    import cv2

    by_stamp = {r["stamp_ns"]: r for r in tracks}
    stamps = ds.image_stamps(0)
    history: dict[int, list] = {}
    frames = []
    for k, t in enumerate(stamps):
        r = by_stamp.get(int(t))
        if r is None:
            continue
        img = cv2.cvtColor(ds.load_image(0, k), cv2.COLOR_GRAY2BGR)
        for i, u, v in zip(r.get("ids", []), r.get("u", []), r.get("v", [])):
            h = history.setdefault(i, [])
            h.append((u, v))
            del h[:-8]
            col = _id_color(i)
            pts = np.round(np.asarray(h)).astype(np.int32)
            if len(pts) > 1:
                cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, col, 1, cv2.LINE_AA)
            cv2.circle(img, (int(round(u)), int(round(v))), 3, col, 1, cv2.LINE_AA)
        cv2.putText(img, f"{k:05d}  {len(r.get('ids', []))} tracks", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55,
                    (0, 255, 255), 1, cv2.LINE_AA)
        frames.append(img)
    if not frames:
        return "none", None
    h, w = frames[0].shape[:2]
    mp4 = out_dir / "tracks.mp4"
    writer = cv2.VideoWriter(str(mp4), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
    if writer.isOpened():
        for f in frames:
            writer.write(f)
        writer.release()
        if mp4.exists() and mp4.stat().st_size > 1000:
            return "mp4", mp4
    mp4.unlink(missing_ok=True)
    png_dir = out_dir / "tracks_frames"
    png_dir.mkdir(exist_ok=True)
    for k, f in enumerate(frames):
        cv2.imwrite(str(png_dir / f"{k:05d}.png"), f)
    from PIL import Image

    small = [Image.fromarray(cv2.cvtColor(cv2.resize(f, (w // 2, h // 2)), cv2.COLOR_BGR2RGB)) for f in frames]
    gif = out_dir / "tracks.gif"
    small[0].save(gif, save_all=True, append_images=small[1:], duration=int(1000 / fps), loop=0)
    return "gif", gif


def plot_trajectory(est, gt, out_png: Path) -> dict:
    """Plot the estimate (SE(3)-aligned to ground truth where there is one). Returns APE stats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_e, p_e, _ = est
    stats: dict = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    if gt is not None and len(gt[0]):
        t_g, p_g = gt
        ia, ib = associate(t_e, t_g)
        if len(ia) >= 3:
            from vilib_ros.evaluation import umeyama

            R, tr, _ = umeyama(p_e[ia], p_g[ib])
            p_e = p_e @ R.T + tr
            err = np.linalg.norm(p_e[ia] - p_g[ib], axis=1)
            stats = {"ape_rmse_m": float(np.sqrt(np.mean(err ** 2))), "ape_max_m": float(err.max()),
                     "associated": int(len(ia)), "length_m": float(np.sum(np.linalg.norm(np.diff(p_g[ib], axis=0),
                                                                                          axis=1)))}
        lo, hi = t_e[0] if len(t_e) else t_g[0], t_e[-1] if len(t_e) else t_g[-1]
        sel = (t_g >= lo) & (t_g <= hi)
        axes[0].plot(p_g[sel, 0], p_g[sel, 1], "k-", lw=1.5, label="ground truth")
        axes[1].plot((t_g[sel] - lo) * 1e-9, p_g[sel, 2], "k-", lw=1.5, label="ground truth")
    if len(t_e):
        axes[0].plot(p_e[:, 0], p_e[:, 1], "r-", lw=1, label="vilib_ros" + (" (SE3-aligned)" if stats else ""))
        axes[1].plot((t_e - t_e[0]) * 1e-9, p_e[:, 2], "r-", lw=1, label="vilib_ros")
    axes[0].set_xlabel("x [m]")
    axes[0].set_ylabel("y [m]")
    axes[0].axis("equal")
    axes[0].set_title("top view" + (f" - APE RMSE {stats['ape_rmse_m']:.3f} m" if stats else ""))
    axes[1].set_xlabel("t [s]")
    axes[1].set_ylabel("z [m]")
    for a in axes:
        a.grid(True, alpha=0.3)
        a.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return stats


# ---------------------------------------------------------------------------------------------
# the command
# ---------------------------------------------------------------------------------------------
def _wait_for_graph(domain_id: int, need: dict, timeout: float, children) -> bool:
    """Wait until every topic in ``need`` has that many subscribers (frontend on the images,
    recorder and backend on tracks), or a child exits."""
    from vilib_ros.nodes.processes import GraphClient

    client = GraphClient(domain_id, "vilib_ros_run_probe")
    try:
        return client.wait_for_subscribers(need, timeout, children)
    except RuntimeError:
        return False
    finally:
        client.close()


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run_command(args) -> int:
    if args.offline:
        from vilib_ros.offline import run_offline

        return run_offline(args)
    if args.dataset and len(args.dataset) > 1:
        print("vilib-ros run: several datasets need --offline", file=sys.stderr)
        return 2
    args.dataset = args.dataset[0] if args.dataset else None
    t_start = time.monotonic()
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, _raise_interrupt)   # clean up the children on SIGTERM too
    from vilib_ros.datasets.asl import open_dataset

    if args.dataset:
        ds_path = Path(args.dataset)
        name = ds_path.stem if ds_path.suffix == ".bag" else ds_path.resolve().name
        out = Path(args.out) if args.out else Path("vilib_ros_output") / name
        out.mkdir(parents=True, exist_ok=True)
    else:
        name = "synthetic"
        out = Path(args.out) if args.out else Path("vilib_ros_output") / name
        out.mkdir(parents=True, exist_ok=True)
        from vilib_ros.synthetic import SequenceConfig, generate_sequence

        ds_path = out / "dataset"
        if not (ds_path / "mav0").is_dir():
            print(f"vilib-ros run: generating a {args.duration:g} s synthetic stereo sequence in {ds_path}",
                  file=sys.stderr)
            # rendering workers are spawned processes that re-import __main__; from an
            # interactive or ``python -c`` session render in this process instead
            main_file = getattr(sys.modules.get("__main__"), "__file__", None)
            generate_sequence(ds_path, SequenceConfig(duration_s=float(args.duration)), progress=True,
                              workers=None if main_file else 1)
    out = out.resolve()
    (out / "logs").mkdir(exist_ok=True)
    ds = open_dataset(ds_path)
    n_images = len(ds.image_stamps(0))
    if args.max_frames > 0:
        n_images = min(n_images, args.max_frames)
    stereo = len(ds.cameras) >= 2 and not args.mono
    t_gen = time.monotonic() - t_start

    # calibration and parameters for the nodes
    import yaml

    def write_yaml(path: Path, d: dict):
        path.write_text(yaml.safe_dump(d, sort_keys=False))

    write_yaml(out / "cam0.yaml", ds.cameras[0].to_euroc_dict())
    if stereo:
        write_yaml(out / "cam1.yaml", ds.cameras[1].to_euroc_dict())
    write_yaml(out / "imu0.yaml", {k: float(v) for k, v in dict(ds.imu_noise).items()
                                   if isinstance(v, (int, float))})
    calib = {"camera_yaml": str(out / "cam0.yaml"), "stereo": stereo}
    if stereo:
        calib["right.camera_yaml"] = str(out / "cam1.yaml")
    for f in ("trajectory_tum.txt", "frontend_stats.json", "backend_stats.json", "recorded.jsonl"):
        (out / f).unlink(missing_ok=True)
    params = {
        "frontend_node": {"ros__parameters": dict(calib, device=args.device, queue_size=100, stereo_timeout_s=1.0,
                                                  # our own player: reliable, so no image is lost
                                                  input_reliability="reliable",
                                                  stats_path=str(out / "frontend_stats.json"))},
        "backend_node": {"ros__parameters": dict(calib, estimator="none" if args.no_backend else "auto",
                                                 input_reliability="reliable",
                                                 imu_yaml=str(out / "imu0.yaml"),
                                                 trajectory_path=str(out / "trajectory_tum.txt"),
                                                 stats_path=str(out / "backend_stats.json"))},
        "player_node": {"ros__parameters": {"dataset": str(Path(ds_path).resolve()), "rate": float(args.rate),
                                            "max_frames": int(args.max_frames), "publish_cam1": stereo,
                                            "exit_when_done": True, "progress": False,
                                            "wait_for_subscribers": 1, "wait_timeout_s": 120.0,
                                            "backpressure_timeout_s": 10.0}},
        "recorder_node": {"ros__parameters": {"output": str(out / "recorded.jsonl"), "topics": [
            "tracks:sensor_msgs/msg/PointCloud", "odometry:nav_msgs/msg/Odometry"]}},
    }
    params_file = out / "params.yaml"
    write_yaml(params_file, params)

    domain_id = args.domain_id if args.domain_id is not None else pick_domain_id()
    env = ros_env(domain_id)
    remaps = {
        "frontend_node": {"image": "/cam0/image_raw", "image_right": "/cam1/image_raw", "imu": "/imu0",
                          "tracks": "/tracks"},
        "backend_node": {"imu": "/imu0", "tracks": "/tracks"},
        "player_node": {"cam0/image_raw": "/cam0/image_raw", "cam1/image_raw": "/cam1/image_raw",
                        "imu0": "/imu0", "tracks": "/tracks"},
        "recorder_node": {"tracks": "/tracks", "odometry": "/odometry"},
    }
    print(f"vilib-ros run: {ds!r}\n  {n_images} frames, {'stereo' if stereo else 'mono'}, rate "
          f"{'backpressure' if args.rate <= 0 else args.rate}, ROS_DOMAIN_ID={domain_id}, output {out}",
          file=sys.stderr)

    children: dict[str, NodeProcess] = {}
    rc = 0
    failure = ""
    t_replay0 = t_replay1 = time.monotonic()
    from tqdm import tqdm

    bar = None
    try:
        for node in ("recorder_node", "backend_node", "frontend_node"):
            children[node] = NodeProcess(node, node_argv(node, remaps=remaps[node], params_file=params_file), env,
                                         out / "logs" / f"{node}.log")
        need = {"/cam0/image_raw": 1, "/tracks": 2, "/imu0": 2}
        if stereo:
            need["/cam1/image_raw"] = 1
        if not _wait_for_graph(domain_id, need, 120.0, list(children.values())):
            dead = [c for c in children.values() if c.poll() is not None]
            failure = ("node exited during start-up: " + ", ".join(f"{c.name} (rc {c.poll()})" for c in dead)
                       if dead else "nodes did not discover each other within 120 s")
            raise RuntimeError(failure)
        t_replay0 = time.monotonic()
        children["player_node"] = NodeProcess(
            "player_node", node_argv("player_node", remaps=remaps["player_node"], params_file=params_file), env,
            out / "logs" / "player_node.log")
        bar = tqdm(total=n_images, unit="frame", desc="tracks", file=sys.stderr, mininterval=0.5)
        received = 0
        rec_path = out / "recorded.jsonl"
        player_done_at = None
        while True:
            time.sleep(0.2)
            n = sum(1 for r in read_jsonl(rec_path) if r.get("topic") == "tracks")
            if n > received:
                bar.update(n - received)
                received = n
            for c in children.values():
                code = c.poll()
                if code is None:
                    continue
                if c.name == "player_node" and code == 0:
                    if player_done_at is None:
                        player_done_at = time.monotonic()
                    continue
                failure = f"{c.name} exited unexpectedly with code {code}"
                raise RuntimeError(failure)
            if player_done_at is not None:
                # the last frames may still be in flight: wait for them (bounded)
                if received >= n_images or time.monotonic() - player_done_at > 15.0:
                    break
            if args.timeout and time.monotonic() - t_start > args.timeout:
                failure = f"timed out after {args.timeout:g} s"
                raise RuntimeError(failure)
        t_replay1 = time.monotonic()
    except KeyboardInterrupt:
        failure = "interrupted"
        rc = 130
    except RuntimeError:
        rc = 1
    finally:
        if bar is not None:
            bar.close()
        codes = {}
        try:
            for node in ("player_node", "frontend_node", "backend_node", "recorder_node"):
                if node in children:
                    codes[node] = children[node].stop(timeout=60.0 if node == "backend_node" else 20.0)
        except KeyboardInterrupt:   # interrupted again while stopping: no more waiting
            for c in children.values():
                c.kill()
            rc, failure = 130, "interrupted"
    if rc:
        print(f"vilib-ros run: FAILED: {failure}", file=sys.stderr)
        for c in children.values():
            print(f"--- {c.name} (exit {c.proc.returncode}), last lines of {c.log_path}:\n{c.tail()}", file=sys.stderr)
        return rc
    bad_exit = {k: v for k, v in codes.items() if v not in (0, None, -signal.SIGINT)}
    if bad_exit:
        print(f"vilib-ros run: a node failed while shutting down: {bad_exit}", file=sys.stderr)
        for k in bad_exit:
            print(f"--- {k}:\n{children[k].tail()}", file=sys.stderr)
        rc = 1

    t_post0 = time.monotonic()
    summary = write_outputs(out, ds, n_images, args, stereo, t_gen, t_replay1 - t_replay0, domain_id, name)
    summary["wall_s"]["outputs"] = time.monotonic() - t_post0
    (out / "timing.json").write_text(json.dumps(summary["timing"] | {"wall_s": summary["wall_s"]}, indent=2))
    print(f"vilib-ros run: {summary['tracks_messages']}/{n_images} frames tracked; outputs in {out}",
          file=sys.stderr)
    if summary["tracks_messages"] == 0:
        rc = 1
    return rc


def write_outputs(out: Path, ds, n_images: int, args, stereo: bool, t_gen: float, t_replay: float,
                  domain_id: int, name: str | None = None) -> dict:
    recs = read_jsonl(out / "recorded.jsonl")
    tracks = [r for r in recs if r.get("topic") == "tracks"]
    odom = [r for r in recs if r.get("topic") == "odometry"]
    fe = json.loads((out / "frontend_stats.json").read_text()) if (out / "frontend_stats.json").exists() else {}
    be = json.loads((out / "backend_stats.json").read_text()) if (out / "backend_stats.json").exists() else {}
    fps = 20.0
    st = ds.image_stamps(0)
    if len(st) > 1:
        fps = float(1e9 / np.median(np.diff(st)))
    video_kind, video = ("skipped", None) if args.no_video else render_tracks_video(ds, tracks, out, fps)

    traj = out / "trajectory_tum.txt"
    if (not traj.exists() or traj.stat().st_size == 0) and odom:
        # fall back to the odometry messages (causal estimates)
        write_tum(traj, [r["stamp_ns"] for r in odom], [r["p"] for r in odom], [r["q_xyzw"] for r in odom])
    est = read_tum(traj) if traj.exists() and traj.stat().st_size > 0 else None
    gt = None
    if ds.groundtruth is not None:
        g = ds.groundtruth
        write_tum(out / "groundtruth_tum.txt", g.t_ns, g.p, g.q_xyzw)
        gt = (np.asarray(g.t_ns, np.int64), np.asarray(g.p, np.float64))
    ape: dict = {}
    plot = None
    if est is not None and len(est[0]):
        plot = out / "trajectory.png"
        ape = plot_trajectory(est, gt, plot)

    n_tracks = [r.get("n", 0) for r in tracks]
    ages = [max(r.get("age", [0]) or [0]) for r in tracks]
    ids_first = set(tracks[0].get("ids", [])) if tracks else set()
    ids_last = set(tracks[-1].get("ids", [])) if tracks else set()
    timing = {"frontend": {"latency_ms": fe.get("latency_ms"), "process_ms": fe.get("process_ms"),
                           "stages_ms": fe.get("stages_ms"), "device": fe.get("device")},
              "backend": {"frame_ms": be.get("frame_ms"), "mode": be.get("mode")}}
    wall = {"prepare": t_gen, "replay": t_replay}
    lines = [
        f"# vilib_ros run: {name or ds.name}",
        "",
        f"- dataset: `{getattr(args, 'dataset', None) or 'synthetic (generated)'}` "
        f"({n_images} frames, {'stereo' if stereo else 'mono'}, {fps:.0f} Hz)",
        "- replay: " + ("backpressure (as fast as the frontend accepts)" if args.rate <= 0
                        else f"{args.rate:g} x real time") + f", {t_replay:.1f} s wall, ROS_DOMAIN_ID {domain_id}",
        f"- frontend: device `{fe.get('device', '?')}`; {fe.get('tracks_published', len(tracks))} tracks messages "
        f"for {fe.get('images_received', '?')} images received; recorder got {len(tracks)}/{n_images}",
        f"- tracks per frame: mean {np.mean(n_tracks) if n_tracks else 0:.0f}, min {min(n_tracks) if n_tracks else 0}, "
        f"max {max(n_tracks) if n_tracks else 0}; oldest track {max(ages) if ages else 0} frames; "
        f"{len(ids_first & ids_last)} of the first frame's tracks alive at the end",
        f"- skipped / dropped: {json.dumps({k: v for k, v in (fe.get('skipped') or {}).items() if v}) or '{}'}",
        f"- backend: {be.get('mode', 'not run')}; frames {be.get('frames_received', 0)}, odometry messages "
        f"{be.get('odometry_published', 0)}; keyframes {(be.get('estimator') or {}).get('keyframes', '-')}, "
        f"resets {(be.get('estimator') or {}).get('resets', '-')}",
    ]
    if ape:
        lines.append(f"- trajectory vs ground truth (SE(3)-aligned): APE RMSE **{ape['ape_rmse_m']:.3f} m**, "
                     f"max {ape['ape_max_m']:.3f} m over {ape['length_m']:.1f} m ({ape['associated']} poses)")
    elif est is None:
        lines.append("- trajectory: none (the backend published no state)")
    lines += ["", "## Timing (ms)", "", "| stage | n | mean | median | p95 | max |", "|---|---|---|---|---|---|"]

    def row(name, s):
        if s and s.get("n"):
            cells = " | ".join(f"{s[k]:.2f}" for k in ("mean", "median", "p95", "max"))
            lines.append(f"| {name} | {s['n']} | {cells} |")

    for k, s in (fe.get("stages_ms") or {}).items():
        row(f"frontend {k}", s)
    row("frontend callback (receive -> publish)", fe.get("latency_ms"))
    row("backend per frame", be.get("frame_ms"))
    lines += ["", f"Wall time: prepare {t_gen:.1f} s, replay {t_replay:.1f} s.", "", "## Files", ""]
    files = [("tracks overlay", video), ("trajectory (TUM)", traj if est is not None else None),
             ("ground truth (TUM)", out / "groundtruth_tum.txt" if gt is not None else None),
             ("trajectory plot", plot), ("timing", out / "timing.json"), ("recorded messages", out / "recorded.jsonl"),
             ("node parameters", out / "params.yaml"), ("logs", out / "logs")]
    for label, f in files:
        if f is not None:
            lines.append(f"- {label}: `{Path(f).relative_to(out)}`")
    if video_kind == "gif":
        lines.append("- (no mp4 encoder here: PNG frames in `tracks_frames/` and an animated GIF)")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return {"tracks_messages": len(tracks), "timing": timing, "wall_s": wall, "ape": ape,
            "video": str(video) if video else None}
