"""Synthetic visual-inertial sequences with exact ground truth (NumPy + OpenCV only).

A textured room with boxes, a smooth analytic trajectory, stereo pinhole cameras with EuRoC
intrinsics, a 200 Hz IMU with EuRoC's noise densities and bias random walk, written in the
EuRoC ASL layout (and optionally as a ROS 1 / ROS 2 bag). Imaging conditions (EuRoC's lenses, motion blur,
sensor noise, exposure steps, vignetting, camera rates, blank frames), each off by default; ``CONDITIONS``
names the accuracy benchmark's sets. See :mod:`.sequence`.
"""
from .sequence import CONDITIONS, PRESETS, SequenceConfig, SyntheticSequence, generate_sequence

__all__ = ["CONDITIONS", "PRESETS", "SequenceConfig", "SyntheticSequence", "generate_sequence"]
