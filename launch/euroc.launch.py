"""Replay a dataset through the whole pipeline and show it in rviz2.

    ros2 launch vilib_ros euroc.launch.py dataset:=/data/V1_01_easy rate:=1.0

Starts player_node (EuRoC ASL folder, ROS 1 .bag or ROS 2 bag), frontend_node and backend_node
(through vio.launch.py) and rviz2 with config/vio.rviz (track image, path, odometry, landmarks).

The calibration is resolved as ``vilib-ros run`` resolves it: ``calibration`` / ``imu_calibration``
(a Kalibr camchain-imucam.yaml / imu.yaml, or EuRoC sensor.yaml files) where given, else the
replayed dataset's own (its ``mav0/cam*/sensor.yaml`` and ``mav0/imu0/sensor.yaml``, a bag's
camera_info; EuRoC's defaults only for EuRoC's own bags, said loudly); a dataset without
calibration stops the launch with one line naming how to give it. Where each value came from is
logged at start. The cameras and IMU noise are written as ``cam0.yaml`` / ``cam1.yaml`` / ``imu0.yaml`` into ``calibration_dir`` and given to
the nodes (:func:`vilib_ros.launch_params.dataset_node_params`). Mono or stereo follows the
dataset (a ``cam1`` folder: stereo) unless ``stereo`` says otherwise. A dataset that cannot be
read, or ``stereo:=true`` for one camera, stops the launch with one line saying why.

Arguments: ``dataset`` (required), ``rate`` (1.0 = real time, 0 = as fast as the frontend
accepts), ``device``, ``params_file`` (algorithm settings; its calibration is replaced by the
dataset's), ``calibration`` / ``imu_calibration`` (see above), ``stereo`` (auto | true | false), ``rviz`` (true | false; where rviz2 is not
installed a warning says so and the rest runs), ``trajectory_path``, ``camera_yaml`` /
``camera_right_yaml`` / ``imu_yaml`` (sensor.yaml files that replace the dataset's),
``calibration_dir`` (default: a new temporary folder).
"""
import os
import shutil
import tempfile
from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_prefix, get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction, SetEnvironmentVariable
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.logging import get_logger
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from vilib_ros.launch_params import dataset_node_params, parse_stereo
from vilib_ros.nodes.processes import with_fastdds_profile


def generate_launch_description():
    share = get_package_share_directory("vilib_ros")
    args = [
        DeclareLaunchArgument("dataset", description="EuRoC ASL folder, ROS 1 .bag or ROS 2 bag folder"),
        DeclareLaunchArgument("rate", default_value="1.0", description="replay speed; 0 = backpressure"),
        DeclareLaunchArgument("device", default_value="auto"),
        DeclareLaunchArgument("params_file", default_value=os.path.join(share, "config", "euroc.yaml")),
        DeclareLaunchArgument("stereo", default_value="auto",
                              description="auto (stereo where the dataset has cam1) | true | false"),
        DeclareLaunchArgument("rviz", default_value="true"),
        DeclareLaunchArgument("trajectory_path", default_value=""),
        # '' = the dataset's own calibration (its sensor.yaml files, a bag's camera_info)
        DeclareLaunchArgument("calibration", default_value="",
                              description="Kalibr camchain-imucam.yaml or EuRoC cam0/sensor.yaml ('' = the dataset's own)"),
        DeclareLaunchArgument("imu_calibration", default_value="",
                              description="Kalibr imu.yaml or EuRoC imu0/sensor.yaml ('' = the dataset's own)"),
        DeclareLaunchArgument("camera_yaml", default_value=""),
        DeclareLaunchArgument("camera_right_yaml", default_value=""),
        DeclareLaunchArgument("imu_yaml", default_value=""),
        DeclareLaunchArgument("calibration_dir", default_value="",
                              description="where the dataset's calibration is written ('' = a new temporary folder)"),
    ]
    # the project's Fast DDS profile (a shared-memory segment that holds stereo pairs) unless one is chosen
    profile = with_fastdds_profile(dict(os.environ)).get("FASTRTPS_DEFAULT_PROFILES_FILE")
    env = [SetEnvironmentVariable("FASTRTPS_DEFAULT_PROFILES_FILE", profile)] if profile else []
    return LaunchDescription(env + args + [OpaqueFunction(function=_pipeline, args=[share])])


def _refuse(reason: str) -> RuntimeError:
    """The one line launch prints where this launch cannot start (launch ends with exit 1)."""
    return RuntimeError(f"euroc.launch.py: cannot start: {reason}")


def _pipeline(context, share):
    """player, frontend + backend (vio.launch.py) and rviz2, with the dataset's calibration."""
    log = get_logger("euroc.launch.py")
    cfg = context.launch_configurations
    dataset = Path(cfg["dataset"]).expanduser().resolve()
    try:
        rate = float(cfg["rate"])
    except ValueError:
        raise _refuse(f"rate:={cfg['rate']} is not a number") from None
    try:
        given = parse_stereo(cfg["stereo"])
    except ValueError as exc:
        raise _refuse(str(exc)) from None
    rviz = cfg["rviz"].strip().lower()
    if rviz not in ("true", "false"):
        raise _refuse(f"rviz:={cfg['rviz']} is not true or false")
    out_dir = cfg["calibration_dir"] or tempfile.mkdtemp(prefix="vilib_ros_calibration_")
    try:
        calib = dataset_node_params(dataset, out_dir, given, cfg["calibration"], cfg["imu_calibration"])
    except (OSError, ValueError) as exc:
        if not cfg["calibration_dir"]:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise _refuse(str(exc)) from None
    for arg, key in (("camera_yaml", "camera_yaml"), ("camera_right_yaml", "right.camera_yaml"),
                     ("imu_yaml", "imu_yaml")):
        if cfg[arg]:
            calib[key] = str(Path(cfg[arg]).expanduser().resolve())
    stereo = calib["stereo"]
    how = "from the dataset" if given is None else f"stereo:={cfg['stereo']}"
    files = [f"camera_yaml {calib['camera_yaml']}"]
    if stereo:
        files.append(f"camera_right_yaml {calib['right.camera_yaml']}")
    files.append(f"imu_yaml {calib['imu_yaml']}")
    log.info(f"{dataset}: {'stereo' if stereo else 'mono'} ({how}); calibration: " + ", ".join(files))
    for line in calib.pop("sources"):
        (log.warning if line.lower().startswith("warning") else log.info)(line)
    player = Node(
        package="vilib_ros",
        executable="player_node",
        name="player_node",
        output="screen",
        parameters=[LaunchConfiguration("params_file"),
                    {"dataset": ParameterValue(str(dataset), value_type=str), "rate": rate, "publish_cam1": stereo}],
        remappings=[("cam0/image_raw", "/cam0/image_raw"), ("cam1/image_raw", "/cam1/image_raw"),
                    ("imu0", "/imu0"), ("tracks", "/tracks"), ("player_done", "/player_done")],
    )
    vio = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "vio.launch.py")),
        launch_arguments={
            "params_file": LaunchConfiguration("params_file"),
            "device": LaunchConfiguration("device"),
            "stereo": "true" if stereo else "false",
            "camera_yaml": calib["camera_yaml"],
            "camera_right_yaml": calib.get("right.camera_yaml", ""),
            "imu_yaml": calib["imu_yaml"],
            "trajectory_path": LaunchConfiguration("trajectory_path"),
            "image": "/cam0/image_raw", "image_right": "/cam1/image_raw", "imu": "/imu0",
        }.items(),
    )
    actions = [player, vio]
    if rviz == "true":
        try:
            get_package_prefix("rviz2")
        except PackageNotFoundError:
            log.warning("rviz:=true, but rviz2 is not installed (no package rviz2 on AMENT_PREFIX_PATH): running "
                        "without it; install ros-$ROS_DISTRO-rviz2, or pass rviz:=false")
        else:
            actions.append(Node(package="rviz2", executable="rviz2", name="rviz2",
                                arguments=["-d", os.path.join(share, "config", "vio.rviz")]))
    return actions
