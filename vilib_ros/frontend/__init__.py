"""The paper's pipeline (Fig. 1): image pyramid -> FAST corner response (bit-packed lookup
table) -> combined non-maxima suppression and cell selection -> pyramidal Lucas-Kanade
tracking, with the track bookkeeping around it.

Every stage has three implementations with one interface, one sub-package each: ``gpu/``
(CuPy and the kernels in ``vilib_ros/kernels``), ``compiled/`` (numba) and ``reference/``
(NumPy: the definitions and the test oracle). :mod:`.factory` alone imports them and picks one;
they import only the shared modules.

| Fig. 1 stage | shared | ``gpu/`` (kernel) | ``compiled/`` | ``reference/`` |
|---|---|---|---|---|
| image pyramid | :func:`.config.level_shapes` | ``pyramid`` (``pyramid.cu``) | ``pyramid`` | ``pyramid`` |
| FAST corner response | :mod:`.fast_lut` (the 8 KB table) | ``detector`` (``fast.cu``) | ``fast`` | ``detector`` |
| NMS + cell selection | | ``detector`` (``nms.cu``) | ``nms``, ``detector`` | ``detector`` |
| pyramidal LK | :mod:`.imu_prediction` (its start) | ``tracker`` (``lk.cu``) | ``lk``, ``tracker`` | ``lk``, ``templates``, ``tracker`` |
| RANSAC | :mod:`.ransac` (its fixed choices) | ``ransac`` (``ransac.cu``) | ``ransac`` | ``ransac`` |
| track table | :mod:`.track_table` (NumPy) | ``frame`` (``frontend.cu``) | | |
| one frame | :mod:`.cpu_pipeline`, :mod:`.stereo` | ``pipeline``, ``streamed_upload`` | | |

| module | holds |
|---|---|
| :mod:`.config` | the configurations, their checks, the kernels' defines |
| :mod:`.factory` | which implementation runs (device, ``VILIB_ROS_CPU_IMPL``) |
| :mod:`.feature_tracker` | :class:`FeatureTracker`, the public frontend (a thin facade) |
"""
from .config import FrontendConfig, check_buildable
from .feature_tracker import FeatureTracker

__all__ = ["FeatureTracker", "FrontendConfig", "check_buildable"]
