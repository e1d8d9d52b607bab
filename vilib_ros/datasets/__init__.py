"""Data sources, one interface (:class:`~.common.Dataset`) for all of them.

* :mod:`.common`: the ``Dataset`` interface, ``Groundtruth``, the errors, TUM / EuRoC CSV I/O;
* :mod:`.asl`: EuRoC ASL folders;
* :mod:`.bags`: ROS 1 ``.bag`` and ROS 2 bags (sqlite3, mcap) through ``rosbags``;
* :mod:`.bag_writer`: any dataset written as a ROS 1 or ROS 2 bag;
* :mod:`.replay`: the time-ordered replay of a dataset with images decoded ahead;
* :func:`open_dataset`: picks the reader for a path.

Opening a dataset reads its streams only; the calibration is resolved apart
(:meth:`~.common.Dataset.resolve_calibration`, :mod:`vilib_ros.calibration`).
Imports only go downwards (calibration <- common <- asl, bags <- bag_writer, replay); nothing here
imports rclpy.
"""
from __future__ import annotations

from pathlib import Path

from .common import Dataset, DatasetError, FrameError, Groundtruth, Topics, read_tum, write_tum

__all__ = ["Dataset", "DatasetError", "FrameError", "Groundtruth", "Topics", "open_dataset", "read_tum",
           "write_tum"]


def open_dataset(path: str | Path, topics: Topics | None = None) -> Dataset:
    """Open an EuRoC ASL folder, a ROS 1 ``.bag`` or a ROS 2 bag (sqlite3 / mcap); ``topics``: a
    bag's camera and IMU topics (None or empty: the automatic choice, see :mod:`.bags`).

    Raises ``FileNotFoundError`` for a missing path and :class:`DatasetError` (a ``ValueError``)
    naming the file for anything that is not a readable dataset (or topics named for an ASL folder)."""
    from . import asl, bags

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dataset not found: {p}")
    if p.is_dir() and ((p / "mav0").is_dir() or (p.name == "mav0" and (p / "cam0").is_dir())):
        if topics:
            named = ", ".join(topics.named(k) for k in ("image", "image_right", "imu") if getattr(topics, k))
            raise DatasetError(f"{p}: an EuRoC ASL folder has no topics ({named} given): topics apply to bags")
        return asl.AslDataset(p)
    if bags.is_bag(p):
        return bags.BagDataset(p, topics)
    raise DatasetError(f"{p}: not an EuRoC ASL folder (no mav0/), a ROS 1 .bag, or a ROS 2 bag "
                       "(no metadata.yaml, .db3 or .mcap)")
