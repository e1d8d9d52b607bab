"""The compiled CPU twin (numba): the reference's algorithms (:mod:`vilib_ros.frontend.reference`)
as compiled loops, the detector bit for bit, LK within float rounding; chosen by
:mod:`vilib_ros.frontend.factory` where numba imports. Compiled functions are cached on disk
(numba ``cache=True``: ``__pycache__`` beside the sources, or ``NUMBA_CACHE_DIR``): the first
process compiles, later ones load.

| module | holds |
|---|---|
| :mod:`.pyramid` | the 2x2-mean pyramid |
| :mod:`.fast` | the FAST corner response |
| :mod:`.nms` | non-maxima suppression with cell selection (NMS-C) |
| :mod:`.detector` | :class:`~.detector.NumbaFastDetector` (pyramid, FAST, NMS-C) |
| :mod:`.lk` | pyramidal LK, from a pyramid or from stored templates |
| :mod:`.tracker` | :class:`~.tracker.NumbaLKTracker` |
| :mod:`.ransac` | the fundamental-matrix RANSAC |
| :mod:`.threads` | how many threads the parallel loops use |
"""
