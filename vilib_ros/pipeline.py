"""``vilib-ros run [DATASET]``: replay a dataset through player, frontend and backend processes.

The same node processes the launch files start (``python -m vilib_ros.nodes.<node>
--ros-args ...``) talk over DDS on this machine only (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``,
a ``ROS_DOMAIN_ID`` picked from this process's id unless ``--domain-id`` is given). A
recorder_node writes every tracks and odometry message to ``recorded.jsonl``; afterwards
this command writes into the run's output folder, see :mod:`vilib_ros.pipeline_report`:

* ``tracks.mp4`` (H.264) where OpenCV's writer has it, else ``tracks.webm`` (VP8), else
  ``tracks.mp4`` (MPEG-4 Part 2, which browsers do not play: said so), else ``tracks_frames/*.png``
  + ``tracks.gif`` -- the images with the received tracks drawn;
* ``trajectory_tum.txt`` (from the backend) and ``groundtruth_tum.txt`` where there is ground truth;
* ``trajectory.png``: the trajectory against ground truth (SE(3)-aligned), when both exist;
* ``timing.json``: per-stage frontend times, latency, backend per-frame time, wall times;
* ``report.md``: a short summary, where every calibration value came from, what each node received
  against what the player sent, the frames the player skipped, the dataset's warnings, the time to
  the first frame (compile, start-up, first frame) beside the replay's; ``logs/*.log``: each
  process's output; ``params.yaml``; ``*_stats.json``: each node's own summary.

Output folder: each run its own (:func:`vilib_ros.run_setup.run_folder`): by default a new
``./vilib_ros_output/<name>/<date>_<time>`` (``latest`` points to the newest); ``--out DIR`` must be
new or empty, or is emptied first with ``--overwrite``. The path is printed at the start and the end.

Calibration (:mod:`vilib_ros.calibration`, :func:`vilib_ros.run_setup.open_for_run`):
``--calibration`` (Kalibr camchain or EuRoC sensor.yaml), ``--imu-calibration`` (Kalibr imu.yaml
or EuRoC imu0/sensor.yaml), else what the dataset holds, else EuRoC's defaults for a bag on EuRoC's
own topics only (said loudly); anything else without calibration is refused with one line naming
the ways to give it. A bag's topics: ``--image-topic``, ``--image-right-topic``, ``--imu-topic``,
else the calibration files' ``rostopic``, else EuRoC's names, else the only topic of its type.

Without DATASET a short synthetic stereo-inertial sequence is generated
(:func:`vilib_ros.synthetic.generate_sequence`) into ``vilib_ros_output/generated/`` (reused while
its settings are the same) and replayed, so ``vilib-ros run`` works end to end on a fresh machine
without a GPU. Before the nodes start, this process compiles (first run) or loads the compiled CPU
kernels the nodes will load from the same cache (:func:`vilib_ros.run_setup.warm_kernels`), and
the nodes run in the output folder so that they import the package this command imported.

A dataset that cannot be opened, or whose calibration is missing, is an error before anything is
started or written (exit 2, no output folder). A frame that cannot be read is skipped by the player and counted; the run
goes on. The replay starts only when every node has matched every topic it takes (the
backend's IMU subscription included). Ctrl-C, SIGTERM or the death of this process stops
every child (SIGINT, then SIGTERM, then SIGKILL; children also die with this process, see
:mod:`vilib_ros.nodes.processes`) and still writes what there is (exit 130); a child that dies
unexpectedly makes the command exit 1, after writing what there is.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from vilib_ros.allocator import with_jemalloc
from vilib_ros.interrupts import install_stop_handlers, raise_if_stop_requested, settle_stop
from vilib_ros.nodes.processes import NodeProcess, node_argv, ros_env
from vilib_ros.pipeline_report import read_json, read_jsonl, write_outputs  # noqa: F401 (read_jsonl: old import path)
from vilib_ros.run_setup import config_dict as _config_dict  # noqa: F401 (old import path)
from vilib_ros.run_setup import generated_config as _generated_config  # noqa: F401 (old import path)

NODES = ("recorder_node", "backend_node", "frontend_node")


def configure_parser(p) -> None:
    p.add_argument("dataset", nargs="*", default=None,
                   help="EuRoC ASL folder, ROS 1 .bag or ROS 2 bag folder (default: generate a synthetic sequence); "
                        "several with --offline")
    p.add_argument("--offline", action="store_true",
                   help="player, frontend and backend in one process tree without ROS (vilib_ros.offline); "
                        "several datasets give a summary table")
    p.add_argument("--jobs", type=int, default=1,
                   help="with --offline and several datasets: run this many at a time in parallel processes "
                        "(the summary gives the batch's aggregate frames/s beside each sequence's)")
    p.add_argument("--out", default=None,
                   help="output folder, new or empty (default: a new ./vilib_ros_output/<name>/<date>_<time> per run)")
    p.add_argument("--overwrite", action="store_true", help="empty an existing --out folder first")
    p.add_argument("--calibration", metavar="FILE", default=None,
                   help="camera calibration: Kalibr camchain-imucam.yaml (cam0, cam1: intrinsics, distortion, "
                        "T_cam_imu) or an EuRoC cam0 sensor.yaml (default: what the dataset holds)")
    p.add_argument("--imu-calibration", metavar="FILE", default=None,
                   help="IMU noise: Kalibr imu.yaml or an EuRoC imu0/sensor.yaml (default: what the dataset holds)")
    p.add_argument("--image-topic", default=None,
                   help="a bag's left camera topic (default: the calibration's cam0 rostopic, else /cam0/image_raw, "
                        "else the only sensor_msgs/Image topic)")
    p.add_argument("--image-right-topic", default=None,
                   help="a bag's right camera topic (default: the calibration's cam1 rostopic, else /cam1/image_raw "
                        "beside /cam0/image_raw, else mono)")
    p.add_argument("--imu-topic", default=None,
                   help="a bag's IMU topic (default: the IMU calibration's rostopic, else /imu0, else the only "
                        "sensor_msgs/Imu topic)")
    p.add_argument("--rate", type=float, default=0.0,
                   help="replay speed, 1.0 = real time; 0 = as fast as the frontend accepts (default)")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="frontend device")
    p.add_argument("--duration", type=float, default=10.0, help="length of the generated sequence, s")
    p.add_argument("--max-frames", type=int, default=0, help="replay at most this many frames (0 = all)")
    p.add_argument("--loops", type=int, default=1,
                   help="replay the dataset this many times, the clock running on (soak tests)")
    p.add_argument("--mono", action="store_true", help="use cam0 only even where the dataset is stereo")
    p.add_argument("--no-backend", action="store_true", help="run the backend in record-only mode")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: picked from the pid)")
    p.add_argument("--namespace", default="",
                   help="put every topic of the run under /NAMESPACE (keeps runs that share a domain apart)")
    p.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0 = never)")
    p.add_argument("--no-video", action="store_true", help="skip the tracks video")


def pick_domain_id() -> int:
    # 101..200: away from the default 0 and the small ids people set by hand.
    return 101 + (os.getpid() % 100)


def _say(msg: str) -> None:
    print(f"vilib-ros run: {msg}", file=sys.stderr, flush=True)


def _reason(child) -> str:
    """``: <reason>`` from a node's log where it said why it could not start (run_node's
    ``<Node>: cannot start: ...`` line), else the log's path."""
    lines = child.output().splitlines()
    said = [ln for ln in lines if ": cannot start: " in ln]
    if said:
        return ": " + said[-1].split(": cannot start: ", 1)[1]
    return f" (its log: {child.log_path})" if getattr(child, "log_path", None) else ""


def _death(child) -> str:
    return f"{child.name} (rc {child.poll()}){_reason(child)}"


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


def _prepare(args, who: str = "vilib-ros run") -> tuple:
    """Open (or generate) the dataset and resolve its calibration, then create the run's output
    folder: ``(ds, ds_path, out, name, calibration)``. A dataset that cannot be opened or whose
    calibration is missing raises before anything is written."""
    from vilib_ros.run_setup import generated_sequence, open_for_run, run_folder

    if args.dataset:
        ds_path = Path(args.dataset)
        ds, cal = open_for_run(ds_path, args)
        name = ds_path.stem if ds_path.suffix == ".bag" else ds_path.resolve().name
    else:
        given = [f for f in ("calibration", "imu_calibration", "image_topic", "image_right_topic", "imu_topic")
                 if getattr(args, f, None)]
        if given:
            raise ValueError(f"--{given[0].replace('_', '-')} applies to a DATASET; the generated sequence "
                             "has its own calibration")
        ds_path = generated_sequence(args.duration, who)
        ds, cal = open_for_run(ds_path, args)
        name = "synthetic"
    try:
        out = run_folder(args.out, name, getattr(args, "overwrite", False))
    except BaseException:
        ds.close()
        raise
    return ds, ds_path, out, name, cal


def _node_params(args, out: Path, ds, ds_path: Path, stereo: bool, cal) -> dict:
    """params.yaml (and the calibration files it names) for every node: the cameras and IMU noise
    of the resolved calibration ``cal``, the bag topics the player replays."""
    import yaml

    def write_yaml(path: Path, d: dict):
        path.write_text(yaml.safe_dump(d, sort_keys=False))

    write_yaml(out / "cam0.yaml", cal.cameras[0].to_euroc_dict())
    if stereo:
        write_yaml(out / "cam1.yaml", cal.cameras[1].to_euroc_dict())
    if cal.imu_noise is not None:
        write_yaml(out / "imu0.yaml", {k: float(v) for k, v in cal.imu_noise.items() if isinstance(v, (int, float))})
    topics = getattr(ds, "topics", None)
    calib = {"camera_yaml": str(out / "cam0.yaml"), "stereo": stereo}
    if stereo:
        calib["right.camera_yaml"] = str(out / "cam1.yaml")
    params = {
        "frontend_node": {"ros__parameters": dict(calib, device=args.device, queue_size=100, stereo_timeout_s=1.0,
                                                  # our own player: reliable, so no image is lost, and
                                                  # the IMU up to each image is on its way: wait for it
                                                  # however loaded the machine (the same run gives the
                                                  # same tracks every time)
                                                  input_reliability="reliable", imu_wait_s=5.0,
                                                  stats_path=str(out / "frontend_stats.json"))},
        "backend_node": {"ros__parameters": dict(calib, estimator="none" if args.no_backend else "auto",
                                                 input_reliability="reliable", imu_wait_s=10.0 if ds.has_imu else 0.0,
                                                 imu_yaml=str(out / "imu0.yaml") if cal.imu_noise is not None else "",
                                                 trajectory_path=str(out / "trajectory_tum.txt"),
                                                 stats_path=str(out / "backend_stats.json"))},
        "player_node": {"ros__parameters": {"dataset": str(Path(ds_path).resolve()), "rate": float(args.rate),
                                            "image_topic": (topics.image or "") if topics else "",
                                            "image_right_topic": (topics.image_right or "") if topics else "",
                                            "imu_topic": (topics.imu or "") if topics else "",
                                            "max_frames": int(args.max_frames), "publish_cam1": stereo,
                                            "loops": int(args.loops),
                                            "exit_when_done": True, "progress": False,
                                            # frontend on the images; frontend and backend on the IMU
                                            "wait_for_subscribers": 1, "wait_for_imu_subscribers": 2,
                                            "wait_timeout_s": 120.0, "backpressure_timeout_s": 10.0,
                                            # the backend may lag the frontend by 2 s of frames, no
                                            # more: it catches up instead of overflowing its queues
                                            "backend_lag_frames": 0 if args.no_backend or not ds.has_imu else 40,
                                            "stats_path": str(out / "player_stats.json")}},
        "recorder_node": {"ros__parameters": {"output": str(out / "recorded.jsonl"), "topics": [
            "tracks:sensor_msgs/msg/PointCloud", "odometry:nav_msgs/msg/Odometry"]}},
    }
    if args.namespace.strip("/"):
        # nodes under a namespace: their parameter sections must match /<ns>/<node>
        params = {f"/**/{k}": v for k, v in params.items()}
    write_yaml(out / "params.yaml", params)
    return params


REMAPS = {
    "frontend_node": {"image": "/cam0/image_raw", "image_right": "/cam1/image_raw", "imu": "/imu0",
                      "tracks": "/tracks"},
    "backend_node": {"imu": "/imu0", "tracks": "/tracks"},
    "player_node": {"cam0/image_raw": "/cam0/image_raw", "cam1/image_raw": "/cam1/image_raw",
                    "imu0": "/imu0", "tracks": "/tracks"},
    "recorder_node": {"tracks": "/tracks", "odometry": "/odometry"},
}


class _LineCounter:
    """Counts the complete lines of a growing file that contain ``needle``, reading only what is new."""

    def __init__(self, path: Path, needle: bytes):
        self.path, self.needle = path, needle
        self.offset, self.n = 0, 0

    def count(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return self.n
        end = chunk.rfind(b"\n") + 1          # a line still being written is counted next time
        self.n += sum(1 for line in chunk[:end].split(b"\n") if self.needle in line)
        self.offset += end
        return self.n


class _Run:
    """The child processes of one run and the loop that watches them."""

    def __init__(self, args, out: Path, env: dict, domain_id: int, stereo: bool, n_images: int):
        self.args, self.out, self.env, self.domain_id = args, out, env, domain_id
        self.stereo, self.n_images = stereo, n_images
        self.children: dict[str, NodeProcess] = {}
        self.cpu_reason_said = False
        self.t_first: float | None = None       # when the first tracks message was recorded
        ns = args.namespace.strip("/")
        self.prefix = f"/{ns}" if ns else ""     # topics of this run: <prefix>/cam0/image_raw, ...

    def start(self, node: str) -> None:
        remaps = {k: self.prefix + v for k, v in REMAPS[node].items()}
        if self.prefix:
            remaps["__ns"] = self.prefix       # the nodes' own topics (odometry, path, ...) go there too
        # the backend with jemalloc where installed (vilib_ros.allocator: gtsam's small allocations)
        env = with_jemalloc(dict(self.env)) if node == "backend_node" else self.env
        # in the output folder: a node started in a checkout would import the checkout, not the
        # package this process runs (vilib_ros.nodes.processes)
        self.children[node] = NodeProcess(node, node_argv(node, remaps=remaps, params_file=self.out / "params.yaml"),
                                          env, self.out / "logs" / f"{node}.log", cwd=self.out)

    def say_cpu_fallback(self) -> None:
        """Print the frontend's CUDA fallback reason once (it is otherwise only in its log)."""
        fe = self.children.get("frontend_node")
        if self.cpu_reason_said or fe is None:
            return
        for line in fe.output().splitlines():
            if "using the CPU path" in line:
                _say("frontend: " + line[line.index("CUDA"):] if "CUDA" in line else line.strip())
                self.cpu_reason_said = True
                return

    def watch(self, t_start: float) -> None:
        """Until the player is done and the last tracks arrived (bounded); raises RuntimeError on a
        child's death or the timeout."""
        from tqdm import tqdm

        # the bar starts at the first frame: before it nothing moves, and a rate (and ETA) measured
        # from the bar's creation would count the frontend's start as frames
        bar = None
        received, expect, player_done_at = 0, self.n_images, None
        counter = _LineCounter(self.out / "recorded.jsonl", b'"topic": "tracks"')
        try:
            while True:
                time.sleep(0.2)
                raise_if_stop_requested()
                self.say_cpu_fallback()
                n = counter.count()
                if n > received:
                    if bar is None:
                        self.t_first = time.monotonic()
                        bar = tqdm(total=self.n_images, initial=n, unit="frame", desc="tracks", file=sys.stderr,
                                   mininterval=0.5)
                    else:
                        bar.update(n - received)
                    received = n
                for c in self.children.values():
                    code = c.poll()
                    if code is None:
                        continue
                    if c.name == "player_node" and code == 0:
                        if player_done_at is None:
                            player_done_at = time.monotonic()
                            sent = (read_json(self.out / "player_stats.json").get("images") or [None])[0]
                            expect = self.n_images if sent is None else sent
                        continue
                    raise RuntimeError(f"{c.name} exited unexpectedly with code {code}" + _reason(c))
                # the last frames may still be in flight: wait for them (bounded)
                if player_done_at is not None and (received >= expect or time.monotonic() - player_done_at > 15.0):
                    self._wait_for_backend()
                    return
                if self.args.timeout and time.monotonic() - t_start > self.args.timeout:
                    raise RuntimeError(f"timed out after {self.args.timeout:g} s")
        finally:
            if bar is not None:
                bar.close()

    def _wait_for_backend(self, quiet_s: float = 3.0, limit_s: float = 120.0) -> None:
        """The backend may lag behind the frontend (the player paces by the frontend only): wait
        until its odometry stops growing for ``quiet_s`` (at most ``limit_s``), so that stopping
        the nodes does not count its backlog as lost."""
        if self.args.no_backend:
            return
        odom = _LineCounter(self.out / "recorded.jsonl", b'"topic": "odometry"')
        last, t_last, t_end = odom.count(), time.monotonic(), time.monotonic() + limit_s
        while time.monotonic() < t_end and time.monotonic() - t_last < quiet_s:
            time.sleep(0.5)
            raise_if_stop_requested()
            n = odom.count()
            if n != last:
                last, t_last = n, time.monotonic()

    def stop(self) -> dict:
        codes = {}
        try:
            for node in ("player_node", "frontend_node", "backend_node", "recorder_node"):
                if node in self.children:
                    codes[node] = self.children[node].stop(timeout=60.0 if node == "backend_node" else 20.0)
        except KeyboardInterrupt:   # interrupted again while stopping: no more waiting
            for c in self.children.values():
                c.kill()
            raise
        return codes


def run_command(args) -> int:
    if not args.no_backend:
        # said before anything starts (the backend node would refuse after the dataset was read)
        from vilib_ros.dependencies import MissingDependency, require_backend

        try:
            require_backend(load=False)
        except MissingDependency as exc:
            raise MissingDependency(f"{exc}; --no-backend runs without the backend") from None
    if args.device == "cuda":
        # said before anything starts (it was the frontend node's start-up failure, after the dataset
        # was read and three nodes were started)
        from vilib_ros._cuda import CudaUnavailable, resolve_device

        try:
            resolve_device("cuda")
        except CudaUnavailable as exc:
            raise ValueError(f"--device cuda: {exc}; --device auto runs the frontend on the CPU here") from None
    if args.offline:
        from vilib_ros.offline import run_offline

        return run_offline(args)
    if args.dataset and len(args.dataset) > 1:
        raise ValueError("several datasets need --offline")
    args.dataset = args.dataset[0] if args.dataset else None
    t_start = time.monotonic()
    if args.loops < 1:
        raise ValueError(f"--loops must be >= 1, got {args.loops}")
    if args.namespace and not all(part.isidentifier() for part in args.namespace.strip("/").split("/")):
        raise ValueError(f"--namespace must be a ROS name (letters, digits, _ and /), got {args.namespace!r}")
    if args.domain_id is not None and not 0 <= args.domain_id <= 232:
        raise ValueError(f"--domain-id must be in 0..232 (the ids DDS maps to UDP ports), got {args.domain_id}")
    # clean up the children and write what there is (Terminated, a KeyboardInterrupt; re-delivered
    # where a finaliser swallowed it)
    install_stop_handlers((signal.SIGTERM, signal.SIGHUP))
    ds, ds_path, out, name, cal = _prepare(args)
    out = out.resolve()
    _say(f"output folder {out}")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    n_images = len(ds.image_stamps(0)) if args.max_frames <= 0 else min(len(ds.image_stamps(0)), args.max_frames)
    n_images *= args.loops
    stereo = len(cal.cameras) >= 2 and not args.mono
    warnings = list(getattr(ds, "warnings", []))
    if not ds.has_imu and not args.no_backend:
        warnings.append("the dataset has no IMU: the backend cannot estimate a trajectory without it "
                        "(the frontend tracks without IMU prediction)")
    wall = {"prepare": time.monotonic() - t_start, "compile": 0.0, "startup": 0.0, "replay": 0.0}
    _node_params(args, out, ds, ds_path, stereo, cal)
    domain_id = args.domain_id if args.domain_id is not None else pick_domain_id()
    run = _Run(args, out, ros_env(domain_id), domain_id, stereo, n_images)
    _say(f"{ds!r}\n  {n_images} frames, {'stereo' if stereo else 'mono'}, rate "
         f"{'backpressure' if args.rate <= 0 else args.rate}, ROS_DOMAIN_ID={domain_id}")
    from vilib_ros.run_setup import say_calibration, warm_kernels

    say_calibration("vilib-ros run", cal)
    for w in warnings:
        _say(f"warning: {w}")
    t_compile0 = time.monotonic()
    kernels = warm_kernels("vilib-ros run", cal, stereo, args.device, backend=not args.no_backend and ds.has_imu)
    wall["compile"] = time.monotonic() - t_compile0
    wall["kernels_compiled"] = kernels["compiled"]

    rc, status = 0, "completed"
    t_startup0 = t_replay0 = time.monotonic()
    try:
        try:
            for node in NODES:
                run.start(node)
            need = {run.prefix + "/cam0/image_raw": 1, run.prefix + "/tracks": 2, run.prefix + "/imu0": 2}
            if stereo:
                need[run.prefix + "/cam1/image_raw"] = 1
            if not _wait_for_graph(domain_id, need, 120.0, list(run.children.values())):
                dead = [c for c in run.children.values() if c.poll() is not None]
                raise RuntimeError("node exited during start-up: " + "; ".join(_death(c) for c in dead)
                                   if dead else "nodes did not discover each other within 120 s")
            run.say_cpu_fallback()
            t_replay0 = time.monotonic()
            wall["startup"] = t_replay0 - t_startup0
            run.start("player_node")
            run.watch(t_start)
        finally:
            wall["replay"] = time.monotonic() - t_replay0
            if run.t_first is not None:
                wall["first_frame"] = run.t_first - t_replay0
                wall["to_first_frame"] = run.t_first - t_start
            codes = run.stop()
    except KeyboardInterrupt:
        settle_stop()
        rc, status = 130, "interrupted"
        codes = {}
    except RuntimeError as exc:
        rc, status = 1, f"FAILED: {exc}"
        codes = {}
    if rc:
        _say(status)
        if rc == 1:
            for c in run.children.values():
                print(f"--- {c.name} (exit {c.proc.returncode}), last lines of {c.log_path}:\n{c.tail()}",
                      file=sys.stderr)
    bad_exit = {k: v for k, v in codes.items() if v not in (0, None, -signal.SIGINT)}
    if bad_exit and not rc:
        _say(f"a node failed while shutting down: {bad_exit}")
        for k in bad_exit:
            print(f"--- {k}:\n{run.children[k].tail()}", file=sys.stderr)
        rc, status = 1, f"FAILED: a node failed while shutting down: {bad_exit}"

    t_post0 = time.monotonic()
    _say("writing what there is" if rc else "writing the outputs")
    summary = write_outputs(out, ds, args, stereo, wall, domain_id, name, status, warnings, cal)
    wall["outputs"] = time.monotonic() - t_post0
    _summarise(summary, out, warnings)
    if not rc and summary["tracks_messages"] == 0:
        _say("no frame was tracked" + (f" (every frame skipped: {summary['skipped']})" if summary["skipped"] else ""))
        rc = 1
    return rc


def _summarise(summary: dict, out: Path, warnings: list[str]) -> None:
    n = summary["n_images"]
    skipped = summary["skipped"]
    lost = [f"{r['stream']}: {r['lost']} lost" for r in summary["counts"] if r.get("lost")]
    parts = [f"{summary['tracks_messages']}/{n} frames tracked"]
    if skipped:
        parts.append("skipped unreadable frames: " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    if lost:
        parts.append("; ".join(lost))
    if summary["ape"]:
        parts.append(f"APE RMSE {summary['ape']['ape_rmse_m']:.3f} m")
    if summary.get("device"):
        parts.append(f"frontend on {summary['device']}")
    _say("; ".join(parts) + f"; outputs in {out}" + (f" ({len(warnings)} warning(s) in report.md)" if warnings else ""))
    if "do not play" in (summary.get("video_kind") or ""):
        _say(f"the tracks video is {summary['video_kind']}: see report.md for what plays it")
