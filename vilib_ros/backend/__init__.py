"""Sliding-window visual-inertial backend (gtsam 4.3): see :mod:`vilib_ros.backend.estimator`.

``from vilib_ros.backend import BackendConfig, VioEstimator, VioState``. gtsam is imported only
when a :class:`VioEstimator` is constructed. The submodules import each other directly, never this
package.
"""
from .config import BackendConfig, StateCovariance, VioState
from .estimator import VioEstimator

__all__ = ["BackendConfig", "StateCovariance", "VioEstimator", "VioState"]
