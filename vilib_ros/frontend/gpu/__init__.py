"""The GPU twin (CuPy and the kernels in ``vilib_ros/kernels``): the reference's algorithms
(:mod:`vilib_ros.frontend.reference`) on the device, chosen by :mod:`vilib_ros.frontend.factory`
where CUDA works. CuPy is imported inside the functions that use it, so these modules import
without it.

| module | holds |
|---|---|
| :mod:`.pyramid` | the device pyramid (``pyramid.cu``) |
| :mod:`.streamed_upload` | how a frame gets to the device: the band copy the pyramid kernel waits for |
| :mod:`.detector` | :class:`~.detector.GpuFastDetector`: FAST CRF + NMS-C (``fast.cu``, ``nms.cu``) |
| :mod:`.tracker` | :class:`~.tracker.GpuLKTracker` (``lk.cu``) |
| :mod:`.ransac` | the fundamental-matrix RANSAC in the frame's graph (``ransac.cu``) |
| :mod:`.frame` | the device track table and one frame's kernel launches (``frontend.cu``) |
| :mod:`.pipeline` | :class:`~.pipeline.GpuPipeline`: CUDA graphs, streams, page-locked slots |
"""
