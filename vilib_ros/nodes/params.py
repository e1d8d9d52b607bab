"""Parameter tables for the nodes: one :class:`ParamSpec` per ROS parameter.

A node module exposes ``parameter_table() -> list[ParamSpec]``; :func:`declare_all`
turns the table into ``declare_parameter`` calls with a full
``rcl_interfaces/ParameterDescriptor`` (description, ``IntegerRange`` /
``FloatingPointRange``, allowed values in ``additional_constraints``, ``read_only``).
Tables built from the algorithm dataclasses (:func:`specs_from_dataclass`) use the field
names as parameter names, nested dataclasses as dotted prefixes (``detector.threshold``,
``tracker.mode``), so one name means one thing in the kernel, the dataclass and ROS.

This module imports rclpy only inside the functions that talk to a node, so the launch
file tests can read the tables without starting ROS.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vilib_ros.camera import CameraModel, euroc_cam0


@dataclass
class ParamSpec:
    name: str
    default: Any
    description: str
    range: tuple | None = None          # (from, to[, step]); int or float by the default's type
    choices: tuple[str, ...] | None = None
    read_only: bool = False
    type_hint: str | None = None        # 'double_array', 'string_array', ... for empty lists

    def ros_type_name(self) -> str:
        v = self.default
        if self.type_hint:
            return self.type_hint
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "integer"
        if isinstance(v, float):
            return "double"
        if isinstance(v, str):
            return "string"
        if isinstance(v, (list, tuple)):
            if all(isinstance(x, bool) for x in v) and v:
                return "bool_array"
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and v:
                return "integer_array"
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) and v:
                return "double_array"
            if all(isinstance(x, str) for x in v) and v:
                return "string_array"
        raise TypeError(f"parameter {self.name!r}: cannot map default {v!r} to a ROS parameter type")

    def ros_default(self):
        t = self.ros_type_name()
        v = self.default
        if t == "double_array":
            return [float(x) for x in v]
        if t.endswith("_array"):
            return list(v)
        if t == "double":
            return float(v)
        return v

    def check(self, value) -> str | None:
        """Why ``value`` is not acceptable (None when it is); ranges are checked by rclpy too."""
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got {value!r}"
        if self.range is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            lo, hi = self.range[0], self.range[1]
            if not (lo <= value <= hi):
                return f"{self.name} must be in [{lo}, {hi}], got {value!r}"
            if len(self.range) > 2 and self.range[2] and isinstance(value, int):
                if (value - lo) % self.range[2]:
                    return f"{self.name} must be {lo} + a multiple of {self.range[2]}, got {value!r}"
        return None


def edge_values(default, range_: tuple | None, choices: tuple | None) -> list:
    """The values a parameter is checked at away from ``default``: the other choices, the flipped
    bool, or both ends of a numeric range (as the default's type); [] where it has none of these
    (the parameter sweeps and the run-time parameter test)."""
    if choices:
        return [c for c in choices if c != default]
    if isinstance(default, bool):
        return [not default]
    if range_ and isinstance(default, (int, float)):
        return [type(default)(range_[0]), type(default)(range_[1])]
    return []


# --- the algorithm parameters: range, choices and help of every field, once ---------------------
@dataclass(frozen=True)
class Meta:
    """Range / choices / help of one algorithm parameter (the one place they are written).

    ``range`` is (from, to[, step]) as ROS ``IntegerRange`` / ``FloatingPointRange`` take it; the
    dataclass's ``validate()`` must accept every value inside it (test_launch_files checks).
    """

    help: str
    range: tuple | None = None
    choices: tuple | None = None


# FrontendConfig (vilib_ros.frontend) fields, nested dataclasses as dotted prefixes.
FRONTEND_PARAMS = {
    'detector.threshold': Meta('FAST threshold eps (intensity levels; the floor is used)', range=(1.0, 254.0)),
    'detector.arc_length': Meta('FAST contiguous arc length N', range=(9, 12)),
    'detector.score': Meta('corner score: SAD over the circle, SAD over the arc, or max threshold', choices=('sad_circle', 'sad_arc', 'max_threshold')),
    'detector.levels': Meta('pyramid levels used for detection', range=(1, 4)),
    'detector.cell_width': Meta('NMS cell width in level-0 pixels (multiple of 32)', range=(32, 1024, 32)),
    'detector.cell_height': Meta('NMS cell height in level-0 pixels (multiple of 2^(levels-1))', range=(1, 1024)),
    'detector.nms_radius': Meta('NMS Moore neighbourhood radius n ((2n+1)^2 pixels)', range=(1, 4)),
    'detector.border': Meta("pixels skipped at each level's edge", range=(3, 256)),
    'tracker.mode': Meta('LK photometric model: translation, +offset, +gain, +gain+offset', choices=('translation', 'offset', 'gain', 'gain_offset')),
    'tracker.levels': Meta('pyramid levels used for tracking', range=(1, 8)),
    'tracker.patch_sizes': Meta('LK patch size per level (8 or 16)'),
    'tracker.max_iterations': Meta('LK iterations per level', range=(1, 1000)),
    'tracker.eps': Meta('LK convergence: stop when the squared update is below this (level pixels^2)', range=(1e-12, 1.0)),
    'tracker.min_eigen': Meta('reject flat patches: min eigenvalue of the gradient matrix / patch area', range=(0.0, 1.0)),
    'tracker.max_residual': Meta('mean |residual| above which a track is dropped (0 = off)', range=(0.0, 255.0)),
    'tracker.osc_eps': Meta("OpenCV's 'jumping back and forth': |dq_k + dq_k-1| < osc_eps in x and y (level px; 0 = off)", range=(0.0, 100.0)),
    'tracker.osc_growth': Meta('a reversal that does not shrink: dq_k . dq_k-1 < 0 and |dq_k|^2 >= osc_growth |dq_k-1|^2 (0 = off)', range=(0.0, 100.0)),
    'tracker.cpu_backend': Meta('CPU LK implementation (opencv: frame to frame, translation only: mode, warp translation, template previous)', choices=('numpy', 'opencv')),
    'tracker.template': Meta("LK template: the previous frame's patch, or the patch of the frame where the track was detected", choices=('previous', 'reference')),
    'tracker.template_refresh_residual': Meta('reference: take the template again where the mean |residual| exceeds this (0..255; 0 = never)', range=(0.0, 255.0)),
    'tracker.template_max_age': Meta('reference: take the template again after this many frames (0 = never)', range=(0, 100000)),
    'tracker.warp': Meta("LK warp: translation, or affine (the patch's deformation since its template)", choices=('translation', 'affine')),
    'max_features': Meta('target track count (0 = one per detector cell)', range=(0, 100000)),
    'min_track_fraction': Meta('redetect when live tracks drop below this fraction of the target', range=(0.0, 1.0)),
    'fb_check': Meta('forward-backward consistency check of every track'),
    'fb_threshold': Meta('forward-backward error limit (pixels)', range=(1e-06, 1000.0)),
    'fb_levels': Meta("pyramid levels of the forward-backward check's backward track, finest first; it starts at the track's old position (0 = all of tracker.levels; at most tracker.levels)", range=(0, 8)),
    'ransac': Meta('fundamental-matrix RANSAC outlier rejection'),
    'ransac_threshold': Meta('RANSAC inlier threshold (pixels)', range=(1e-06, 1000.0)),
    'ransac_confidence': Meta('RANSAC confidence', range=(0.501, 0.999999)),
    'imu_prediction': Meta('predict track positions from the gyro (rotation) when IMU is given'),
    'imu_max_gap_ms': Meta('largest IMU gap bridged by the gyro prediction', range=(0.001, 1000000.0)),
    'stereo': Meta('subscribe to image_right and track into the right image (stereo); without right images the left ones are processed alone'),
    'stereo_epipolar_threshold': Meta('epipolar limit of stereo matches (pixels; 0 = off)', range=(0.0, 1000.0)),
    'use_graph': Meta('GPU: capture the per-frame kernel sequence in a CUDA graph'),
}
# BackendConfig (vilib_ros.backend.config) fields.
BACKEND_PARAMS = {
    'window_s': Meta("the smoother's lag, seconds", range=(0.1, 600.0)),
    'solver': Meta("stereo mode's smoother: our own Gauss-Newton with the landmarks eliminated (schur), or gtsam's "
                   "iSAM2", choices=('schur', 'isam2')),
    'mono_solver': Meta("mono mode's smoother", choices=('schur', 'isam2')),
    'schur_keep_landmarks': Meta("own smoother's marginalisation: > 0, a landmark a leaving state saw goes on in the "
                                 "window from its estimate where at least this many of its observations are by "
                                 "remaining states (VINS-Mono's depth shift); 0, it leaves with that state",
                                 range=(0, 1000)),
    'mono_window_s': Meta('mono mode uses max(window_s, mono_window_s): scale needs it', range=(0.1, 600.0)),
    'mode': Meta("'stereo' | 'mono' | 'auto' (stereo where the right camera is given: stereo:=true in the "
                 "backend node)", choices=('stereo', 'mono', 'auto')),
    'kf_min_interval_s': Meta('shortest time between keyframes, s', range=(0.001, 10.0)),
    'kf_max_interval_s': Meta('longest time between keyframes, s', range=(0.001, 60.0)),
    'kf_parallax_px': Meta('keyframe when the rotation-compensated median parallax to the last keyframe exceeds this, px', range=(0.0, 1000.0)),
    'kf_track_fraction': Meta("fewer of the last keyframe's tracks survive -> keyframe", range=(0.0, 1.0)),
    'kf_min_tracks': Meta('keyframe when fewer tracks than this are left', range=(0, 100000)),
    'zero_velocity_updates': Meta('at rest: zero-velocity prior + no-motion pose factor'),
    'still_parallax_px': Meta('rest = median parallax below this AND a static IMU window', range=(0.0, 1000.0)),
    'still_velocity_sigma': Meta('velocity sigma of the zero-velocity prior at rest, m/s', range=(1e-06, 100.0)),
    'max_landmarks_per_kf': Meta('observations added per keyframe (longest tracks first)', range=(1, 100000)),
    'landmark_grid': Meta('> 0: the observations of a keyframe spread over a grid of this many cells per side, '
                          "each cell's longest track first (0 = off)", range=(0, 1000)),
    'mono_max_landmarks_per_kf': Meta("mono mode's max_landmarks_per_kf", range=(1, 100000)),
    'mono_landmark_grid': Meta("mono mode's landmark_grid", range=(0, 1000)),
    'min_depth': Meta('nearest landmark depth accepted, m', range=(0.0, 1000.0)),
    'max_depth': Meta('farthest landmark depth accepted, m', range=(0.0, 100000.0)),
    'min_disparity_px': Meta('smallest stereo disparity for a landmark, px', range=(0.0, 1000.0)),
    'mono_min_parallax_deg': Meta('triangulation angle before a mono landmark is created', range=(0.0, 90.0)),
    'pixel_sigma': Meta('reprojection noise sigma, px', range=(1e-06, 100.0)),
    'landmark_prior_sigma': Meta('weak landmark prior at creation, m (0 = none)', range=(0.0, 1000000.0)),
    'landmark_prior_stereo': Meta('stereo mode: new landmarks get the weak prior too (a stereo observation alone '
                                  'fixes the point)'),
    'marginalise_every_s': Meta('old states leave the smoother in batches this often; the window then spans '
                                'window_s .. window_s + this, s (0 = every keyframe)', range=(0.0, 60.0)),
    'mono_marginalise_every_s': Meta('mono mode\'s marginalise_every_s, s', range=(0.0, 60.0)),
    'huber_k': Meta('Huber threshold of the visual factors, in sigmas', range=(1e-06, 100.0)),
    'chi2_stereo': Meta('stereo outlier gate (99 % of chi2(3))', range=(0.0, 1000000.0)),
    'chi2_mono': Meta('mono outlier gate (99 % of chi2(2))', range=(0.0, 1000000.0)),
    'max_outlier_count': Meta('rejected observations before a track is blacklisted', range=(0, 1000000)),
    'imu_noise_scale': Meta('fixed IMU white-noise multiplier where imu_noise_measured is false', range=(1e-06, 1000000.0)),
    'gravity': Meta('gravity magnitude, m/s^2', range=(0.0, 100.0)),
    'init_window_s': Meta('IMU window of the static initialisation, s', range=(0.0, 60.0)),
    'static_gyro_std': Meta('rad/s, std of the 10 block means of the init window', range=(0.0, 100.0)),
    'static_acc_std': Meta('m/s^2, std of the 10 block means', range=(0.0, 100.0)),
    'static_gyro_mean': Meta('rad/s (|mean gyro| at rest = the bias)', range=(0.0, 100.0)),
    'dynamic_init_frames': Meta('stereo: frames for the moving-start alignment', range=(2, 1000)),
    'mono_init_window_s': Meta('mono: window for the moving-start alignment', range=(0.0, 600.0)),
    'relinearize_threshold': Meta('relinearisation threshold of poses, velocities and biases (iSAM2; the own smoother: '
                                  'of its inertial factors)', range=(0.0, 10.0)),
    'relinearize_threshold_landmarks': Meta('iSAM2 relinearisation threshold of landmarks, m', range=(0.0, 10.0)),
    'relinearize_skip': Meta('iSAM2 relinearises every this many updates', range=(1, 1000)),
    'partial_relinearization_check': Meta('iSAM2 partial relinearisation check'),
    'extra_updates': Meta('extra iSAM2 iterations per keyframe', range=(0, 100)),
    'rooted_smoother': Meta('iSAM2 eliminates landmarks first and the newest state last (its covariance from '
                            'the root clique, ~0.1 ms); false: gtsam\'s IncrementalFixedLagSmoother'),
    'max_speed': Meta('speed above which the estimate counts as diverged (reset), m/s', range=(0.0, 10000.0)),
    'max_gyro_bias': Meta('gyro bias above which the estimate counts as diverged, rad/s', range=(0.0, 100.0)),
    'max_acc_bias': Meta('accelerometer bias above which the estimate counts as diverged, m/s^2', range=(0.0, 100.0)),
    'tracking_min_tracks': Meta('a keyframe with fewer tracks is a tracking loss (counted, warned about; the '
                                'IMU alone carries the state)', range=(1, 100000)),
    'retriangulate_outliers': Meta('a rejected observation ends its landmark; the track starts a new one'),
    'landmark_max_span_s': Meta('a landmark older than this is ended and its track starts a new one (0 = never), s',
                                range=(0.0, 600.0)),
    'imu_noise_measured': Meta('measure the IMU white-noise density from the stream'),
    'imu_noise_window_s': Meta('IMU samples the measured noise scale looks at, s', range=(0.05, 60.0)),
    'imu_noise_scale_max': Meta('bound of the measured IMU noise scale', range=(1.0, 1000000.0)),
    'imu_walk_scale': Meta('multiplies the IMU bias random walks', range=(1e-06, 1000000.0)),
    'imu_max_gap_s': Meta('a longer hole between IMU samples is never integrated across, s', range=(0.001, 10.0)),
    'imu_max_gyro': Meta('IMU samples with a larger angular rate are rejected (sensor range), rad/s',
                         range=(0.1, 1000.0)),
    'imu_max_acc': Meta('IMU samples with a larger acceleration are rejected (sensor range), m/s^2',
                        range=(1.0, 10000.0)),
}


def _field_default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def specs_from_dataclass(obj, table: dict, prefix: str = "", read_only: Sequence[str] = (),
                         skip: Sequence[str] = ()) -> list[ParamSpec]:
    """One ParamSpec per (nested) dataclass field of the instance ``obj``.

    Range, choices and help come from ``table`` (``{dotted name: Meta}``, e.g.
    :data:`FRONTEND_PARAMS`); a field missing there is declared without range and says so in
    its description (and test_launch_files fails until the table has it). Fields whose default
    is None or not a ROS-representable value are skipped.
    """
    out: list[ParamSpec] = []
    for f in dataclasses.fields(obj):
        if f.name.startswith("_"):
            continue
        name = prefix + f.name
        if name in skip:
            continue
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += specs_from_dataclass(value, table, name + ".", read_only, skip)
            continue
        if value is None:
            continue
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, tuple):
            value = list(value)
        meta = table.get(name)
        if meta is None:     # declared all the same (a node must start), but test_launch_files fails
            meta = Meta(f"{type(obj).__name__}.{f.name} (not in the parameter table of vilib_ros/nodes/params.py)")
        spec = ParamSpec(name, value, meta.help, meta.range, meta.choices, name in read_only)
        try:
            spec.ros_type_name()
        except TypeError:
            continue
        out.append(spec)
    return out


def build_dataclass(cls, values: dict, prefix: str = ""):
    """Instantiate dataclass ``cls`` from dotted ``values`` (missing keys keep defaults)."""
    kwargs = {}
    default_obj = cls()
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        cur = getattr(default_obj, f.name)
        if dataclasses.is_dataclass(cur):
            kwargs[f.name] = build_dataclass(type(cur), values, name + ".")
        elif name in values:
            v = values[name]
            if isinstance(cur, tuple) and isinstance(v, list):
                v = tuple(v)
            elif hasattr(cur, "tolist") and isinstance(v, list):
                v = np.asarray(v, dtype=getattr(cur, "dtype", None))
            elif isinstance(cur, float) and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            kwargs[f.name] = v
    return cls(**kwargs)


def descriptor_for(spec: ParamSpec):
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

    types = {
        "bool": ParameterType.PARAMETER_BOOL, "integer": ParameterType.PARAMETER_INTEGER,
        "double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING,
        "bool_array": ParameterType.PARAMETER_BOOL_ARRAY,
        "integer_array": ParameterType.PARAMETER_INTEGER_ARRAY,
        "double_array": ParameterType.PARAMETER_DOUBLE_ARRAY,
        "string_array": ParameterType.PARAMETER_STRING_ARRAY,
    }
    d = ParameterDescriptor(name=spec.name, type=types[spec.ros_type_name()], description=spec.description,
                            read_only=spec.read_only)
    if spec.choices:
        d.additional_constraints = "one of: " + ", ".join(spec.choices)
    if spec.range is not None:
        lo, hi = spec.range[0], spec.range[1]
        step = spec.range[2] if len(spec.range) > 2 else 0
        if spec.ros_type_name() == "integer":
            d.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=int(step))]
        elif spec.ros_type_name() == "double":
            d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi),
                                                         step=float(step))]
        if not d.additional_constraints:
            d.additional_constraints = f"range [{lo}, {hi}]" + (f", step {step}" if step else "")
    return d


def declare_all(node, specs: list[ParamSpec]) -> dict:
    """Declare every parameter of ``specs`` on ``node``; return {name: value} after overrides.

    Values outside a choice list raise ValueError naming the parameter (ranges and
    read-only are enforced by rclpy through the descriptor).
    """
    values = {}
    for spec in specs:
        p = node.declare_parameter(spec.name, spec.ros_default(), descriptor_for(spec))
        v = p.value
        if isinstance(v, tuple):
            v = list(v)
        if hasattr(v, "tolist"):
            v = v.tolist()
        why = spec.check(v)
        if why:
            raise ValueError(why)
        values[spec.name] = v
    return values


def add_parameter_callbacks(node, validate, apply) -> None:
    """``validate`` (on-set: may refuse, returns a ``SetParametersResult``) and ``apply`` (post-set: the
    values are in) on ``node``. rclpy has post-set callbacks from Iron on; Humble's (JetPack 6's system
    ROS 2) has on-set callbacks alone: there ``apply`` runs at the end of ``validate`` where it accepted
    (rclpy has checked ranges and read-only before and stores the values right after). Humble calls the
    newest on-set callback first: register these before any other."""
    if hasattr(node, "add_post_set_parameters_callback"):
        node.add_on_set_parameters_callback(validate)
        node.add_post_set_parameters_callback(apply)
        return

    def validate_then_apply(params):
        result = validate(params)
        if result.successful:
            apply(params)
        return result

    node.add_on_set_parameters_callback(validate_then_apply)


def check_on_set(specs: list[ParamSpec]):
    """An on-set-parameters callback that rejects values outside ``choices``."""
    by_name = {s.name: s for s in specs}

    def callback(params):
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            spec = by_name.get(p.name)
            if spec is None:
                continue
            why = spec.check(p.value)
            if why:
                return SetParametersResult(successful=False, reason=why)
        return SetParametersResult(successful=True)

    return callback


def format_table(specs: list[ParamSpec], width: int = 110) -> str:
    """The Parameters section of a node docstring (name, type, default, range, description),
    wrapped at ``width`` columns; the node docstrings hold this text (test_launch_files checks)."""
    import textwrap

    lines = []
    for s in specs:
        extra = []
        if s.range is not None:
            step = f" step {s.range[2]}" if len(s.range) > 2 and s.range[2] else ""
            extra.append(f"range [{s.range[0]}, {s.range[1]}]{step}")
        if s.choices:
            extra.append("one of " + "|".join(s.choices))
        if s.read_only:
            extra.append("read-only")
        text = (f"{s.name} ({s.ros_type_name()}, default {s.ros_default()!r}"
                + (", " + ", ".join(extra) if extra else "") + f"): {s.description}")
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ",
                               break_on_hyphens=False)
    return "\n".join(lines)


# --- camera calibration parameters (shared by frontend_node and backend_node) ---
def default_right() -> CameraModel:
    try:
        from vilib_ros.camera import euroc_cam1

        return euroc_cam1()
    except Exception:  # noqa: BLE001 - dataset module missing: mirror cam0
        return euroc_cam0()


def camera_specs(prefix: str, cam: CameraModel, what: str) -> list[ParamSpec]:
    return [
        ParamSpec(prefix + "camera_yaml", "", f"EuRoC sensor.yaml of the {what} (overrides the parameters below)",
                  read_only=True),
        ParamSpec(prefix + "image_width", int(cam.width), f"{what} image width", range=(1, 16384), read_only=True),
        ParamSpec(prefix + "image_height", int(cam.height), f"{what} image height", range=(1, 16384),
                  read_only=True),
        ParamSpec(prefix + "intrinsics", [cam.fx, cam.fy, cam.cx, cam.cy], f"{what} fx fy cx cy (pixels)",
                  read_only=True),
        ParamSpec(prefix + "distortion_model", cam.distortion_model, f"{what} distortion model",
                  choices=("radial-tangential", "equidistant", "none"), read_only=True),
        ParamSpec(prefix + "distortion_coefficients", [float(v) for v in cam.distortion],
                  f"{what} distortion coefficients (k1 k2 p1 p2, or k1..k4 equidistant)", read_only=True),
        ParamSpec(prefix + "T_BS", [float(v) for v in cam.T_BS.ravel()],
                  f"{what} camera-to-body transform, row-major 4x4", read_only=True),
    ]


def camera_from_params(values: dict, prefix: str = "") -> CameraModel:
    path = values.get(prefix + "camera_yaml", "")
    if path:
        return CameraModel.from_euroc_yaml(path)
    fx, fy, cx, cy = (float(v) for v in values[prefix + "intrinsics"])
    return CameraModel(int(values[prefix + "image_width"]), int(values[prefix + "image_height"]), fx, fy, cx, cy,
                       values[prefix + "distortion_model"],
                       np.asarray(values[prefix + "distortion_coefficients"], dtype=np.float64),
                       np.asarray(values[prefix + "T_BS"], dtype=np.float64).reshape(4, 4))
