"""The paper's pipeline (Fig. 1): image pyramid -> FAST corner response (bit-packed lookup
table) -> combined non-maxima suppression and cell selection -> pyramidal Lucas-Kanade
tracking, with the track bookkeeping around it.

| module | holds |
|---|---|
| :mod:`.fast_lut` | the 8 KB segment-test lookup table |
| :mod:`.pyramid` | image pyramid (GPU + NumPy) |
| :mod:`.detector` | FAST CRF + NMS-C (GPU + NumPy) |
| :mod:`.tracker` | inverse-compositional LK with affine illumination (GPU + NumPy) |
| :mod:`.imu_prediction` | gyro-aided prediction of feature positions |
| :mod:`.feature_tracker` | :class:`FeatureTracker`, the public frontend |
"""
from .feature_tracker import FeatureTracker, FrontendConfig

__all__ = ["FeatureTracker", "FrontendConfig"]
