"""``vilib-ros bench``: how fast this machine runs the package, on data written as a user's is.

1. A stereo-inertial sequence of ``--frames`` frames (752x480 PNG, 20 Hz) is generated once into
   ``--data`` (reused while its settings match).
2. **Frontend per frame**: ``FeatureTracker.process()`` called synchronously on the left images
   read from the PNG files (pageable NumPy arrays, as a ROS message or a file gives them), with
   the default configuration and with the configuration that does OpenCV's job (previous-frame
   templates, translation + gain/offset, no forward-backward check, no RANSAC), beside an
   OpenCV-native frontend doing that job in the same run: FAST (threshold 10, OpenCV's NMS) with
   the strongest corner per 32x32 cell and pyramidal LK (21x21, 3 levels), redetecting in free
   cells below 30 % of the cells.
3. **Whole VIO**: the offline runner (frontend and backend overlapping, images decoded from disk
   by decoder processes) over the whole sequence, stereo and mono: frames/s, each stage's busy
   seconds against the wall (reader, frontend, backend, as the runner measures them) and the
   stage that limited the run, and the causal trajectory's ATE against the ground truth.

Writes ``bench.json`` and ``bench.md`` into ``--out`` and prints the summary table.
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

#: stages of the per-frame part, in the table's order
FRONTENDS = ("default", "opencv_job", "opencv")


def configure_parser(p) -> None:
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--frames", type=int, default=2000, help="stereo frames of the generated sequence (>= 100)")
    p.add_argument("--per-frame", type=int, default=300, help="frames timed one by one in the per-frame part")
    p.add_argument("--data", default=None,
                   help="folder for the generated sequence (default ~/.cache/vilib_ros/bench/stereo_<frames>)")
    p.add_argument("--out", default="vilib_ros_output/bench", help="folder for bench.json and bench.md")
    p.add_argument("--skip-vio", action="store_true", help="the per-frame part only")


class OpenCvFrontend:
    """The frontend's job with OpenCV's own pieces: FAST and the strongest corner per cell,
    pyramidal LK (21x21, 3 levels), redetection in the cells without a track below 30 %."""

    def __init__(self, camera, cell: int = 32, threshold: int = 10, fraction: float = 0.3):
        import cv2

        self.cv2, self.camera, self.cell = cv2, camera, cell
        self.cols, self.rows = -(-camera.width // cell), -(-camera.height // cell)
        self.n_cells = self.rows * self.cols
        self.fraction = fraction
        self.fast = cv2.FastFeatureDetector_create(threshold=threshold, nonmaxSuppression=True)
        self.criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01)
        self.prev = None
        self.pts = np.zeros((0, 2), np.float32)
        self.ids = np.zeros(0, np.int64)
        self.next_id = 0

    def _cells(self, xy):
        c = np.clip((xy[:, 0] // self.cell).astype(np.int64), 0, self.cols - 1)
        r = np.clip((xy[:, 1] // self.cell).astype(np.int64), 0, self.rows - 1)
        return r * self.cols + c

    def process(self, img):
        cv2 = self.cv2
        if self.prev is not None and len(self.pts):
            p1, st, _ = cv2.calcOpticalFlowPyrLK(self.prev, img, self.pts.reshape(-1, 1, 2), None, winSize=(21, 21),
                                                 maxLevel=2, criteria=self.criteria)
            p1 = p1.reshape(-1, 2)
            h, w = img.shape
            ok = (st.ravel() == 1) & (p1[:, 0] >= 0) & (p1[:, 1] >= 0) & (p1[:, 0] < w) & (p1[:, 1] < h)
            self.pts, self.ids = p1[ok], self.ids[ok]
        if len(self.pts) < self.fraction * self.n_cells:
            kps = self.fast.detect(img)
            if kps:
                xy = np.array([k.pt for k in kps], np.float32)
                resp = np.array([k.response for k in kps], np.float32)
                cell = self._cells(xy)
                free = np.ones(self.n_cells, bool)
                free[self._cells(self.pts)] = False
                order = np.argsort(-resp, kind="stable")
                _, first = np.unique(cell[order], return_index=True)      # strongest corner of each cell
                pick = order[first]
                pick = pick[free[cell[pick]]]
                k = len(pick)
                self.pts = np.concatenate([self.pts, xy[pick]])
                self.ids = np.concatenate([self.ids, np.arange(self.next_id, self.next_id + k)])
                self.next_id += k
        self.prev = img
        return self.ids, self.pts, self.camera.undistort(self.pts)


def opencv_job_config():
    """The configuration that does the OpenCV-native frontend's job."""
    import dataclasses

    from vilib_ros.frontend import FrontendConfig

    cfg = FrontendConfig()
    return dataclasses.replace(cfg, tracker=dataclasses.replace(cfg.tracker, template="previous", warp="translation"),
                               fb_check=False, ransac=False)


def sequence(args):
    """The generated PNG sequence (generated here unless one with the same settings exists)."""
    from vilib_ros.datasets import open_dataset
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    if args.frames < 100:
        raise ValueError(f"--frames must be >= 100, got {args.frames}")
    cfg = SequenceConfig(duration_s=args.frames / 20.0, rate_hz=20.0, stereo=True)
    path = Path(args.data) if args.data else Path.home() / ".cache" / "vilib_ros" / "bench" / f"stereo_{args.frames}"
    marker = path / "bench_sequence.json"
    want = {"frames": args.frames, "duration_s": cfg.duration_s, "rate_hz": cfg.rate_hz}
    if marker.is_file() and json.loads(marker.read_text()) == want and (path / "mav0").is_dir():
        _say(f"reusing the sequence generated in {path}")
    else:
        _say(f"generating a {args.frames}-frame stereo sequence (752x480 PNG) in {path} (once)")
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        generate_sequence(path, cfg, progress=True, workers=None if main_file else 1, overwrite=True)
        marker.write_text(json.dumps(want))
    return open_dataset(path)


def _say(msg: str) -> None:
    print(f"vilib-ros bench: {msg}", file=sys.stderr, flush=True)


def _stats_us(seconds) -> dict:
    a = 1e6 * np.asarray(seconds, float)
    return {"median_us": float(np.median(a)), "p90_us": float(np.percentile(a, 90)),
            "p99_us": float(np.percentile(a, 99)), "n": int(a.size)}


def per_frame(ds, device: str, n: int) -> dict:
    """Each frontend on the first ``n`` left images, read from their PNG files frame by frame
    outside the timing (a fresh pageable array each time)."""
    from vilib_ros.frontend import FeatureTracker, FrontendConfig

    cam = ds.cameras[0]
    stamps = np.asarray(ds.image_stamps(0), np.int64)[:n]
    out = {}
    for name in FRONTENDS:
        if name == "opencv":
            fe = OpenCvFrontend(cam)

            def step(img, t, fe=fe):
                return len(fe.process(img)[0])
            impl = f"OpenCV {__import__('cv2').__version__}"
        else:
            cfg = FrontendConfig() if name == "default" else opencv_job_config()
            fe = FeatureTracker(cam, cfg, device=device)
            fe.process(ds.load_image(0, 0), int(stamps[0]))      # first frame: compilation, graph capture
            fe = FeatureTracker(cam, cfg, device=device)

            def step(img, t, fe=fe):
                return len(fe.process(img, t).ids)
            impl = f"vilib_ros ({fe.device})"
        times, tracks = [], []
        for k, t in enumerate(stamps):
            img = ds.load_image(0, k)
            t0 = time.perf_counter()
            tracks.append(step(img, int(t)))
            times.append(time.perf_counter() - t0)
        out[name] = dict(_stats_us(times[1:]), impl=impl, tracks_per_frame=float(np.mean(tracks)))
    return out


def whole_vio(ds, device: str) -> dict:
    """The offline runner over the whole sequence, stereo then mono."""
    from vilib_ros import offline
    from vilib_ros.evaluation import ate_rmse

    res = {}
    for mode in ("stereo", "mono"):
        _say(f"whole VIO, {mode}: {len(ds.image_stamps(0))} frames from PNG files")
        r = offline.process(ds, device=device, stereo=mode == "stereo", backend=True)
        be = r["backend"] or {}
        st = r["stages"]
        row = {"frames": r["frames"], "wall_s": r["wall_s"], "frames_per_s": r["frames"] / r["wall_s"],
               "reader_busy_s": st["busy_s"]["reader"], "frontend_busy_s": st["busy_s"]["frontend"],
               "process_s": st["process_s"], "backend_busy_s": st["busy_s"]["backend"],
               "reader": r["reader"]["describe"], "limit": st["limit"] or "none", "limit_share": st["share"],
               "device": r["device"], "resets": int((be.get("stats") or {}).get("resets", 0))}
        t, p, _ = be.get("causal", ([], [], []))
        if len(t) and ds.groundtruth is not None:
            gp, _, ok = ds.groundtruth.interpolate(np.asarray(t, np.int64))
            row["ate_causal_m"] = ate_rmse(np.asarray(p)[ok], gp[ok]) if np.count_nonzero(ok) > 2 else None
        res[mode] = row
    return res


def markdown(res: dict) -> str:
    m = res["machine"]
    lines = [f"# `vilib-ros bench` on {m['cpu']} ({m['cores']} cores){', ' + m['gpu'] if m.get('gpu') else ''}", "",
             f"{res['date']}, vilib_ros {res['version']}, a generated {res['frames']}-frame stereo sequence "
             "(752x480 PNG, 20 Hz); every row of a table from the same run.", "",
             "| frontend, one frame, `process()` from a PNG-read frame | median | p90 | p99 | tracks |",
             "|---|---|---|---|---|"]
    names = {"default": "vilib_ros, default (reference templates, affine, FB check, RANSAC)",
             "opencv_job": "vilib_ros doing OpenCV's job", "opencv": "OpenCV (FAST + pyramidal LK)"}
    for k in FRONTENDS:
        r = res["per_frame"][k]
        lines.append(f"| {names[k]}: {r['impl']} | {_t(r['median_us'])} | {_t(r['p90_us'])} | {_t(r['p99_us'])} | "
                     f"{r['tracks_per_frame']:.0f} |")
    pf = res["per_frame"]
    lines += ["", f"Doing the same job, vilib_ros takes {pf['opencv_job']['median_us'] / pf['opencv']['median_us']:.2f}x "
              "OpenCV's time per frame (median)."]
    if res.get("vio"):
        lines += ["", "| whole VIO, offline runner | frames/s | wall | reader busy (per decoder) | frontend busy "
                  "(process()) | backend busy | limited by | ATE (causal) | resets |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for mode, r in res["vio"].items():
            ate = f"{100 * r['ate_causal_m']:.2f} cm" if r.get("ate_causal_m") is not None else "-"
            lines.append(f"| {mode} ({r['device']}) | {r['frames_per_s']:.0f} | {r['wall_s']:.1f} s | "
                         f"{r['reader_busy_s']:.1f} s ({r['reader']}) | {r['frontend_busy_s']:.1f} s "
                         f"({r['process_s']:.1f} s) | {r['backend_busy_s']:.1f} s | {r['limit']} "
                         f"({100 * r['limit_share']:.0f} %) | {ate} | {r['resets']} |")
        lines += ["", "Busy: seconds of the wall each stage worked (the reader's per decoder; the frontend's: its "
                  "thread's time not waiting for decoded frames or the backend's queue). The limit is the stage "
                  "busiest against the wall (\"none\" where no stage was busy half of it)."]
    return "\n".join(lines) + "\n"


def _t(us: float) -> str:
    return f"{us:.0f} us" if us < 1000 else f"{us / 1000:.2f} ms"


def machine(device: str) -> dict:
    import os

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    m = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}
    if device != "cpu":
        try:
            import cupy

            m["gpu"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        except Exception:  # noqa: BLE001 - no CUDA here: the CPU figures stand alone
            pass
    return m


def run_command(args) -> int:
    from vilib_ros import __version__

    ds = sequence(args)
    res = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "version": __version__,
           "machine": machine(args.device), "frames": len(ds.image_stamps(0)), "device": args.device}
    _say(f"frontend per frame: {args.per_frame} frames, three frontends")
    res["per_frame"] = per_frame(ds, args.device, min(args.per_frame, res["frames"]))
    if not args.skip_vio:
        res["vio"] = whole_vio(ds, args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (out / "bench.md").write_text(md)
    print(md)
    _say(f"written: {out / 'bench.md'}, {out / 'bench.json'}")
    return 0
