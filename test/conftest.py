"""Shared fixtures and markers.

* ``gpu`` tests skip with CuPy's own reason where no CUDA device exists.
* Real EuRoC frames are read from ``$VILIB_ROS_EUROC``, else ``../shared/data/euroc_v101_head``
  beside the checkout, else ``.data/euroc_v101_head`` inside it (the GPU machine's copy).
* ROS 2 traffic stays on this machine: discovery range LOCALHOST, a per-session domain id.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# ROS domain ids of a test run derive from this seed (default: the pid); set
# VILIB_ROS_DOMAIN_SEED to keep concurrent test runs on one machine apart.
DOMAIN_SEED = int(os.environ.get("VILIB_ROS_DOMAIN_SEED", os.getpid()))

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(40 + DOMAIN_SEED % 60))
os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
os.environ.setdefault("VILIB_ROS_CHECK_LAUNCHES", "1")


def euroc_dir() -> Path | None:
    candidates = [os.environ.get("VILIB_ROS_EUROC")]
    candidates += [REPO.parent / "shared" / "data" / "euroc_v101_head", REPO / ".data" / "euroc_v101_head"]
    for c in candidates:
        if c and (Path(c) / "mav0" / "cam0" / "data.csv").is_file():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def euroc_path() -> Path:
    p = euroc_dir()
    if p is None:
        pytest.skip("real EuRoC frames not found (set VILIB_ROS_EUROC or place ../shared/data/euroc_v101_head)")
    return p


@pytest.fixture(scope="session")
def euroc_frames(euroc_path):
    """The real cam0 frames as a list of uint8 arrays (sorted by time)."""
    import cv2

    files = sorted((euroc_path / "mav0" / "cam0" / "data").glob("*.png"))
    return [cv2.imread(str(f), cv2.IMREAD_GRAYSCALE) for f in files]


def pytest_collection_modifyitems(config, items):
    from vilib_ros._cuda import cuda_available, cuda_unavailable_reason

    if not cuda_available():
        skip = pytest.mark.skip(reason=f"no CUDA device: {cuda_unavailable_reason()}")
        for item in items:
            if item.get_closest_marker("gpu") is not None:   # the marker, not a keyword (a folder may be named gpu)
                item.add_marker(skip)
