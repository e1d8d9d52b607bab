"""The paper's pipeline (Fig. 1): image pyramid -> FAST corner response (bit-packed lookup
table) -> combined non-maxima suppression and cell selection -> pyramidal Lucas-Kanade
tracking, with the track bookkeeping around it.

| module | holds |
|---|---|
| :mod:`.fast_lut` | the 8 KB segment-test lookup table |
| :mod:`.pyramid` | image pyramid (GPU + NumPy) |
| :mod:`.detector` | FAST CRF + NMS-C: configuration, NumPy reference, factory |
| :mod:`.detector_gpu` | FAST CRF + NMS-C on the GPU |
| :mod:`.tracker` | inverse-compositional LK with affine illumination (GPU + NumPy) |
| :mod:`.imu_prediction` | gyro-aided prediction of feature positions |
| :mod:`.track_table` | live tracks, ids, redetection decisions (NumPy; its device twin is kernels/frontend.cu) |
| :mod:`.stereo` | matching the tracks into the right image |
| :mod:`.cpu_pipeline` | one frame on the CPU |
| :mod:`.gpu_pipeline` | one frame on the GPU: one CUDA graph, the track table on the device |
| :mod:`.feature_tracker` | :class:`FeatureTracker`, the public frontend (a thin facade) |
"""
from .feature_tracker import FeatureTracker, FrontendConfig, check_buildable

__all__ = ["FeatureTracker", "FrontendConfig", "check_buildable"]
