"""The NumPy reference twin: the definitions the compiled twin (:mod:`vilib_ros.frontend.compiled`)
and the GPU twin (:mod:`vilib_ros.frontend.gpu`) follow, the test oracle, and the CPU path where
numba is missing (or ``VILIB_ROS_CPU_IMPL=numpy``).

| module | holds |
|---|---|
| :mod:`.pyramid` | the 2x2-mean pyramid |
| :mod:`.detector` | FAST CRF + NMS-C and their definitions; :class:`~.detector.CpuFastDetector` |
| :mod:`.lk` | pyramidal inverse-compositional LK with affine illumination |
| :mod:`.templates` | LK against stored reference templates, with the affine warp |
| :mod:`.tracker` | :class:`~.tracker.CpuLKTracker` (and OpenCV's LK for ``cpu_backend='opencv'``) |
| :mod:`.ransac` | the fundamental-matrix RANSAC |
"""
