"""The frontend node's parameters and tracker, without rclpy: what ``frontend_node`` declares
and builds, so that a tool (``python -m bench.node_process``) can build the very same
tracker from the same values outside ROS.

* :func:`parameter_table` - every parameter the node declares (node parameters, then the
  :class:`~vilib_ros.frontend.FrontendConfig` fields), :func:`default_values` their defaults;
* :func:`build_config` - the FrontendConfig of a set of parameter values (validated once, here);
* :func:`make_tracker` - the node's FeatureTracker for its cameras (stereo: the right camera and
  ``T_right_left`` from the two ``T_BS``), and :func:`warm_up` - the synthetic frames it runs first;
* :func:`calibration_notice` - the line the node logs at start about where its calibration comes from.
"""
from __future__ import annotations

import time

import numpy as np

from vilib_ros.camera import euroc_cam0
from vilib_ros.frontend import FeatureTracker, FrontendConfig
from vilib_ros.nodes.cdr import encode_image
from vilib_ros.nodes.conversions import TRACKS_LAYOUTS
from vilib_ros.nodes.params import ParamSpec, build_dataclass, camera_specs, default_right, specs_from_dataclass

# Changing these needs new subscriptions or buffers: fixed at start.
FRONTEND_READ_ONLY = ("stereo",)


def frontend_specs() -> list[ParamSpec]:
    """The FrontendConfig fields as parameters (help, range, choices from the fields' metadata)."""
    return specs_from_dataclass(FrontendConfig(), read_only=FRONTEND_READ_ONLY)


def node_specs(has_stereo_field: bool) -> list[ParamSpec]:
    specs = [
        ParamSpec("device", "auto", "where the frontend runs", choices=("auto", "cuda", "cpu"), read_only=True),
        ParamSpec("calibration_source", "parameters", "where the camera calibration comes from: the parameters "
                  "below (or camera_yaml), or the first camera_info message (T_BS still from the parameters)",
                  choices=("parameters", "camera_info"), read_only=True),
    ]
    specs += camera_specs("", euroc_cam0(), "left (cam0) camera")
    specs += camera_specs("right.", default_right(), "right (cam1) camera")
    if not has_stereo_field:
        specs.append(ParamSpec("stereo", False, "subscribe to image_right and track stereo", read_only=True))
    specs += [
        ParamSpec("image_transport", "raw", "raw: sensor_msgs/Image on image (image_right); compressed: "
                  "sensor_msgs/CompressedImage (PNG / JPEG) on image/compressed (image_right/compressed)",
                  choices=("raw", "compressed"), read_only=True),
        ParamSpec("queue_size", 10, "image subscription depth", range=(1, 1000), read_only=True),
        ParamSpec("input_reliability", "best_effort",
                  "QoS reliability of the image and IMU subscriptions: best_effort (sensor data) matches every "
                  "publisher; reliable is needed for images larger than Fast DDS's 512 KB shared-memory segment, "
                  "whose best-effort UDP fragments get dropped", choices=("best_effort", "reliable"), read_only=True),
        ParamSpec("stereo_timeout_s", 0.2, "a left image whose right image has not come after this long is "
                  "processed alone", range=(0.0, 10.0), read_only=True),
        ParamSpec("warm_up_frames", 8, "synthetic frames run through a new tracker before the first image "
                  "(module loading, CUDA graph capture, memory pools), then it is reset", range=(0, 100),
                  read_only=True),
        ParamSpec("imu_wait_s", 0.1, "longest an image waits for the IMU to reach its stamp before it is "
                  "processed (then counted as imu_incomplete); only while IMU is flowing", range=(0.0, 10.0),
                  read_only=True),
        ParamSpec("time_jump_threshold_s", 1.0, "a stamp jumping back, or forward by more than this, is a time "
                  "reset (looped bag, restarted driver): logged, counted, tracks start again", range=(0.001, 3600.0),
                  read_only=True),
        ParamSpec("gyro_range", 35.0, "IMU samples with |angular velocity| above this in any axis are rejected "
                  "(rad/s; the sensor's range)", range=(0.01, 1e4), read_only=True),
        ParamSpec("accel_range", 160.0, "IMU samples with |acceleration| above this in any axis are rejected "
                  "(m/s^2; the sensor's range)", range=(0.01, 1e5), read_only=True),
        ParamSpec("tracks_layout", "vins_mono", "channel layout of tracks (see the module docstring)",
                  choices=TRACKS_LAYOUTS, read_only=True),
        ParamSpec("publish_debug_image", True, "allow the tracks_image debug output"),
        ParamSpec("debug_image_encoding", "bgr8", "encoding of tracks_image", choices=("bgr8", "mono8")),
        ParamSpec("debug_image_max_rate_hz", 10.0, "tracks_image is drawn (in its own thread) at most this "
                  "often", range=(0.1, 1000.0)),
        ParamSpec("diagnostics_period_s", 1.0, "diagnostics publishing period", range=(0.1, 60.0), read_only=True),
        ParamSpec("stats_path", "", "write a JSON summary here on shutdown ('' = none)", read_only=True),
        ParamSpec("tracks_frame_id", "", "frame id of tracks ('' = the image's frame id)", read_only=True),
        ParamSpec("camera_frame_id", "cam0", "frame id of tracks when both tracks_frame_id and the image's "
                  "frame id are empty", read_only=True),
    ]
    return specs


def parameter_table() -> list[ParamSpec]:
    """Every parameter the node declares (node parameters, then FrontendConfig fields)."""
    fe = frontend_specs()
    return node_specs(any(s.name == "stereo" for s in fe)) + fe


def default_values(overrides: dict | None = None) -> dict:
    """{name: value} of every parameter of :func:`parameter_table` at its default (arrays as lists),
    with ``overrides`` applied (unknown names raise ValueError)."""
    values = {s.name: s.ros_default() for s in parameter_table()}
    unknown = set(overrides or {}) - set(values)
    if unknown:
        raise ValueError(f"unknown frontend_node parameters: {sorted(unknown)}")
    values.update(overrides or {})
    return values


def build_config(values: dict, fe_names=None, check: bool = True) -> FrontendConfig:
    """The FrontendConfig of parameter ``values`` (only the FrontendConfig fields are read),
    validated (ValueError) unless ``check`` is False: values that were validated already (a node's
    post-set callback gets exactly the values its on-set callback checked)."""
    if fe_names is None:
        fe_names = {s.name for s in frontend_specs()}
    cfg = build_dataclass(FrontendConfig, {k: v for k, v in values.items() if k in fe_names})
    return cfg.validate() if check else cfg     # validate() checks the nested detector / tracker configs too


#: the parameters that make up one camera's calibration (with a prefix: ``right.`` for cam1)
CALIBRATION_KEYS = ("image_width", "image_height", "intrinsics", "distortion_model", "distortion_coefficients", "T_BS")


def _is_default(values: dict, specs: dict, prefix: str) -> bool:
    """Every calibration parameter of the camera at ``prefix`` holds its declared default."""
    for key in CALIBRATION_KEYS:
        value, default = values[prefix + key], specs[prefix + key].ros_default()
        if isinstance(default, list):
            if len(value) != len(default) or not np.allclose(np.asarray(value, float), default, rtol=1e-9, atol=0):
                return False
        elif value != default:
            return False
    return True


def calibration_notice(values: dict, stereo: bool) -> tuple[str, bool]:
    """(one line saying where the calibration of the node with parameter ``values`` comes from,
    whether it is EuRoC V1_01's: the declared defaults, which a node started without ``camera_yaml``
    or calibration parameters gets). The node logs the line, as a warning in the second case."""
    if values["calibration_source"] == "camera_info":
        return ("calibration: K, D and image size from the first camera_info message"
                f"{' of each camera' if stereo else ''}, T_BS from the parameters"), False
    specs = {s.name: s for s in parameter_table()}
    parts, euroc = [], []
    for prefix, cam in (("", "cam0"), ("right.", "cam1")) if stereo else (("", "cam0"),):
        if values.get(prefix + "camera_yaml"):
            parts.append(f"{cam} from {prefix}camera_yaml {values[prefix + 'camera_yaml']}")
        elif _is_default(values, specs, prefix):
            parts.append(f"{cam} from the parameters")
            euroc.append(cam)
        else:
            parts.append(f"{cam} from the parameters ({prefix}intrinsics {list(values[prefix + 'intrinsics'])})")
    line = "calibration: " + ", ".join(parts)
    if euroc:
        line += (f" -- {' and '.join(euroc)} {'is' if len(euroc) == 1 else 'are'} EuRoC V1_01's (the parameters' "
                 "defaults), right only for EuRoC's cameras: give camera_yaml:=<sensor.yaml>"
                 f"{' and camera_right_yaml' if 'cam1' in euroc else ''} (or intrinsics, distortion_coefficients, "
                 "T_BS) for your camera")
    return line, bool(euroc)


def make_tracker(cam, config, device: str, first_id: int = 0, cam_right=None):
    """The node's FeatureTracker: ``cam_right`` given (stereo), the right camera with
    ``T_right_left`` from the two cameras' ``T_BS``. ``config`` is validated already
    (:func:`build_config`): the tracker does not check it again."""
    kwargs = {"first_id": first_id}
    if cam_right is not None:
        kwargs.update(camera_right=cam_right, T_right_left=np.linalg.inv(cam_right.T_BS) @ cam.T_BS)
    return FeatureTracker(cam, config, device=device, validated=True, **kwargs)


def warm_up(tracker, n: int, cam, stereo: bool, convert=None, encode=None) -> float:
    """``n`` frames of a blocky random texture moving 1 px per frame (corners to detect, tracks to
    follow; the right image 8 px apart) through ``tracker``, then ``reset()``; ``convert`` (a
    serialized image -> its conversion) and ``encode`` (a TrackFrame -> the tracks message) are
    called too (their first calls import OpenCV and build buffers). Returns the seconds it took;
    exceptions propagate after the reset."""
    t0 = time.monotonic()
    h, w = cam.height, cam.width
    rng = np.random.default_rng(0)
    tex = np.kron(rng.integers(0, 256, (h // 8 + 2, w // 8 + 3), dtype=np.uint8), np.ones((8, 8), np.uint8))
    try:
        for k in range(n):
            d = k % 8                   # 1 px a frame, back to the start every 8 (stays inside tex)
            img = np.ascontiguousarray(tex[8:8 + h, 8 + d:8 + d + w])
            right = np.ascontiguousarray(tex[8:8 + h, 16 + d:16 + d + w]) if stereo else None
            if k == 0 and convert is not None:
                convert(encode_image(50_000_000, "warm_up", img, "mono8"))
            frame = tracker.process(img, (k + 1) * 50_000_000, image_right=right)
            if encode is not None:
                encode(frame)
    finally:
        tracker.reset()
    return time.monotonic() - t0
