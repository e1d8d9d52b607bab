"""Launch frontend + backend: camera(s) + IMU in, tracks, odometry, path and landmarks out.

    ros2 launch vilib_ros vio.launch.py image:=/cam0/image_raw image_right:=/cam1/image_raw imu:=/imu0

Arguments: ``params_file`` (default: the package's config/euroc.yaml), ``device``,
``camera_yaml`` / ``camera_right_yaml`` / ``imu_yaml`` (EuRoC sensor.yaml files; '' =
calibration from params_file), ``stereo`` (true | false; '' = params_file's, which is true in
config/euroc.yaml: a mono camera needs stereo:=false), ``calibration_source`` (parameters | camera_info: K, D, size
from the first message on ``camera_info`` / ``camera_info_right``), ``image_transport``
(raw | compressed: ``<image>/compressed``), ``image``, ``image_right``, ``imu``,
``camera_info``, ``camera_info_right``, ``tracks_layout`` (vins_mono | vins_fusion),
``odom_frame`` / ``base_frame`` (REP 105, default odom / base_link), ``publish_tf``
(odom -> base_link on /tf, the extrinsics on /tf_static), ``trajectory_path`` (TUM file
written by the backend as it goes; '' = none).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from vilib_ros.allocator import jemalloc_path, with_jemalloc
from vilib_ros.launch_params import parse_stereo
from vilib_ros.nodes.processes import with_fastdds_profile


def generate_launch_description():
    share = get_package_share_directory("vilib_ros")
    default_params = os.path.join(share, "config", "euroc.yaml")
    params_file = LaunchConfiguration("params_file")
    args = [
        DeclareLaunchArgument("params_file", default_value=default_params),
        DeclareLaunchArgument("device", default_value="auto", description="auto | cuda | cpu"),
        DeclareLaunchArgument("camera_yaml", default_value=""),
        DeclareLaunchArgument("camera_right_yaml", default_value=""),
        DeclareLaunchArgument("imu_yaml", default_value=""),
        DeclareLaunchArgument("stereo", default_value="", description="true | false ('' = the params_file's)"),
        DeclareLaunchArgument("image", default_value="/cam0/image_raw"),
        DeclareLaunchArgument("image_right", default_value="/cam1/image_raw"),
        DeclareLaunchArgument("imu", default_value="/imu0"),
        DeclareLaunchArgument("camera_info", default_value="/cam0/camera_info"),
        DeclareLaunchArgument("camera_info_right", default_value="/cam1/camera_info"),
        DeclareLaunchArgument("calibration_source", default_value="parameters", description="parameters | camera_info"),
        DeclareLaunchArgument("image_transport", default_value="raw", description="raw | compressed"),
        DeclareLaunchArgument("tracks_layout", default_value="vins_mono", description="vins_mono | vins_fusion"),
        DeclareLaunchArgument("odom_frame", default_value="odom"),
        DeclareLaunchArgument("base_frame", default_value="base_link"),
        DeclareLaunchArgument("publish_tf", default_value="true"),
        DeclareLaunchArgument("trajectory_path", default_value=""),
    ]
    # the project's Fast DDS profile (a shared-memory segment that holds stereo pairs) unless one is chosen
    profile = with_fastdds_profile(dict(os.environ)).get("FASTRTPS_DEFAULT_PROFILES_FILE")
    env = [SetEnvironmentVariable("FASTRTPS_DEFAULT_PROFILES_FILE", profile)] if profile else []
    return LaunchDescription(env + args + [OpaqueFunction(function=_nodes, args=[params_file])])


def _path(argument: str) -> ParameterValue:
    """A file name argument as a string parameter (not read as YAML: a name such as ``1.yaml`` stays text)."""
    return ParameterValue(LaunchConfiguration(argument), value_type=str)


def _nodes(context, params_file):
    """frontend_node and backend_node; ``stereo`` is passed only where the argument gives it."""
    calib = {"camera_yaml": _path("camera_yaml"), "right.camera_yaml": _path("camera_right_yaml")}
    stereo = parse_stereo(context.launch_configurations.get("stereo", ""))
    if stereo is not None:
        calib["stereo"] = stereo
    frontend = Node(
        package="vilib_ros",
        executable="frontend_node",
        name="frontend_node",
        output="screen",
        parameters=[params_file, dict(calib, device=LaunchConfiguration("device"),
                                      calibration_source=LaunchConfiguration("calibration_source"),
                                      image_transport=LaunchConfiguration("image_transport"),
                                      tracks_layout=LaunchConfiguration("tracks_layout"))],
        remappings=[("image", LaunchConfiguration("image")),
                    ("image_right", LaunchConfiguration("image_right")),
                    ("image/compressed", [LaunchConfiguration("image"), "/compressed"]),
                    ("image_right/compressed", [LaunchConfiguration("image_right"), "/compressed"]),
                    ("camera_info", LaunchConfiguration("camera_info")),
                    ("camera_info_right", LaunchConfiguration("camera_info_right")),
                    ("imu", LaunchConfiguration("imu")),
                    ("tracks", "/tracks"),
                    ("tracks_image", "/tracks_image"),
                    ("diagnostics", "/diagnostics")],
    )
    backend = Node(
        package="vilib_ros",
        executable="backend_node",
        name="backend_node",
        output="screen",
        # jemalloc where installed (vilib_ros.allocator: gtsam's small allocations, ~14 % of the backend's time)
        additional_env={"LD_PRELOAD": with_jemalloc(dict(os.environ))["LD_PRELOAD"]} if jemalloc_path() else None,
        parameters=[params_file, dict(calib, imu_yaml=_path("imu_yaml"), trajectory_path=_path("trajectory_path"),
                                      odom_frame=LaunchConfiguration("odom_frame"),
                                      base_frame=LaunchConfiguration("base_frame"),
                                      publish_tf=LaunchConfiguration("publish_tf"))],
        remappings=[("tracks", "/tracks"),
                    ("imu", LaunchConfiguration("imu")),
                    ("odometry", "/odometry"),
                    ("odometry_imu", "/odometry_imu"),
                    ("path", "/path"),
                    ("landmarks", "/landmarks"),
                    ("diagnostics", "/diagnostics")],
    )
    return [frontend, backend]
