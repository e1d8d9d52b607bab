"""The frontend's configuration: what a :class:`~vilib_ros.frontend.FeatureTracker` is built
with, its checks, and the constants and compile-time defines the kernels share with the host.

* :class:`DetectorConfig`, :class:`TrackerConfig`, :class:`FrontendConfig`. Each field carries
  its help, range, choices and liveness (:func:`vilib_ros.params_meta.param`): the one place they
  are written; the nodes' ROS parameters and ``docs/parameters.md`` are derived from it. A
  ``live`` field can change on a running tracker (``FeatureTracker.apply_config``: kernel
  scalars and host-side thresholds, read at every frame); a change of any other field is
  structural and the caller builds a new tracker. :func:`live_fields` lists them.
* Checks, each made once on the way to the kernels: ``validate()`` (the configurations' own
  ranges) where a configuration is built or changed (``FeatureTracker`` and the factories'
  ``make_detector`` / ``make_tracker`` on what they are given, unless told it is validated;
  the implementations trust it), :func:`check_fits` (the detector's cells and border against
  an image, the GPU track table), :func:`check_buildable` (both, for one tracker),
  :func:`check_levels` (a pyramid), and the detector's input checks :func:`check_image` /
  :func:`check_occupancy`.
* Shared geometry and layouts: :func:`level_shapes`, :func:`grid_shape_for`, the LK parameter
  slots (:data:`MODE_INFO`), the stored-template layout (:data:`PATCH_AREA`,
  :data:`BANK_STRIDE`), the track table's header slots and counters (:data:`HEADER`,
  :data:`COUNTERS`).
* Kernel defines (``-D`` options of ``kernels/*.cu``), one function per kernel file:
  :func:`fast_defines`, :func:`nms_defines`, :func:`lk_defines`, :func:`frontend_defines`,
  :func:`ransac_defines`.

A parameter's way to the kernel, ``detector.threshold`` for one: config/euroc.yaml sets the ROS
parameter ``frontend_node`` declared from this field's metadata (rclpy checks the range);
``nodes.frontend_setup.build_config`` makes the :class:`FrontendConfig` and validates it, once;
``FeatureTracker(..., validated=True)`` gives it to the factory's pipeline, whose detector passes
``threshold_int`` to ``fast.cu``'s CRF kernel every frame (``apply_config`` swaps it live).

No implementation is imported here: the twins (``gpu/``, ``compiled/``, ``reference/``) and the
factory import this module, never the other way round.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

import numpy as np

from vilib_ros.frontend.ransac import (HYPOTHESES, INVERSE_ITERATIONS, LANES, LO_ITERATIONS, MIN_INLIERS, SAMPLE, SQRT2,
                                       STATE)
from vilib_ros.params_meta import param, param_meta

# ----------------------------------------------------------------------------- value sets

SCORES = ("sad_circle", "sad_arc", "max_threshold")
SCORE_CODES = {name: i for i, name in enumerate(SCORES)}
MODES = ("translation", "offset", "gain", "gain_offset")
TEMPLATES = ("previous", "reference")
WARPS = ("translation", "affine")
CPU_BACKENDS = ("numpy", "opencv")
#: LK parameters per mode: (count, gain slot, offset slot), as ModeInfo<> of kernels/lk.cu
MODE_INFO = {
    "translation": (2, -1, -1),
    "offset": (3, -1, 2),
    "gain": (3, 2, -1),
    "gain_offset": (4, 2, 3),
}

# ----------------------------------------------------------------------------- configurations


@dataclass
class DetectorConfig:
    threshold: float = field(default=10.0, metadata=param(
        "FAST threshold eps (intensity levels; the floor is used)", range=(1.0, 254.0), live=True))
    arc_length: int = field(default=10, metadata=param("FAST contiguous arc length N", range=(9, 12)))
    score: str = field(default="sad_arc", metadata=param(
        "corner score: SAD over the circle, SAD over the arc, or max threshold", choices=SCORES))
    levels: int = field(default=2, metadata=param("pyramid levels used for detection", range=(1, 4)))
    cell_width: int = field(default=32, metadata=param(
        "NMS cell width in level-0 pixels (multiple of 32)", range=(32, 1024, 32)))
    cell_height: int = field(default=32, metadata=param(
        "NMS cell height in level-0 pixels (multiple of 2^(levels-1))", range=(1, 1024)))
    nms_radius: int = field(default=1, metadata=param(
        "NMS Moore neighbourhood radius n ((2n+1)^2 pixels)", range=(1, 4)))
    border: int = field(default=8, metadata=param("pixels skipped at each level's edge", range=(3, 256)))

    def validate(self) -> "DetectorConfig":
        def is_int(v):
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        for f in ("arc_length", "levels", "cell_width", "cell_height", "nms_radius", "border"):
            if not is_int(getattr(self, f)):
                raise ValueError(f"DetectorConfig.{f} must be an integer, got {getattr(self, f)!r}")
        try:
            thr = float(self.threshold)
        except (TypeError, ValueError):
            raise ValueError(f"DetectorConfig.threshold must be a number, got {self.threshold!r}") from None
        if not (1.0 <= thr < 255.0):
            raise ValueError(f"DetectorConfig.threshold must be in [1, 255), got {self.threshold!r}")
        if not 9 <= self.arc_length <= 12:
            raise ValueError(f"DetectorConfig.arc_length must be in 9..12, got {self.arc_length}")
        if self.score not in SCORES:
            raise ValueError(f"DetectorConfig.score must be one of {SCORES}, got {self.score!r}")
        if not 1 <= self.levels <= 4:
            raise ValueError(f"DetectorConfig.levels must be in 1..4, got {self.levels}")
        if self.cell_width < 32 or self.cell_width % 32:
            raise ValueError(f"DetectorConfig.cell_width must be a positive multiple of 32, got {self.cell_width}")
        step = 1 << (self.levels - 1)
        if self.cell_height < step or self.cell_height % step:
            raise ValueError(f"DetectorConfig.cell_height must be a positive multiple of 2**(levels-1) = {step}, "
                             f"got {self.cell_height}")
        if not 1 <= self.nms_radius <= 4:
            raise ValueError(f"DetectorConfig.nms_radius must be in 1..4, got {self.nms_radius}")
        if self.border < 3:
            raise ValueError(f"DetectorConfig.border must be >= 3, got {self.border}")
        return self

    @property
    def threshold_int(self) -> int:
        return int(np.floor(float(self.threshold)))

    @classmethod
    def from_dict(cls, d: dict) -> "DetectorConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown DetectorConfig fields: {sorted(unknown)}")
        return cls(**d)


@dataclass
class TrackerConfig:
    mode: str = field(default="gain_offset", metadata=param(
        "LK photometric model: translation, +offset, +gain, +gain+offset", choices=MODES))
    levels: int = field(default=5, metadata=param("pyramid levels used for tracking", range=(1, 8)))
    patch_sizes: tuple = field(default=(16, 16, 16, 8, 8), metadata=param("LK patch size per level (8 or 16)"))
    max_iterations: int = field(default=30, metadata=param("LK iterations per level", range=(1, 1000), live=True))
    eps: float = field(default=5e-4, metadata=param(
        "LK convergence: stop when the squared update is below this (level pixels^2)", range=(1e-12, 1.0),
        live=True))
    # the gradient matrix of intensities in [0, 1]
    min_eigen: float = field(default=1e-5, metadata=param(
        "reject flat patches: min eigenvalue of the gradient matrix / patch area", range=(0.0, 1.0), live=True))
    max_residual: float = field(default=0.0, metadata=param(
        "mean |residual| above which a track is dropped (0 = off)", range=(0.0, 255.0), live=True))
    # the oscillation stops (either: take back half of the last update, the level ends as converged)
    osc_eps: float = field(default=0.01, metadata=param(
        "OpenCV's 'jumping back and forth': |dq_k + dq_k-1| < osc_eps in x and y (level px; 0 = off)",
        range=(0.0, 100.0)))
    osc_growth: float = field(default=1.0, metadata=param(
        "a reversal that does not shrink: dq_k . dq_k-1 < 0 and |dq_k|^2 >= osc_growth |dq_k-1|^2 (0 = off)",
        range=(0.0, 100.0)))
    cpu_backend: str = field(default="numpy", metadata=param(
        "CPU LK implementation (opencv: frame to frame, translation only: mode, warp translation, template "
        "previous)", choices=CPU_BACKENDS))
    # see vilib_ros.frontend.reference.templates
    template: str = field(default="reference", metadata=param(
        "LK template: the previous frame's patch, or the patch of the frame where the track was detected",
        choices=TEMPLATES))
    template_refresh_residual: float = field(default=0.0, metadata=param(
        "reference: take the template again where the mean |residual| exceeds this (0..255; 0 = never)",
        range=(0.0, 255.0), live=True))
    template_max_age: int = field(default=0, metadata=param(
        "reference: take the template again after this many frames (0 = never)", range=(0, 100000), live=True))
    # affine: a 2x2 matrix per track
    warp: str = field(default="affine", metadata=param(
        "LK warp: translation, or affine (the patch's deformation since its template)", choices=WARPS))

    def validate(self) -> "TrackerConfig":
        if self.mode not in MODES:
            raise ValueError(f"TrackerConfig.mode must be one of {MODES}, got {self.mode!r}")
        if int(self.levels) != self.levels or not 1 <= self.levels <= 8:
            raise ValueError(f"TrackerConfig.levels must be in 1..8, got {self.levels!r}")
        ps = tuple(int(p) for p in self.patch_sizes)
        if len(ps) < self.levels or any(p not in (8, 16) for p in ps[: self.levels]):
            raise ValueError(f"TrackerConfig.patch_sizes needs one of 8/16 per level (levels={self.levels}), got {self.patch_sizes!r}")
        if not 1 <= int(self.max_iterations) <= 1000:
            raise ValueError(f"TrackerConfig.max_iterations must be in 1..1000, got {self.max_iterations!r}")
        if not self.eps > 0:
            raise ValueError(f"TrackerConfig.eps must be > 0, got {self.eps!r}")
        if not (self.osc_eps >= 0 and self.osc_growth >= 0):
            raise ValueError(f"TrackerConfig.osc_eps and osc_growth must be >= 0, got {self.osc_eps!r}, {self.osc_growth!r}")
        if not self.min_eigen >= 0 or not self.max_residual >= 0:
            raise ValueError("TrackerConfig.min_eigen and max_residual must be >= 0")
        if self.cpu_backend not in CPU_BACKENDS:
            raise ValueError(f"TrackerConfig.cpu_backend must be numpy|opencv, got {self.cpu_backend!r}")
        if self.cpu_backend == "opencv" and self.mode != "translation":
            raise ValueError("TrackerConfig.cpu_backend='opencv' supports mode='translation' only")
        if self.template not in TEMPLATES:
            raise ValueError(f"TrackerConfig.template must be one of {TEMPLATES}, got {self.template!r}")
        if self.warp not in WARPS:
            raise ValueError(f"TrackerConfig.warp must be one of {WARPS}, got {self.warp!r}")
        if self.cpu_backend == "opencv" and (self.template, self.warp) != ("previous", "translation"):
            raise ValueError("TrackerConfig.cpu_backend='opencv' tracks frame to frame with a translation only "
                             "(template='previous', warp='translation')")
        if not self.template_refresh_residual >= 0:
            raise ValueError(f"TrackerConfig.template_refresh_residual must be >= 0, got {self.template_refresh_residual!r}")
        if int(self.template_max_age) != self.template_max_age or self.template_max_age < 0:
            raise ValueError(f"TrackerConfig.template_max_age must be an integer >= 0, got {self.template_max_age!r}")
        return self

    @property
    def patch16_mask(self) -> int:
        return sum(1 << l for l in range(self.levels) if int(self.patch_sizes[l]) == 16)

    @property
    def stored_templates(self) -> bool:
        """Whether tracks are tracked against stored templates (a template bank): reference
        templates, or previous-frame ones taken again every frame for the affine warp."""
        return self.template == "reference" or self.warp == "affine"


@dataclass
class FrontendConfig:
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    max_features: int = field(default=0, metadata=param(
        "target track count (0 = one per detector cell)", range=(0, 100000)))
    min_track_fraction: float = field(default=0.3, metadata=param(
        "redetect when live tracks drop below this fraction of the target", range=(0.0, 1.0), live=True))
    fb_check: bool = field(default=True, metadata=param("forward-backward consistency check of every track"))
    fb_threshold: float = field(default=0.5, metadata=param(
        "forward-backward error limit (pixels)", range=(1e-06, 1000.0), live=True))
    fb_levels: int = field(default=0, metadata=param(
        "pyramid levels of the forward-backward check's backward track, finest first; it starts at the track's "
        "old position (0 = all of tracker.levels; at most tracker.levels)", range=(0, 8), live=True))
    # on undistorted points; the pixel threshold is converted with fx
    ransac: bool = field(default=True, metadata=param("fundamental-matrix RANSAC outlier rejection"))
    ransac_threshold: float = field(default=1.0, metadata=param(
        "RANSAC inlier threshold (pixels)", range=(1e-06, 1000.0), live=True))
    ransac_confidence: float = field(default=0.99, metadata=param(
        "RANSAC confidence", range=(0.501, 0.999999), live=True))
    imu_prediction: bool = field(default=True, metadata=param(
        "predict track positions from the gyro (rotation) when IMU is given", live=True))
    imu_max_gap_ms: float = field(default=50.0, metadata=param(
        "largest IMU gap bridged by the gyro prediction", range=(0.001, 1000000.0), live=True))
    stereo: bool = field(default=True, metadata=param(
        "subscribe to image_right and track into the right image (stereo); without right images the left ones "
        "are processed alone"))
    stereo_epipolar_threshold: float = field(default=2.0, metadata=param(
        "epipolar limit of stereo matches (pixels; 0 = off)", range=(0.0, 1000.0), live=True))
    use_graph: bool = field(default=True, metadata=param(
        "GPU: capture the per-frame kernel sequence in a CUDA graph"))

    def validate(self) -> "FrontendConfig":
        if not isinstance(self.detector, DetectorConfig) or not isinstance(self.tracker, TrackerConfig):
            raise ValueError("FrontendConfig.detector / .tracker must be DetectorConfig / TrackerConfig")
        self.detector.validate()
        self.tracker.validate()
        if int(self.max_features) != self.max_features or self.max_features < 0:
            raise ValueError(f"FrontendConfig.max_features must be an integer >= 0, got {self.max_features!r}")
        if not 0.0 <= self.min_track_fraction <= 1.0:
            raise ValueError(f"FrontendConfig.min_track_fraction must be in [0, 1], got {self.min_track_fraction!r}")
        for f in ("fb_threshold", "ransac_threshold", "imu_max_gap_ms"):
            if not getattr(self, f) > 0:
                raise ValueError(f"FrontendConfig.{f} must be > 0, got {getattr(self, f)!r}")
        if int(self.fb_levels) != self.fb_levels or not 0 <= self.fb_levels <= self.tracker.levels:
            raise ValueError(f"FrontendConfig.fb_levels must be an integer in 0..tracker.levels "
                             f"({self.tracker.levels}; 0 = all of them), got {self.fb_levels!r}")
        if not 0.5 < self.ransac_confidence < 1.0:
            raise ValueError(f"FrontendConfig.ransac_confidence must be in (0.5, 1), got {self.ransac_confidence!r}")
        if not self.stereo_epipolar_threshold >= 0:
            raise ValueError("FrontendConfig.stereo_epipolar_threshold must be >= 0")
        return self

    @property
    def fb_levels_used(self) -> int:
        """The backward track's levels: ``fb_levels``, or all of the tracker's where it is 0."""
        return int(self.fb_levels) or int(self.tracker.levels)


def _leaves(config, prefix: str = ""):
    """(dotted name, dataclass field, value) of every non-dataclass field, nested ones as ``a.b``."""
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        if dataclasses.is_dataclass(v):
            yield from _leaves(v, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, f, v


def flat_fields(config) -> dict:
    """The values of a configuration by dotted name (``detector.threshold``, ``fb_threshold``, ...)."""
    return {name: v for name, _, v in _leaves(config)}


def live_fields(config) -> frozenset:
    """The dotted names of the fields marked ``live`` (changeable on a running tracker)."""
    return frozenset(name for name, f, _ in _leaves(config) if getattr(param_meta(f), "live", False))


# ----------------------------------------------------------------------------- pyramid and cells

MAX_PYRAMID_LEVELS = 8


def level_shapes(width: int, height: int, levels: int) -> list[tuple[int, int]]:
    """(h, w) of every pyramid level: each halves the previous one (odd last row / column dropped)."""
    shapes = [(int(height), int(width))]
    for _ in range(1, levels):
        h, w = shapes[-1]
        shapes.append((h // 2, w // 2))
    return shapes


def check_levels(width: int, height: int, levels: int) -> None:
    """ValueError where a ``width`` x ``height`` image cannot have ``levels`` pyramid levels."""
    if int(levels) != levels or not 1 <= levels <= MAX_PYRAMID_LEVELS:
        raise ValueError(f"pyramid levels must be an integer in 1..{MAX_PYRAMID_LEVELS}, got {levels!r}")
    if width < 1 or height < 1:
        raise ValueError(f"pyramid image size must be positive, got {width}x{height}")
    if (width >> (levels - 1)) < 1 or (height >> (levels - 1)) < 1:
        raise ValueError(f"image {width}x{height} is too small for {levels} pyramid levels")


def grid_shape_for(width: int, height: int, config: DetectorConfig) -> tuple[int, int]:
    """(rows, cols) of the detector's cells (``ceil`` tiling: the last row / column may be partial)."""
    return (-(-height // config.cell_height), -(-width // config.cell_width))


def check_geometry(width: int, height: int, config: DetectorConfig) -> None:
    """ValueError where the image cannot hold one cell plus the border on every level (``config``
    already validated)."""
    if int(width) != width or int(height) != height or width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive integers, got {width}x{height}")
    b = config.border
    if width < config.cell_width + 2 * b or height < config.cell_height + 2 * b:
        raise ValueError(f"image {width}x{height} is smaller than one cell ({config.cell_width}x{config.cell_height}) "
                         f"plus the border ({b} px each side)")
    if width >= 1 << 14 or height >= 1 << 14:
        raise ValueError(f"image {width}x{height} is too large (max 16383 px per side)")
    hl, wl = level_shapes(width, height, config.levels)[-1]
    if wl < 2 * b + 1 or hl < 2 * b + 1:
        raise ValueError(f"pyramid level {config.levels - 1} ({wl}x{hl}) is smaller than twice the border ({b}) "
                         f"plus one pixel: use fewer levels or a smaller border")


def check_image(image, width: int, height: int) -> np.ndarray:
    """The detector's frame: a 2D uint8 NumPy array of the detector's size (ValueError otherwise)."""
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array, got {type(image).__name__}")
    if image.size == 0:
        raise ValueError(f"image is empty (shape {image.shape})")
    if image.ndim != 2:
        raise ValueError(f"image must be 2D (mono8), got shape {image.shape}")
    if image.dtype != np.uint8:
        raise ValueError(f"image must be uint8, got {image.dtype}")
    if image.shape != (height, width):
        raise ValueError(f"image shape {image.shape} differs from the detector's {(height, width)}")
    return image


def check_occupancy(occupancy, grid_shape: tuple[int, int]):
    """The detector's occupied cells: None, or a bool array of the grid's shape (ValueError otherwise)."""
    if occupancy is None:
        return None
    occ = np.asarray(occupancy)
    if occ.shape != tuple(grid_shape):
        raise ValueError(f"occupancy shape {occ.shape} differs from the grid shape {tuple(grid_shape)}")
    if occ.dtype != np.bool_:
        raise ValueError(f"occupancy must be a bool array, got {occ.dtype}")
    return occ


# ----------------------------------------------------------------------------- the track table

#: int64 header slots of the device table and of the GPU result slots (kernels/frontend.cu H_*)
HEADER = ("count", "next_id", "detect", "new")
N_HEADER = 8
#: the frontend's counters (kernels/frontend.cu C_*; TrackTable.counters; FrameStats)
COUNTERS = ("lost_left_image", "lost_diverged", "lost_not_converged", "fb_rejected", "ransac_rejected",
            "tracked_total", "iterations_total", "tracks_lost", "tracks_new", "redetections", "detection_runs",
            "stereo_matched", "stereo_rejected", "templates_refreshed")
COUNTER_INDEX = {name: i for i, name in enumerate(COUNTERS)}
MAX_CAPACITY = 4096     # table kernels: one block of 1024 threads, 4 slots each
MAX_CELLS = 8192        # new_tracks: 8 cells per thread


def check_capacity(target: int, cells: int) -> None:
    """ValueError where the device-side table cannot hold ``target`` tracks or ``cells`` detector cells."""
    if target > MAX_CAPACITY:
        raise ValueError(f"the GPU frontend holds at most {MAX_CAPACITY} tracks, got a target of {target}")
    if cells > MAX_CELLS:
        raise ValueError(f"the GPU frontend handles at most {MAX_CELLS} detector cells, got {cells}")


def check_fits(width: int, height: int, config: FrontendConfig, device: str = "cpu") -> None:
    """ValueError, with the reason, where a validated ``config`` does not fit a ``width`` x
    ``height`` image on ``device`` ('cpu' or 'cuda'): the detector's cells and border against the
    image, and on the GPU the track table's capacity (an in-range ``detector.cell_width`` of 1024
    passes ``validate()`` but no tracker can be built with it on a 752x480 image)."""
    check_geometry(width, height, config.detector)
    if device == "cuda":
        rows, cols = grid_shape_for(width, height, config.detector)
        check_capacity(int(config.max_features) or rows * cols, rows * cols)


def check_buildable(width: int, height: int, config: FrontendConfig, device: str = "cpu") -> None:
    """ValueError, with the reason, where a :class:`FeatureTracker` of this image size and
    configuration could not be built on ``device`` ('cpu' or 'cuda'): the configuration's own
    checks (``validate()``) and :func:`check_fits`."""
    config.validate()
    check_fits(width, height, config, device)


# ----------------------------------------------------------------------------- stored templates

#: A stored template level: the (P + 2) x (P + 2) bilinear samples around the template position
#: (the patch and its one-pixel gradient ring), row stride P + 2, in the first (P + 2)^2 entries
#: of a slot of PATCH_AREA floats (0..255 units); see vilib_ros.frontend.reference.templates.
MAX_PATCH = 16
PATCH_AREA = (MAX_PATCH + 2) ** 2
#: The GPU bank (kernels/lk.cu TPL_STRIDE) keeps after each level's samples the level's solver
#: (flat-patch measure, the inverses of the Gauss-Newton matrices at gain 1: lk_extract_<mode>
#: makes it once per template instead of every frame's LK building it); SOLVER_AREA floats.
SOLVER_AREA = 84
BANK_STRIDE = PATCH_AREA + SOLVER_AREA
#: the smallest / largest determinant of an affine warp (area ratio) before the track counts as diverged
AFFINE_DET_RANGE = (0.25, 4.0)
#: the patch size of the levels on which the affine parameters are estimated (on 8 x 8 patches,
#: 64 samples for 8 parameters diverge too often: the warp is kept there)
AFFINE_PATCH = 16

# ----------------------------------------------------------------------------- kernel defines


def fast_defines(config: DetectorConfig) -> dict:
    """``kernels/fast.cu``: the arc length and the score."""
    return {"FAST_N": config.arc_length, "FAST_SCORE": SCORE_CODES[config.score]}


def nms_defines(config: DetectorConfig, warps_per_cell: int, static_geometry: bool) -> dict:
    """``kernels/nms.cu``: the suppression radius, the block size, and with ``static_geometry``
    the cell size and level count (compiled in: the level loop unrolls, divisions become shifts)."""
    d = {"NMS_R": config.nms_radius, "NMS_MAX_THREADS": 512 if warps_per_cell <= 16 else 1024}
    if static_geometry:
        d.update(NMS_CW=config.cell_width, NMS_CH=config.cell_height, NMS_LEVELS=config.levels)
    return d


def lk_defines(config: TrackerConfig, warps: int, feature_warps: int) -> dict:
    """``kernels/lk.cu``: warps per block and per stored-template feature, the oscillation stop,
    the stored template's solver size."""
    return {"LK_WARPS": warps, "LK_OSC_EPS": f"{float(config.osc_eps)!r}f",
            "LK_OSC_GROWTH": f"{float(config.osc_growth)!r}f", "LK_FEATURE_WARPS": feature_warps,
            "TPL_SOLVER": SOLVER_AREA}


def frontend_defines() -> dict[str, int]:
    """``kernels/frontend.cu``: ``H_<NAME>`` / ``C_<NAME>``, the indices of :data:`HEADER` and
    :data:`COUNTERS` (one name for one thing)."""
    d = {f"H_{n.upper()}": i for i, n in enumerate(HEADER)}
    d.update({f"C_{n.upper()}": i for i, n in enumerate(COUNTERS)})
    return d


def ransac_defines() -> dict[str, int | str]:
    """``kernels/ransac.cu``: the ``RS_*`` constants of :mod:`vilib_ros.frontend.ransac` and the
    table's count slot."""
    d = {"RS_HYPOTHESES": HYPOTHESES, "RS_SAMPLE": SAMPLE, "RS_MIN_INLIERS": MIN_INLIERS,
         "RS_LO_ITERATIONS": LO_ITERATIONS, "RS_INVERSE_ITERATIONS": INVERSE_ITERATIONS, "RS_LANES": LANES,
         "RS_SQRT2": repr(SQRT2)}
    d.update({f"RS_{n.upper()}": i for i, n in enumerate(STATE)})
    d["H_COUNT"] = frontend_defines()["H_COUNT"]
    return d
