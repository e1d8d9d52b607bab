"""``python -m bench throughput``: the whole VIO's frames/s from PNG files, and the paper's own code
beside our frontend doing its work, in one run on the GPU machine.

1. A stereo-inertial PNG sequence of ``--frames`` frames (752x480, 20 Hz, the generator's default
   scene; seed 0) in ``--data``, rendered by one process per CPU, or reused where one with the same
   settings is there.
2. **Whole VIO**: the offline runner (:func:`vilib_ros.offline.process`: decoder processes reading
   the PNG files into shared memory, the frontend on ``--device``, the backend in its child
   process) over the whole sequence, stereo and mono, ``--vio-rounds`` times: frames/s, each
   stage's busy seconds against the wall and the stage that limited the run, ``process()``'s
   median. Each run is followed by the same run with the images decoded on as many threads of
   this process instead (``--no-threads-too``: not), so that the two ways of decoding are compared
   in the same minutes.
3. **The paper's code against ours at equal work**, on the 95 real EuRoC frames (``--euroc``):
   uzh-rpg/vilib (prepared in ``--vilib``: ``src``, ``debs``, the harness in ``harness``, as
   ``../shared/seed_bench/README.md`` says; built here with its ``build.sh`` while the sequence
   renders) and :func:`bench.frontend.original_work_tracker` (our frontend configured to do the
   original's work) alternately, A B A B ..., ``--rounds`` pairs: the original's
   ``track all frames [us/frame]`` median (its harness: 20 passes over the frames) and our
   ``process()`` median over ``--ours-frames`` calls on the same frames (looped).

Writes ``throughput.json`` (``device``, ``date``, ``frames``, ``whole_vio_fps`` (stereo),
``mono_whole_vio_fps``, ``seed_track_us``, ``equal_work_us``: medians over the runs of this call;
``whole_vio_fps_threads``, ``mono_whole_vio_fps_threads``: the same with decoder threads;
every run's values under ``runs``) and ``throughput.md`` into ``--out``. Exit 1 where a part failed
(its error is in the files), 0 otherwise.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.results import load, machine, write_results

REPO = Path(__file__).resolve().parents[1]


def configure_parser(p) -> None:
    p.add_argument("--device", default="cuda", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--frames", type=int, default=2000, help="stereo frames of the generated PNG sequence (>= 100)")
    p.add_argument("--data", default=None, help="folder of the generated sequence (default .data/throughput/stereo_<frames>)")
    p.add_argument("--workers", type=int, default=0, help="render processes (0: the CPU count)")
    p.add_argument("--vio-rounds", type=int, default=2, help="whole-VIO runs per mode (stereo, mono, stereo, ...)")
    p.add_argument("--no-threads-too", action="store_true",
                   help="no whole-VIO run with decoder threads after each with decoder processes")
    p.add_argument("--euroc", default=None,
                   help="EuRoC ASL folder of the real frames (default .vilib/euroc_v101_head, else $VILIB_ROS_EUROC, "
                        "else ../shared/data/euroc_v101_head, else .data/euroc_v101_head)")
    p.add_argument("--vilib", default=str(REPO / ".vilib"),
                   help="the paper's code prepared for this machine: src/, debs/, harness/ (../shared/seed_bench)")
    p.add_argument("--build", default="/tmp/vilib_build", help="build folder of the paper's code")
    p.add_argument("--rounds", type=int, default=4, help="pairs of runs, the paper's code then ours (4: ABAB twice)")
    p.add_argument("--ours-frames", type=int, default=1900,
                   help="process() calls per run of ours (the original's harness: 20 passes over the 95 frames)")
    p.add_argument("--skip-seed", action="store_true", help="leave the paper's code out (no CUDA compiler here)")
    p.add_argument("--out", default=str(REPO / "bench" / "results"), help="folder for throughput.json / .md")


def _say(msg: str) -> None:
    print(f"bench throughput: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the sequence
def sequence_path(args) -> Path:
    return Path(args.data) if args.data else REPO / ".data" / "throughput" / f"stereo_{args.frames}"


def sequence(args) -> Path:
    """The generated PNG sequence, rendered here unless one with these settings is there."""
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    cfg = SequenceConfig(duration_s=args.frames / 20.0, rate_hz=20.0, stereo=True)
    path = sequence_path(args)
    marker = path / "throughput_sequence.json"
    want = {"frames": args.frames, "duration_s": cfg.duration_s, "rate_hz": cfg.rate_hz, "seed": cfg.seed}
    if marker.is_file() and json.loads(marker.read_text()) == want and (path / "mav0").is_dir():
        _say(f"reusing the sequence in {path}")
        return path
    workers = args.workers or os.cpu_count() or 1
    _say(f"rendering a {args.frames}-frame stereo sequence (752x480 PNG) into {path} with {workers} processes")
    t0 = time.monotonic()
    generate_sequence(path, cfg, progress=False, workers=workers, overwrite=True)
    marker.write_text(json.dumps(want))
    _say(f"rendered in {time.monotonic() - t0:.0f} s")
    return path


# ----------------------------------------------------------------------------- whole VIO
def vio_run(ds, device: str, mode: str, decoders: str = "processes") -> dict:
    """One offline-runner run over the whole sequence (``decoders``: as :func:`vilib_ros.offline.process`)."""
    from vilib_ros.offline import process

    r = process(ds, device=device, stereo=mode == "stereo", backend=True, decoders=decoders)
    st, be = r["stages"], r["backend"] or {}
    return {"mode": mode, "decoders": r["reader"]["kind"], "frames": r["frames"], "wall_s": r["wall_s"], "frames_per_s": r["frames"] / r["wall_s"],
            "process_ms_median": 1e3 * float(np.median(r["frontend_s"])) if r["frontend_s"] else None,
            "busy_s": st["busy_s"], "process_s": st["process_s"], "reader_wait_s": st["reader_wait_s"],
            "backend_wait_s": st["backend_wait_s"], "limit": st["limit"], "limit_share": st["share"],
            "reader": r["reader"]["describe"], "device": r["device"], "skipped": r["skipped"],
            "resets": int((be.get("stats") or {}).get("resets", 0)), "keyframes": (be.get("stats") or {}).get("keyframes")}


# ----------------------------------------------------------------------------- the paper's code
_STAT = r"\s+n=\s*(\d+) median=\s*([-\d.]+) p90=\s*([-\d.]+)"


def parse_seed(text: str) -> dict:
    """The figures of one ``vilib_bench`` output: ``track all frames [us/frame]`` (median, p90, n),
    the 2-level detection end to end, features per frame, the conformance verdicts, the device."""
    out: dict = {}
    m = re.search(r"^track all frames \[us/frame\]" + _STAT, text, re.M)
    if m:
        out.update(track_n=int(m.group(1)), track_us=float(m.group(2)), track_p90_us=float(m.group(3)))
    m = re.search(r"^\S*L2 end-to-end \[us/frame\]" + _STAT, text, re.M)
    if m:
        out["detect_l2_us"] = float(m.group(2))
    m = re.search(r"^total features /frame" + _STAT, text, re.M)
    if m:
        out["features_per_frame"] = float(m.group(2))
    verdicts = re.findall(r"conformance: (PASS|FAIL)", text)
    if verdicts:
        out["conformance"] = "FAIL" if "FAIL" in verdicts else "PASS"
    m = re.search(r"^device: (.+)$", text, re.M)
    if m:
        out["device"] = m.group(1).strip()
    return out


class Seed:
    """The paper's code: built from ``--vilib`` with its harness's build.sh (started in the
    background: :meth:`start_build`), run on the raw frames."""

    def __init__(self, args, frames_dir: Path):
        self.vilib = Path(args.vilib)
        self.harness = self.vilib / "harness"
        self.build = Path(args.build)
        self.frames_dir = frames_dir
        self.raw = self.build.parent / "vilib_frames.u8"
        self.log = self.build.parent / "vilib_build.log"
        self.proc = None
        self.error = None
        self.env = dict(os.environ, VILIB_SRC=str(self.vilib / "src"), VILIB_DEBS=str(self.vilib / "debs"),
                        PREFIX=str(self.build.parent / "vilib_prefix"), BUILD=str(self.build),
                        FRAMES_DIR=str(frames_dir), RAW=str(self.raw))

    def missing(self) -> str | None:
        for p in (self.vilib / "src" / "visual_lib", self.vilib / "debs", self.harness / "build.sh",
                  self.harness / "run.sh", self.frames_dir):
            if not p.exists():
                return f"{p} is missing (see ../shared/seed_bench/README.md: prepare .vilib, copy the harness)"
        return None

    def start_build(self) -> None:
        _say(f"building the paper's code in {self.build} (log {self.log})")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log, "w")
        self.proc = subprocess.Popen(["bash", str(self.harness / "build.sh")], env=self.env, stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_build(self, timeout: float = 600.0) -> bool:
        t0 = time.monotonic()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        self._log.close()
        if rc != 0:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
            self.error = f"build.sh failed (exit {rc}):\n{tail}"
            return False
        _say(f"built (waited {time.monotonic() - t0:.0f} s after the sequence)")
        return True

    def run(self, first: bool) -> dict:
        """One run: the first through the harness's run.sh (frame conversion, the benchmark, its CPU
        self-test), the others the benchmark binary alone."""
        cmd = (["bash", str(self.harness / "run.sh")] if first
               else [str(self.build / "vilib_bench"), "--frames", str(self.raw)])
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=600)
        res = {"rc": p.returncode, "wall_s": time.monotonic() - t0, **parse_seed(p.stdout)}
        if first:
            res["output"] = p.stdout[-6000:]
        if "track_us" not in res:
            res["error"] = f"no 'track all frames' line (exit {p.returncode}): {(p.stdout + p.stderr)[-1500:]}"
        return res


def ours_run(ft, frames, n: int) -> dict:
    from bench.frontend import process_times

    lat, ntr = process_times(ft, frames, n, warm=50)
    a = 1e6 * np.asarray(lat)
    return {"process_us": float(np.median(a)), "p90_us": float(np.percentile(a, 90)), "n": len(lat),
            "tracks_per_frame": float(np.mean(ntr))}


def default_euroc() -> str:
    own = REPO / ".vilib" / "euroc_v101_head"
    if (own / "mav0" / "cam0" / "data").is_dir():
        return str(own)
    from bench.tracker import default_frames_dir

    return default_frames_dir()


# ----------------------------------------------------------------------------- report
def _median(v):
    v = [x for x in v if x is not None]
    return float(np.median(v)) if v else None


def markdown(res: dict) -> str:
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    L = [f"# Throughput: the whole VIO from PNG files, and the paper's code at equal work", "",
         f"- device: {res['device']}; host: {res['host']['cpu']} ({res['host']['cores']} cores); date (UTC): "
         f"{res['date']}; load average {res['load'][0]} -> {res['load'][1]}",
         f"- command: `python -m bench throughput {' '.join(res['argv'])}`", "",
         "| | value (median of this run's) |", "|---|---|",
         f"| whole VIO, stereo, {res['frames']} frames from PNG files (decoder processes) | "
         f"**{f(res['whole_vio_fps'], '.0f')} frames/s** |",
         f"| whole VIO, mono | **{f(res['mono_whole_vio_fps'], '.0f')} frames/s** |",
         *([f"| the same, images decoded on threads of the runner's process: stereo / mono | "
            f"{f(res['whole_vio_fps_threads'], '.0f')} / {f(res['mono_whole_vio_fps_threads'], '.0f')} frames/s |"]
           if "whole_vio_fps_threads" in res else []),
         f"| the paper's code, `track all frames` (95 real EuRoC frames) | {f(res['seed_track_us'], '.1f')} us |",
         f"| ours doing its work, `process()` (the same frames) | {f(res['equal_work_us'], '.1f')} us |", ""]
    vio = res["runs"]["vio"]
    if vio:
        L += ["## Whole VIO runs (offline runner, in the order run)", "",
              "| mode | frames/s | wall s | reader busy s (per decoder) | frontend busy s (process()) | backend busy s "
              "| frontend waited for reader / backend s | limited by | process() median ms | resets |",
              "|---|---:|---:|---|---|---:|---|---|---:|---:|"]
        for r in vio:
            if "error" in r:
                L.append(f"| {r['mode']} | failed: {r['error'].splitlines()[-1]} |||||||||")
                continue
            b = r["busy_s"]
            L.append(f"| {r['mode']} ({r['device']}), decoder {r['decoders']} | {r['frames_per_s']:.0f} | {r['wall_s']:.2f} | "
                     f"{b['reader']:.2f} ({r['reader']}) | {b['frontend']:.2f} ({r['process_s']:.2f}) | "
                     f"{b['backend']:.2f} | {r['reader_wait_s']:.2f} / {r['backend_wait_s']:.2f} | "
                     f"{r['limit'] or 'none'} ({100 * r['limit_share']:.0f} %) | {f(r['process_ms_median'], '.3f')} | "
                     f"{r['resets']} |")
        L.append("")
    ab = res["runs"]["ab"]
    if ab:
        L += ["## The paper's code (A) and ours at equal work (B), alternately", "",
              "| run | what | median us/frame | p90 us | n | features or tracks / frame | note |",
              "|---:|---|---:|---:|---:|---:|---|"]
        for i, r in enumerate(ab):
            if r["who"] == "seed":
                L.append(f"| {i + 1} | A: uzh-rpg/vilib `track all frames` | {f(r.get('track_us'), '.1f')} | "
                         f"{f(r.get('track_p90_us'), '.1f')} | {r.get('track_n', '-')} | "
                         f"{f(r.get('features_per_frame'), '.0f')} | {r.get('error', '').splitlines()[0] if r.get('error') else ('conformance ' + r['conformance'] if r.get('conformance') else '')} |")
            else:
                L.append(f"| {i + 1} | B: vilib_ros `process()`, the original's work | {r['process_us']:.1f} | "
                         f"{r['p90_us']:.1f} | {r['n']} | {r['tracks_per_frame']:.0f} | |")
        L.append("")
    for k in ("seed_error", "vio_error"):
        if res.get(k):
            L += [f"**{k.replace('_', ' ')}**: {res[k]}", ""]
    if res.get("seed_note"):
        L += [res["seed_note"], ""]
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------- the command
def run_command(args) -> int:
    from vilib_ros._cuda import device_name, resolve_device
    from vilib_ros.datasets import open_dataset

    if args.frames < 100:
        raise ValueError(f"--frames must be >= 100, got {args.frames}")
    if args.rounds < 1 or args.vio_rounds < 1:
        raise ValueError("--rounds and --vio-rounds must be >= 1")
    device = resolve_device(args.device)
    missing = [m for m in ("cv2", "numba", "gtsam") if not _imports(m)]
    if missing:
        raise ValueError(f"cannot import {', '.join(missing)}: carry the wheels (../shared/tools/gpu-machine-wheels.sh; "
                         "bench/run_gpu.sh throughput installs .whl/*.whl)")
    euroc = Path(args.euroc or default_euroc())
    frames_dir = euroc / "mav0" / "cam0" / "data"
    res = {"device": device_name() if device == "cuda" else f"cpu ({device} frontend)",
           "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "host": machine(),
           "argv": sys.argv[2:] if len(sys.argv) > 2 else [], "load": [load()], "frames": args.frames,
           "euroc": str(euroc), "frontend_device": device, "runs": {"vio": [], "ab": []}}
    seed = None
    if not args.skip_seed:
        seed = Seed(args, frames_dir)
        why = seed.missing()
        if why:
            res["seed_error"], seed = why, None
            _say(f"the paper's code is left out: {why}")
        else:
            seed.start_build()            # beside the rendering: neither is timed
    seq = sequence(args)
    if seed is not None and not seed.wait_build():
        res["seed_error"], seed = seed.error, None
        _say(res["seed_error"])
    ds = open_dataset(seq)
    res["frames"] = len(ds.image_stamps(0))
    kinds = ("processes",) if args.no_threads_too else ("processes", "threads")
    for i in range(args.vio_rounds):
        for mode in ("stereo", "mono"):
            for kind in kinds:
                _say(f"whole VIO, {mode}, decoders {kind} ({i + 1}/{args.vio_rounds}): {res['frames']} frames "
                     "from PNG files")
                try:
                    r = vio_run(ds, device, mode, kind)
                except (RuntimeError, ValueError) as exc:
                    r = {"mode": mode, "decoders": kind, "error": str(exc)}
                    res["vio_error"] = str(exc).splitlines()[0]
                res["runs"]["vio"].append(r)
                if "error" not in r:
                    _say(f"  {r['frames_per_s']:.0f} frames/s, limited by {r['limit'] or 'none'}")

    def fps(mode, kind):
        return _median([r.get("frames_per_s") for r in res["runs"]["vio"]
                        if r["mode"] == mode and r.get("decoders") == kind])

    res["whole_vio_fps"], res["mono_whole_vio_fps"] = fps("stereo", "processes"), fps("mono", "processes")
    if not args.no_threads_too:
        res["whole_vio_fps_threads"] = fps("stereo", "threads")
        res["mono_whole_vio_fps_threads"] = fps("mono", "threads")
    # the paper's code and ours, in turns on the same frames
    from bench.frontend import original_work_tracker
    from bench.tracker import load_frames

    frames = load_frames(euroc)
    ft = original_work_tracker(device)
    ft.process(frames[0], 1)            # compilation, graph capture: before any run
    from bench.frontend import ORIGINAL_WORK

    res["original_work"] = ORIGINAL_WORK
    for i in range(args.rounds):
        if seed is not None:
            _say(f"the paper's code, run {i + 1}/{args.rounds}")
            r = seed.run(first=i == 0)
            res["runs"]["ab"].append({"who": "seed", **r})
            if "error" in r:
                res["seed_error"] = r["error"].splitlines()[0]
        _say(f"ours at equal work, run {i + 1}/{args.rounds}")
        res["runs"]["ab"].append({"who": "ours", **ours_run(ft, frames, args.ours_frames)})
    res["seed_track_us"] = _median([r.get("track_us") for r in res["runs"]["ab"] if r["who"] == "seed"])
    res["equal_work_us"] = _median([r["process_us"] for r in res["runs"]["ab"] if r["who"] == "ours"])
    first = next((r for r in res["runs"]["ab"] if r["who"] == "seed"), None)
    if first is not None:
        res["seed_commit"] = ((Path(args.vilib) / "src" / "VILIB_COMMIT").read_text().strip()
                              if (Path(args.vilib) / "src" / "VILIB_COMMIT").is_file() else None)
        tc = ft.config.tracker
        res["ours_tracker"] = {"mode": tc.mode, "warp": tc.warp, "template": tc.template}
        res["seed_note"] = ("A (the paper's code): uzh-rpg/vilib " + (res["seed_commit"] or "") + ", its harness "
                            "../shared/seed_bench (20 passes over the frames, tracker reset each pass; KLT without "
                            "gain or offset estimation; its track() returns before the kernels of newly detected "
                            "features finish, paid at the next frame). B (ours): "
                            f"bench.frontend.original_work_tracker, {ORIGINAL_WORK}: tracker mode {tc.mode}, warp "
                            f"{tc.warp}, template {tc.template}.")
    res["load"].append(load())
    write_results(Path(args.out), "throughput", res, markdown(res))
    return 1 if res.get("seed_error") or res.get("vio_error") else 0


def _imports(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False
