"""What ``vilib-ros run`` writes after a replay: the tracks video, the trajectory plot,
``report.md``, ``timing.json``, the TUM files, from the recorder's JSON lines and the
nodes' JSON summaries (player, frontend, backend). Also the message counts per node against
what the player sent, so that a loss anywhere shows. No rclpy here.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vilib_ros.datasets import FrameError, read_tum, write_tum


def read_jsonl(path: Path) -> list[dict]:
    """Records of a recorder_node file (a line still being written is ignored)."""
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
                    pass
    return out


def read_json(path: Path) -> dict:
    """A node's JSON summary, ``{}`` where it is missing or unreadable (a node that was killed)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def associate(t_a: np.ndarray, t_b: np.ndarray, max_dt_ns: int = 20_000_000) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) with |t_a[i] - t_b[j]| <= max_dt_ns, nearest neighbour in t_b."""
    if len(t_a) == 0 or len(t_b) == 0:
        return np.zeros(0, int), np.zeros(0, int)
    j = np.clip(np.searchsorted(t_b, t_a), 1, len(t_b) - 1) if len(t_b) > 1 else np.zeros(len(t_a), int)
    if len(t_b) > 1:
        j = np.where(np.abs(t_b[j - 1] - t_a) <= np.abs(t_b[j] - t_a), j - 1, j)
    ok = np.abs(t_b[j] - t_a) <= max_dt_ns
    return np.nonzero(ok)[0], j[ok]


def _id_color(i: int) -> tuple[int, int, int]:
    h = (int(i) * 2654435761) & 0xFFFFFF
    return (h & 255, (h >> 8) & 255, (h >> 16) & 255)


#: The tracks video's writers, in order of preference: (fourcc, file, what it is, whether browsers play it).
VIDEO_WRITERS = (("avc1", "tracks.mp4", "H.264 MP4", True), ("VP80", "tracks.webm", "VP8 WebM", True),
                 ("mp4v", "tracks.mp4", "MPEG-4 Part 2 MP4", False))


class _QuietStderr:
    """Holds file descriptor 2 on /dev/null: FFmpeg prints its failed encoder probes (an H.264
    encoder the OpenCV wheel lacks) straight to it, past Python's ``sys.stderr``."""

    def __enter__(self):
        import os
        import sys

        sys.stderr.flush()
        self.saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(null)
        return self

    def __exit__(self, *exc):
        import os

        os.dup2(self.saved, 2)
        os.close(self.saved)


def open_video_writer(out_dir: Path, fps: float, size: tuple[int, int]):
    """The first of :data:`VIDEO_WRITERS` that OpenCV's writer opens here: ``(writer, path, what,
    browsers play it)``, or ``(None, None, None, False)``."""
    import cv2

    for fourcc, name, what, browser in VIDEO_WRITERS:
        path = out_dir / name
        with _QuietStderr():
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), float(fps), size)
        if writer.isOpened():
            return writer, path, what, browser
        writer.release()
        path.unlink(missing_ok=True)
    return None, None, None, False


def render_tracks_video(ds, tracks: list[dict], out_dir: Path, fps: float) -> tuple[str, Path | None]:
    """Write the tracks overlay: a video (:func:`open_video_writer`) or PNG frames + GIF. Returns
    ``(kind, path)``, kind the video's description (``"... (browsers do not play it)"`` where they
    do not), ``"gif"`` or ``"none"``."""
    import cv2

    by_stamp = {r["stamp_ns"]: r for r in tracks}
    history: dict[int, list] = {}
    frames = []
    for k, t in enumerate(ds.image_stamps(0)):
        r = by_stamp.get(int(t))
        if r is None:
            continue
        try:
            img = cv2.cvtColor(ds.load_image(0, k), cv2.COLOR_GRAY2BGR)
        except FrameError:
            continue
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
    writer, video, what, browser = open_video_writer(out_dir, fps, (w, h))
    if writer is not None:
        for f in frames:
            writer.write(f)
        writer.release()
        if video.exists() and video.stat().st_size > 1000:
            return (what if browser else f"{what} (browsers do not play it)"), video
        video.unlink(missing_ok=True)
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
    """Plot the estimate ``(t_ns, p)`` (SE(3)-aligned to ground truth ``(t_ns, p)`` where there is one).
    Returns APE stats."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_e, p_e = est
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
                     "associated": int(len(ia)),
                     "length_m": float(np.sum(np.linalg.norm(np.diff(p_g[ib], axis=0), axis=1)))}
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


def message_counts(pl: dict, fe: dict, be: dict, n_tracks_recorded: int) -> list[dict]:
    """Rows ``{stream, sent, <node>: received, lost}``: what each node received of what the player
    sent (cam0 images, IMU samples) and of what the frontend published (tracks)."""
    images = (pl.get("images") or [None])[0]
    rows = [{"stream": "cam0 images", "sent": images, "frontend": fe.get("images_received")},
            {"stream": "IMU samples", "sent": pl.get("imu"), "frontend": fe.get("imu_received"),
             "backend": be.get("imu_received")},
            {"stream": "tracks messages", "sent": fe.get("tracks_published"), "backend": be.get("frames_received"),
             "recorder": n_tracks_recorded}]
    for r in rows:
        got = [v for k, v in r.items() if k not in ("stream", "sent") and v is not None]
        r["lost"] = max((r["sent"] - v for v in got), default=0) if r["sent"] is not None else None
    return rows


def wall_line(wall: dict) -> str:
    """The report's line on where the wall time went: the time to the first frame from the
    command's start and its parts (dataset and calibration, the compiled kernels, node start-up,
    the first frame), beside the replay's."""
    parts = [f"dataset and calibration {wall.get('prepare', 0):.1f} s"]
    if "compile" in wall:
        how = "compiled: the first run" if wall.get("kernels_compiled") else "loaded from the cache"
        parts.append(f"kernels {wall['compile']:.1f} s ({how})")
    if "startup" in wall:
        parts.append(f"node start-up {wall['startup']:.1f} s")
    if "first_frame" in wall:
        parts.append(f"first frame {wall['first_frame']:.1f} s")
    head = (f"Time to the first frame: **{wall['to_first_frame']:.1f} s** from the command's start"
            if "to_first_frame" in wall else "No frame was tracked")
    return f"{head} ({', '.join(parts)}); replay {wall.get('replay', 0):.1f} s."


def write_outputs(out: Path, ds, args, stereo: bool, wall: dict, domain_id: int, name: str,
                  status: str = "completed", warnings: list[str] | None = None, calibration=None) -> dict:
    """Write everything after a replay (also after an interrupted or failed one: what there is);
    ``calibration`` (:class:`vilib_ros.calibration.Calibration`): where each value came from."""
    recs = read_jsonl(out / "recorded.jsonl")
    tracks = [r for r in recs if r.get("topic") == "tracks"]
    odom = [r for r in recs if r.get("topic") == "odometry"]
    fe, be, pl = (read_json(out / f) for f in ("frontend_stats.json", "backend_stats.json", "player_stats.json"))
    n_images = len(ds.image_stamps(0)) if not args.max_frames else min(len(ds.image_stamps(0)), args.max_frames)
    n_images *= max(1, getattr(args, "loops", 1))
    st = ds.image_stamps(0)
    fps = float(1e9 / np.median(np.diff(st))) if len(st) > 1 else 20.0
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
    if est is not None and len(est):
        plot = out / "trajectory.png"
        ape = plot_trajectory((est.t_ns, est.p), gt, plot)

    counts = message_counts(pl, fe, be, len(tracks))
    skipped = {k: v for k, v in (pl.get("skipped") or {}).items() if v}
    n_tracks = [r.get("n", 0) for r in tracks]
    ages = [max(r.get("age", [0]) or [0]) for r in tracks]
    ids_first = set(tracks[0].get("ids", [])) if tracks else set()
    ids_last = set(tracks[-1].get("ids", [])) if tracks else set()
    timing = {"frontend": {"latency_ms": fe.get("latency_ms"), "process_ms": fe.get("process_ms"),
                           "stages_ms": fe.get("stages_ms"), "device": fe.get("device")},
              "backend": {"frame_ms": be.get("frame_ms"), "mode": be.get("mode")}}
    lines = [
        f"# vilib_ros run: {name or ds.name}",
        "",
        f"- status: **{status}**",
        f"- dataset: `{getattr(args, 'dataset', None) or 'synthetic (generated)'}` "
        f"({n_images} frames, {'stereo' if stereo else 'mono'}, {fps:.0f} Hz)",
    ]
    if calibration is not None and calibration.defaults:
        lines.append(f"- **warning**: EuRoC's defaults are used for {', '.join(calibration.defaults)} "
                     f"({calibration.defaults_why}): see Calibration below")
    lines += [f"- **warning**: {w}" for w in (warnings or [])]
    lines += [
        "- replay: " + ("backpressure (as fast as the frontend accepts)" if args.rate <= 0
                        else f"{args.rate:g} x real time") + f", {wall.get('replay', 0):.1f} s wall, "
                                                            f"ROS_DOMAIN_ID {domain_id}",
        f"- frames skipped by the player (unreadable): {json.dumps(skipped) if skipped else 'none'}",
        f"- frontend: device `{fe.get('device', '?')}`; {fe.get('tracks_published', len(tracks))} tracks messages "
        f"for {fe.get('images_received', '?')} images received; recorder got {len(tracks)}/{n_images}",
        f"- tracks per frame: mean {np.mean(n_tracks) if n_tracks else 0:.0f}, min {min(n_tracks) if n_tracks else 0}, "
        f"max {max(n_tracks) if n_tracks else 0}; oldest track {max(ages) if ages else 0} frames; "
        f"{len(ids_first & ids_last)} of the first frame's tracks alive at the end",
        f"- skipped / dropped in the frontend: "
        f"{json.dumps({k: v for k, v in (fe.get('skipped') or {}).items() if v}) or '{}'}",
        f"- backend: {be.get('mode', 'not run')}; frames {be.get('frames_received', 0)}, odometry messages "
        f"{be.get('odometry_published', 0)}; keyframes {(be.get('estimator') or {}).get('keyframes', '-')}, "
        f"resets {(be.get('estimator') or {}).get('resets', '-')}",
    ]
    if ape:
        lines.append(f"- trajectory vs ground truth (SE(3)-aligned): APE RMSE **{ape['ape_rmse_m']:.3f} m**, "
                     f"max {ape['ape_max_m']:.3f} m over {ape['length_m']:.1f} m ({ape['associated']} poses)")
    elif est is None:
        lines.append("- trajectory: none (the backend published no state)")
    if calibration is not None:
        lines += [""] + calibration.report_lines()[:-1]
    lines += ["", "## Messages received against sent", "",
              "| stream | sent | frontend | backend | recorder | lost |", "|---|---|---|---|---|---|"]
    for r in counts:
        cells = [r["stream"]] + ["-" if r.get(k) is None else str(r[k]) for k in ("sent", "frontend", "backend",
                                                                                   "recorder")]
        lost = r["lost"]
        cells.append("-" if lost is None else (f"**{lost}**" if lost else "0"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Timing (ms)", "", "| stage | n | mean | median | p95 | max |", "|---|---|---|---|---|---|"]

    def row(label, s):
        if s and s.get("n"):
            lines.append(f"| {label} | {s['n']} | " + " | ".join(f"{s[k]:.2f}" for k in ("mean", "median", "p95", "max"))
                         + " |")

    for k, s in (fe.get("stages_ms") or {}).items():
        row(f"frontend {k}", s)
    row("frontend callback (receive -> publish)", fe.get("latency_ms"))
    row("backend per frame", be.get("frame_ms"))
    lines += ["", wall_line(wall), "", "## Files", ""]
    files = [("tracks overlay", video), ("trajectory (TUM)", traj if est is not None else None),
             ("ground truth (TUM)", out / "groundtruth_tum.txt" if gt is not None else None),
             ("trajectory plot", plot), ("timing", out / "timing.json"), ("recorded messages", out / "recorded.jsonl"),
             ("node parameters", out / "params.yaml"), ("logs", out / "logs")]
    for label, f in files:
        if f is not None:
            lines.append(f"- {label}: `{Path(f).relative_to(out)}`")
    if video_kind == "gif":
        lines.append("- (no video encoder here: PNG frames in `tracks_frames/` and an animated GIF)")
    elif video is not None:
        lines.append(f"- the tracks video is {video_kind}" + (
            ": VLC or mpv play it; for a browser convert it (`ffmpeg -i tracks.mp4 -c:v libx264 -pix_fmt yuv420p "
            "tracks_h264.mp4`) or install an OpenCV with an H.264 or VP8 encoder" if "do not play" in video_kind
            else " (browsers play it)"))
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "timing.json").write_text(json.dumps(timing | {"wall_s": wall}, indent=2))
    return {"tracks_messages": len(tracks), "n_images": n_images, "timing": timing, "ape": ape, "counts": counts,
            "skipped": skipped, "device": fe.get("device"), "video": str(video) if video else None,
            "video_kind": video_kind,
            "images_sent": (pl.get("images") or [None])[0]}
