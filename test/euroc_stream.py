"""The real EuRoC stream as the ROS tests publish it: image stamps and IMU rows from the ASL csv files."""
from __future__ import annotations

import numpy as np


def image_stamps(euroc_path) -> list[int]:
    lines = (euroc_path / "mav0" / "cam0" / "data.csv").read_text().splitlines()
    return sorted(int(ln.split(",")[0]) for ln in lines if ln and not ln.startswith("#"))


def imu_rows(euroc_path):
    """(t_ns (N,), gyro (N, 3), acc (N, 3))."""
    rows = np.array([ln.split(",") for ln in (euroc_path / "mav0" / "imu0" / "data.csv").read_text().splitlines()
                     if ln and not ln.startswith("#")], dtype=np.float64)
    return rows[:, 0].astype(np.int64), rows[:, 1:4], rows[:, 4:7]


def publish_imu_until(pub, t_imu, gyro, acc, j: int, t_end: int, offset: int = 0) -> int:
    """Publish the IMU rows from index ``j`` up to stamp ``t_end``; returns the next index."""
    from vilib_ros.nodes.conversions import arrays_to_imu

    while j < len(t_imu) and t_imu[j] <= t_end:
        pub.publish(arrays_to_imu(int(t_imu[j]) + offset, gyro[j], acc[j]))
        j += 1
    return j
