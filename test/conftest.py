"""Shared fixtures and markers (test/README.md: the markers, the groups, the environment).

* A test that starts ROS without the ``ros`` marker stops the collection (``suite_rules.py``).
* ``gpu`` tests skip with CuPy's own reason where no CUDA device exists; the compiled twin's tests
  (``compiled_twin``) where numba does not import.
* Real EuRoC frames are read from ``$VILIB_ROS_EUROC`` where it is set (alone: set it to a path
  without them, e.g. ``VILIB_ROS_EUROC=none``, to run the tests as on a fresh clone), else from
  ``../shared/data/euroc_v101_head`` beside the checkout, else ``.data/euroc_v101_head`` inside it
  (the GPU machine's copy). ``euroc_path`` / ``euroc_frames``: only for the tests that need real
  sensor images (conformance on them, the real folder's reader); skipped with the reason elsewhere.
* ``generated_sequence``: a 5 s synthetic EuRoC-format sequence rendered once per test session
  into a tmp folder, so the tests run on a fresh clone without the real frames;
  ``node_dataset`` gives each node test both inputs (``generated`` everywhere, ``euroc`` where
  the real frames are present, skipped with the reason elsewhere).
* ``sequence_path`` / ``frames``: the real EuRoC folder and frames where present, else the generated
  sequence's (752x480 like EuRoC's cam0, 101 frames): for the tests that need realistic images (two
  implementations compared on them, a tracker or a node fed with them), not real ones.
* ``ros_graph``: a node test module's ROS graph (``ros_support.RosGraph``) on a domain id of its
  own; ROS 2 traffic stays on this machine (discovery range LOCALHOST).
* Every process a test starts dies with the test process (``vilib_ros.nodes.processes``).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from suite_rules import check_markers

REPO = Path(__file__).resolve().parents[1]
# ROS domain ids of a test run derive from this seed (default: the pid); set
# VILIB_ROS_DOMAIN_SEED to keep concurrent test runs on one machine apart.
DOMAIN_SEED = int(os.environ.get("VILIB_ROS_DOMAIN_SEED", os.getpid()))

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
# the participants of this process (publishers of test images) use the project's Fast DDS profile,
# as every node process does (vilib_ros.nodes.processes.ros_env)
from vilib_ros.nodes.processes import with_fastdds_profile  # noqa: E402

with_fastdds_profile(os.environ)

#: Each module that starts nodes has a slot, its name without ``test_`` (a second domain of one module:
#: ``<name>_2``); its domain id is ros_domain(slot). Ids stay in 1..231 (Fast DDS maps ids above 232 to
#: no ports: len(DOMAIN_SLOTS) * DOMAIN_SEEDS <= 231) and two test runs with seeds that differ modulo
#: DOMAIN_SEEDS never share an id.
DOMAIN_SLOTS = ("default", "ros_player", "ros_frontend", "ros_bad_traffic", "ros_restart", "pipeline",
                "process_lifetime", "process_lifetime_2", "offline", "ros_conventions", "ros_time_reset",
                "ros_params", "broken_datasets", "determinism", "bench_node", "ros_backend_bursts", "launch_run",
                "calibration_runs", "missing_dependencies", "node_imports", "ros_take")
DOMAIN_SEEDS = 11
assert len(DOMAIN_SLOTS) * DOMAIN_SEEDS <= 231


def ros_domain(slot: str) -> int:
    """The ROS domain id of a test module (``slot`` from :data:`DOMAIN_SLOTS`) in this run."""
    if slot not in DOMAIN_SLOTS:
        raise KeyError(f"no ROS domain slot {slot!r}: add it to DOMAIN_SLOTS in test/conftest.py")
    return 1 + (DOMAIN_SEED % DOMAIN_SEEDS) * len(DOMAIN_SLOTS) + DOMAIN_SLOTS.index(slot)


os.environ.setdefault("ROS_DOMAIN_ID", str(ros_domain("default")))
os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
os.environ.setdefault("VILIB_ROS_CHECK_LAUNCHES", "1")

from vilib_ros.frontend.factory import compiled_available  # noqa: E402

#: The tests of the compiled CPU twin (numba) skip, with the reason, where numba does not import
#: (the factory then falls back to the NumPy reference; test_factory.py checks that fallback).
compiled_twin = pytest.mark.skipif(not compiled_available(), reason="numba (the compiled CPU twin's dependency) "
                                   "does not import here")


def euroc_dir() -> Path | None:
    """The real EuRoC folder: ``$VILIB_ROS_EUROC`` where set (even to a path without the frames: a
    run as on a fresh clone), else the copies beside or inside the checkout; None where absent."""
    if os.environ.get("VILIB_ROS_EUROC"):
        candidates = [os.environ["VILIB_ROS_EUROC"]]
    else:
        candidates = [REPO.parent / "shared" / "data" / "euroc_v101_head", REPO / ".data" / "euroc_v101_head"]
    for c in candidates:
        if (Path(c) / "mav0" / "cam0" / "data.csv").is_file():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def euroc_path() -> Path:
    p = euroc_dir()
    if p is None:
        pytest.skip("needs the real EuRoC frames: not found (set VILIB_ROS_EUROC or place ../shared/data/euroc_v101_head)")
    return p


#: The generated sequence of the node tests: 5 s at 20 Hz (101 frames), mono, moving slowly
#: (like the first seconds of EuRoC V1_01: most tracks live through the whole sequence).
GENERATED_SECONDS = 5.0


@pytest.fixture(scope="session")
def generated_sequence(tmp_path_factory) -> Path:
    """A synthetic EuRoC ASL folder (cam0 + sensor.yaml, imu0, ground truth), rendered once."""
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = tmp_path_factory.mktemp("generated") / "synthetic_slow"
    cfg = SequenceConfig(duration_s=GENERATED_SECONDS, stereo=False, speed=0.1, angular_rate=0.05, seed=7)
    return generate_sequence(root, cfg, progress=False, workers=1)


@pytest.fixture(scope="session", params=["generated", "euroc"])
def node_dataset(request) -> Path:
    """The input of a node test: the generated sequence, and the real EuRoC frames where present."""
    if request.param == "euroc":
        return request.getfixturevalue("euroc_path")
    return request.getfixturevalue("generated_sequence")


@pytest.fixture(scope="session")
def sequence_path(request) -> Path:
    """An ASL folder with cam0 (752x480), its calibration, the IMU and ground truth: the real EuRoC
    frames where present, else the generated sequence."""
    p = euroc_dir()
    return p if p is not None else request.getfixturevalue("generated_sequence")


@pytest.fixture(scope="session")
def frames(sequence_path) -> list:
    """The cam0 frames of :func:`sequence_path` as uint8 arrays (sorted by time): 95 real ones, or
    the generated sequence's 101."""
    return dataset_frames(sequence_path)


@pytest.fixture(scope="session")
def generated_frames(generated_sequence) -> list:
    """The first 10 frames of the generated sequence (for tests that need any real-looking frames)."""
    return dataset_frames(generated_sequence)[:10]


def dataset_frames(path: Path) -> list:
    """The cam0 frames of an ASL folder as uint8 arrays (sorted by time), read with OpenCV."""
    import cv2

    files = sorted((Path(path) / "mav0" / "cam0" / "data").glob("*.png"))
    return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]


def dataset_stamps(path: Path) -> list[int]:
    """The cam0 stamps of an ASL folder, parsed from its data.csv."""
    lines = (Path(path) / "mav0" / "cam0" / "data.csv").read_text().splitlines()
    return sorted(int(ln.split(",")[0]) for ln in lines if ln.strip() and not ln.startswith("#"))


@pytest.fixture(scope="session")
def euroc_frames(euroc_path):
    """The real cam0 frames as a list of uint8 arrays (sorted by time)."""
    import cv2

    files = sorted((euroc_path / "mav0" / "cam0" / "data").glob("*.png"))
    return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]


@pytest.fixture(scope="module")
def ros_graph(request, tmp_path_factory):
    """The test module's ROS graph (:class:`ros_support.RosGraph`): its own domain id, the environment
    of its nodes, a client, the nodes it starts (all stopped, and the client closed, when the
    module's tests are done; a scenario ends its own with ``reset()``). A test that uses it must
    carry the ``ros`` marker (checked at collection)."""
    pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
    from ros_support import RosGraph

    slot = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    graph = RosGraph(ros_domain(slot), tmp_path_factory.mktemp(f"ros_{slot}"), f"test_{slot}")
    yield graph
    graph.reset()


def live_pids(*needles: str) -> list[int]:
    """pids of live (not zombie) processes whose command line contains every one of ``needles``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and all(n in cmd for n in needles):
            pids.append(int(d.name))
    return pids


@pytest.hookimpl(tryfirst=True)        # before ``-m`` deselects: every collected test is checked
def pytest_collection_modifyitems(config, items):
    """A test that starts ROS without the ``ros`` marker is a usage error (suite_rules.py says what
    counts); ``gpu`` tests skip, with CuPy's reason, where there is no CUDA device."""
    from vilib_ros._cuda import cuda_available, cuda_unavailable_reason

    check_markers(items)
    if not cuda_available():
        skip = pytest.mark.skip(reason=f"no CUDA device: {cuda_unavailable_reason()}")
        for item in items:
            if item.get_closest_marker("gpu") is not None:   # the marker, not a keyword (a folder may be named gpu)
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_project_logger():
    """Each test starts with the project's logger as a fresh process has it. Regression: a test that
    ran the CLI in-process (``vilib_ros.cli.main``) left its stderr handler with ``propagate=False``
    on the ``vilib_ros`` logger; later tests' ``caplog`` then saw none of the project's warnings and
    the handler wrote to pytest's closed capture stream."""
    import logging

    logger = logging.getLogger("vilib_ros")
    saved = (list(logger.handlers), logger.propagate, logger.level, logger.disabled)
    yield
    logger.handlers[:] = saved[0]
    logger.propagate, logger.level, logger.disabled = saved[1], saved[2], saved[3]


def wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    """Poll ``predicate`` every ``step`` seconds until it holds or ``timeout`` seconds have passed; its
    last value (tests wait for conditions, never for a fixed time)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
