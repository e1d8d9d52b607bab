"""Data sources: EuRoC ASL folders (:mod:`.asl`) and ROS 1 / ROS 2 bags (:mod:`.bags`),
opened through :func:`open_dataset`."""
from .asl import AslDataset, Dataset, Groundtruth, open_dataset, read_tum

__all__ = ["AslDataset", "Dataset", "Groundtruth", "open_dataset", "read_tum"]
