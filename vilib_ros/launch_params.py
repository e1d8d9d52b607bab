"""Node parameters that the launch files derive from their arguments (no rclpy, no ``launch``).

* :func:`dataset_node_params` - the calibration of a dataset that ``euroc.launch.py`` replays
  (its ``sensor.yaml`` files, as ``vilib-ros run`` uses them): the camera and IMU files written
  for the nodes, and mono or stereo from its cameras;
* :func:`parse_stereo` - a launch argument ``stereo`` (``''`` / ``auto``: not given) as a bool.

Errors are ``ValueError`` / ``FileNotFoundError`` whose message is one line naming what is wrong
and how to give it; the launch files raise them, and ``launch`` prints that line.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def parse_stereo(value: str | bool | None) -> bool | None:
    """``True`` / ``False`` for a given ``stereo`` argument, ``None`` for ``''`` or ``auto`` (not given)."""
    if value is None or isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("", "auto"):
        return None
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"stereo:={value} is not true, false or auto")


def dataset_node_params(dataset_path: str | Path, out_dir: str | Path, stereo: bool | None = None,
                        calibration: str | Path | None = None, imu_calibration: str | Path | None = None) -> dict:
    """The calibration parameters of the nodes that replay ``dataset_path`` (an EuRoC ASL folder,
    a ROS 1 ``.bag`` or a ROS 2 bag, read with :func:`vilib_ros.datasets.open_dataset`).

    The calibration is resolved as ``vilib-ros run`` resolves it (:mod:`vilib_ros.calibration`):
    ``calibration`` / ``imu_calibration`` (a Kalibr camchain / imu.yaml or EuRoC ``sensor.yaml``
    files) where given, else what the dataset holds; nothing is guessed (EuRoC's defaults only for
    EuRoC's own bags, and said so). Writes ``cam0.yaml`` (``cam1.yaml`` in stereo) and ``imu0.yaml``
    into ``out_dir`` (EuRoC sensor.yaml layout) and returns ``{"camera_yaml", "right.camera_yaml"
    (stereo only), "imu_yaml": paths, "stereo": bool, "sources": [lines naming where each value
    came from]}``. ``stereo=None`` detects it: stereo where the dataset has a second camera.
    ``stereo=True`` for a dataset with one camera raises ``ValueError``; so does a dataset that
    cannot be read or has no calibration (``FileNotFoundError`` where the path does not exist)."""
    import yaml

    from vilib_ros.calibration import read_given
    from vilib_ros.datasets import open_dataset

    given = read_given(calibration or None, imu_calibration or None)
    ds = open_dataset(dataset_path)
    try:
        n_cams = ds.num_cameras
        if stereo and n_cams < 2:
            raise ValueError(f"stereo:=true, but {dataset_path} has one camera (no cam1): "
                             "give stereo:=false, or a stereo dataset")
        stereo = n_cams >= 2 if stereo is None else bool(stereo)
        cal = ds.resolve_calibration(given, 2 if stereo else 1, ds.has_imu)
        warnings = list(getattr(ds, "warnings", []))
    finally:
        ds.close()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def write(name: str, d: dict) -> str:
        (out / name).write_text(yaml.safe_dump(d, sort_keys=False))
        return str((out / name).resolve())

    params = {"camera_yaml": write("cam0.yaml", cal.cameras[0].to_euroc_dict())}
    if stereo:
        params["right.camera_yaml"] = write("cam1.yaml", cal.cameras[1].to_euroc_dict())
    noise = {k: float(v) for k, v in dict(cal.imu_noise or {}).items() if isinstance(v, (int, float))}
    params["imu_yaml"] = write("imu0.yaml", noise)
    params["stereo"] = stereo
    params["sources"] = cal.console_lines()
    for w in warnings:
        log.warning("%s", w)
    return params
