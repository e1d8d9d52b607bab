"""Data sources, one interface (:class:`~.common.Dataset`) for all of them.

* :mod:`.common`: the ``Dataset`` interface, ``Groundtruth``, the errors, TUM / EuRoC CSV I/O;
* :mod:`.asl`: EuRoC ASL folders;
* :mod:`.bags`: ROS 1 ``.bag`` and ROS 2 bags (sqlite3, mcap) through ``rosbags``;
* :mod:`.bag_writer`: any dataset written as a ROS 1 or ROS 2 bag;
* :mod:`.replay`: the time-ordered replay of a dataset with images decoded ahead;
* :func:`open_dataset`: picks the reader for a path.

Imports only go downwards (common <- asl, bags <- bag_writer, replay); nothing here imports rclpy.
"""
from __future__ import annotations

from pathlib import Path

from .common import Dataset, DatasetError, FrameError, Groundtruth, read_tum, write_tum

__all__ = ["Dataset", "DatasetError", "FrameError", "Groundtruth", "open_dataset", "read_tum", "write_tum"]


def open_dataset(path: str | Path) -> Dataset:
    """Open an EuRoC ASL folder, a ROS 1 ``.bag`` or a ROS 2 bag (sqlite3 / mcap).

    Raises ``FileNotFoundError`` for a missing path and :class:`DatasetError` (a ``ValueError``)
    naming the file for anything that is not a readable dataset."""
    from . import asl, bags

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"dataset not found: {p}")
    if p.is_dir() and ((p / "mav0").is_dir() or (p.name == "mav0" and (p / "cam0").is_dir())):
        return asl.AslDataset(p)
    if bags.is_bag(p):
        return bags.BagDataset(p)
    raise DatasetError(f"{p}: not an EuRoC ASL folder (no mav0/), a ROS 1 .bag, or a ROS 2 bag "
                       "(no metadata.yaml, .db3 or .mcap)")
