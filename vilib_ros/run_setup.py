"""What both paths of ``vilib-ros run`` (ROS nodes, ``--offline``) do before the replay.

* :func:`open_for_run`: the dataset with its calibration, resolved from the user's files, the
  dataset's own or (EuRoC's own bags only, said so) EuRoC's defaults; a bag's topics from the
  ``--*-topic`` flags, else the calibration files' ``rostopic``, else the automatic choice.
* :func:`run_folder`: each run writes its own folder: by default a new one per run,
  ``vilib_ros_output/<name>/<date>_<time>`` (``latest`` beside it points to the newest); ``--out DIR``
  that exists and is not empty is refused unless ``--overwrite``, which empties it first.
* :func:`generated_sequence`: the generated sequence of a run without a dataset lives apart from
  the runs, in ``vilib_ros_output/generated/synthetic_<duration>s``, and is reused (said so) while
  its settings are the same.
* :func:`warm_kernels`: the compiled CPU functions (numba, cached on disk) compiled or loaded in
  this process before any node starts, so that the nodes load them from the same cache; where
  that takes long (the first run) the console says what it does and how long it took.

No rclpy here.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

OUTPUT_ROOT = Path("vilib_ros_output")
#: seconds after which the warm-up counts as a compilation and says so
COMPILE_NOTICE_S = 3.0


def say(who: str, msg: str) -> None:
    print(f"{who}: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- dataset + calibration
def topics_for(args, given) -> "object":
    """The bag topics: each from its flag, else the calibration files' ``rostopic`` (cam0, cam1,
    the IMU), else None (the automatic choice); ``origin`` names who gave each."""
    from vilib_ros.datasets import Topics

    t = Topics()
    flags = {"image": "image_topic", "image_right": "image_right_topic", "imu": "imu_topic"}
    for key, attr in flags.items():
        v = getattr(args, attr, None)
        if v:
            setattr(t, key, v)
            t.origin[key] = "--" + attr.replace("_", "-")
    if given is not None:
        files = {"image": (given.camera(0).rostopic, f"cam0 rostopic of {getattr(args, 'calibration', '')}"),
                 "image_right": (given.camera(1).rostopic if 1 in given.cameras else None,
                                 f"cam1 rostopic of {getattr(args, 'calibration', '')}"),
                 "imu": (given.imu_rostopic, f"rostopic of {getattr(args, 'imu_calibration', '')}")}
        for key, (topic, origin) in files.items():
            if getattr(t, key) is None and topic:
                setattr(t, key, topic)
                t.origin[key] = origin
    return t


def open_for_run(path, args):
    """``(dataset, calibration)``: the dataset opened with the run's topics and its calibration
    resolved (``--calibration``, ``--imu-calibration``) and set on it. Cameras: cam0 only with
    ``--mono``; the IMU noise where the dataset has an IMU and the backend runs. Raises the
    user errors (missing file, DatasetError, CalibrationMissing / CalibrationError) before
    anything is written."""
    from vilib_ros.calibration import read_given
    from vilib_ros.datasets import open_dataset
    from vilib_ros.datasets.bags import is_bag

    if not Path(path).exists():
        raise FileNotFoundError(f"dataset not found: {path}")
    given = read_given(getattr(args, "calibration", None), getattr(args, "imu_calibration", None))
    topics = topics_for(args, given)
    if not is_bag(path):
        # a calibration file's rostopics only choose a bag's topics; a flag for a folder is refused
        for key in ("image", "image_right", "imu"):
            if not topics.origin.get(key, "").startswith("--"):
                setattr(topics, key, None)
                topics.origin.pop(key, None)
    ds = open_dataset(path, topics)
    try:
        need_imu = ds.has_imu and not getattr(args, "no_backend", False)
        cal = ds.resolve_calibration(given, 1 if getattr(args, "mono", False) else None, need_imu)
    except BaseException:
        ds.close()
        raise
    ds.use_calibration(cal)
    return ds, cal


def say_calibration(who: str, cal) -> None:
    for line in cal.console_lines():
        say(who, line)


# ----------------------------------------------------------------------------- output folders
def run_folder(out: str | Path | None, name: str, overwrite: bool = False, root: Path = OUTPUT_ROOT) -> Path:
    """The folder of one run, created empty: ``out`` (refused where it exists and is not empty,
    unless ``overwrite``, which empties it), else a new ``root/<name>/<date>_<time>`` with a
    ``latest`` link beside it."""
    if out is not None:
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise FileExistsError(f"--out {out} is a file, not a folder")
        if out.is_dir() and any(out.iterdir()):
            if not overwrite:
                raise FileExistsError(f"--out {out} exists and is not empty: give --overwrite to replace what "
                                      "is in it, or another --out")
            for p in out.iterdir():
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        out.mkdir(parents=True, exist_ok=True)
        return out
    base = Path(root) / name
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    for k in range(1, 1000):
        folder = base / (stamp if k == 1 else f"{stamp}_{k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        latest = base / "latest"
        try:
            if latest.is_symlink() or not latest.exists():
                latest.unlink(missing_ok=True)
                latest.symlink_to(folder.name)
        except OSError:
            pass        # a file system without links: the path printed is what counts
        return folder
    raise FileExistsError(f"{base}: no free run folder name for {stamp}")


# ----------------------------------------------------------------------------- generated sequence
def config_dict(cfg) -> dict:
    """The generator's settings as ``synthetic.yaml`` holds them (YAML types: tuples as lists)."""
    import yaml
    from dataclasses import asdict

    return yaml.safe_load(yaml.safe_dump({k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}))


def generated_config(ds_path: Path) -> dict | None:
    """The settings in a generated sequence's ``synthetic.yaml`` (None: none readable)."""
    import yaml

    try:
        return yaml.safe_load((Path(ds_path) / "synthetic.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None


def generated_sequence(duration_s: float, who: str, root: Path = OUTPUT_ROOT) -> Path:
    """The default synthetic stereo sequence of ``duration_s`` seconds in
    ``root/generated/synthetic_<duration>s``: reused where its settings are these (said so), else
    generated there (said so). The duration is checked before any folder exists."""
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    cfg = SequenceConfig(duration_s=float(duration_s))
    ds_path = Path(root) / "generated" / f"synthetic_{float(duration_s):g}s"
    if (ds_path / "mav0").is_dir() and generated_config(ds_path) == config_dict(cfg):
        say(who, f"reusing the sequence generated in {ds_path} (same settings)")
        return ds_path
    again = " again (the one there has other settings)" if (ds_path / "mav0").is_dir() else ""
    say(who, f"generating a {duration_s:g} s synthetic stereo sequence in {ds_path}{again}")
    # rendering workers are spawned processes that re-import __main__; from an interactive or
    # ``python -c`` session render in this process instead
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    generate_sequence(ds_path, cfg, progress=True, workers=None if main_file else 1, overwrite=True)
    return ds_path


# ----------------------------------------------------------------------------- compiled kernels
def _warm_backend() -> None:
    """The backend's compiled functions (what VioEstimator's constructor warms up)."""
    from vilib_ros.backend.estimator import warm_up

    warm_up()


def _warm_frontend(cal, stereo: bool) -> None:
    """The CPU frontend's compiled functions, through the tracker the nodes build and the
    synthetic frames the frontend node runs first."""
    import numpy as np

    from vilib_ros.frontend import FeatureTracker, FrontendConfig
    from vilib_ros.nodes.frontend_setup import warm_up

    c0 = cal.cameras[0]
    kw = {}
    if stereo:
        c1 = cal.cameras[1]
        kw = {"camera_right": c1, "T_right_left": np.linalg.inv(c1.T_BS) @ c0.T_BS}
    warm_up(FeatureTracker(c0, FrontendConfig(), device="cpu", **kw), 3, c0, stereo)


def warm_kernels(who: str, cal, stereo: bool, device: str, backend: bool) -> dict:
    """Compile (first run) or load (later runs) the compiled CPU functions the run will use, the
    frontend's here and the backend's in a child process at the same time; says so where it takes
    longer than :data:`COMPILE_NOTICE_S`. Returns ``{"seconds", "compiled", "where"}``."""
    from vilib_ros._cuda import resolve_device
    from vilib_ros.frontend.factory import cache_location, cpu_implementation

    if cpu_implementation() != "numba":
        return {"seconds": 0.0, "compiled": False, "where": None}
    frontend = resolve_device(device) == "cpu"
    if not frontend and not backend:
        return {"seconds": 0.0, "compiled": False, "where": None}
    where = cache_location()
    t0 = time.monotonic()
    done = threading.Event()

    def notice():
        if not done.wait(COMPILE_NOTICE_S):
            parts = " and ".join(p for p, on in (("CPU frontend", frontend), ("backend", backend)) if on)
            say(who, f"compiling the {parts} kernels (numba, once: later runs load them from the cache in "
                     f"{where}) ...")

    threading.Thread(target=notice, daemon=True).start()
    child = None
    if backend:
        import multiprocessing as mp

        child = mp.get_context("spawn").Process(target=_warm_backend, name="vilib_ros-warm-backend", daemon=True)
        child.start()
    try:
        if frontend:
            _warm_frontend(cal, stereo)
        if child is not None:
            child.join()
    finally:
        done.set()
        if child is not None and child.is_alive():
            child.terminate()
    seconds = time.monotonic() - t0
    compiled = seconds >= COMPILE_NOTICE_S
    if compiled:
        say(who, f"kernels compiled in {seconds:.1f} s (cached in {where})")
    return {"seconds": seconds, "compiled": compiled, "where": where}

