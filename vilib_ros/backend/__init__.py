"""Sliding-window visual-inertial backend (gtsam >= 4.3a1): see :mod:`vilib_ros.backend.estimator`.

``from vilib_ros.backend import BackendConfig, VioEstimator, VioState``. The configuration imports
with NumPy alone (a node lists its parameters without the backend's dependencies); the estimator's
module (numba, scipy) loads on first use of ``VioEstimator``, and gtsam when one is constructed. The
submodules import each other directly, never this package.
"""
from .config import BackendConfig, StateCovariance, VioState

__all__ = ["BackendConfig", "StateCovariance", "VioEstimator", "VioState"]


def __getattr__(name: str):
    if name == "VioEstimator":
        from .estimator import VioEstimator

        return VioEstimator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
