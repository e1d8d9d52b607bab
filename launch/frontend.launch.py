"""Launch the vilib_ros frontend alone: camera(s) + IMU in, feature tracks out.

    ros2 launch vilib_ros frontend.launch.py image:=/cam0/image_raw imu:=/imu0 device:=cuda

Arguments: ``params_file`` (default: the package's config/euroc.yaml), ``device``
(auto|cuda|cpu), ``camera_yaml`` / ``camera_right_yaml`` (EuRoC sensor.yaml of cam0 / cam1;
'' = calibration from params_file), ``stereo`` (true | false; '' = params_file's, which is
true in config/euroc.yaml: a mono camera needs stereo:=false), ``calibration_source``
(parameters | camera_info), ``image_transport`` (raw | compressed), ``tracks_layout``
(vins_mono | vins_fusion), ``image``, ``image_right``, ``imu``, ``camera_info``,
``camera_info_right`` (input topics), ``tracks`` (output topic).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from vilib_ros.launch_params import parse_stereo
from vilib_ros.nodes.processes import with_fastdds_profile


def generate_launch_description():
    share = get_package_share_directory("vilib_ros")
    default_params = os.path.join(share, "config", "euroc.yaml")
    args = [
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="parameter file (frontend_node section)"),
        DeclareLaunchArgument("device", default_value="auto", description="auto | cuda | cpu"),
        DeclareLaunchArgument("camera_yaml", default_value="",
                              description="EuRoC sensor.yaml of cam0 ('' = calibration from params_file)"),
        DeclareLaunchArgument("camera_right_yaml", default_value="",
                              description="EuRoC sensor.yaml of cam1 ('' = calibration from params_file)"),
        DeclareLaunchArgument("stereo", default_value="", description="true | false ('' = the params_file's)"),
        DeclareLaunchArgument("image", default_value="/cam0/image_raw"),
        DeclareLaunchArgument("image_right", default_value="/cam1/image_raw"),
        DeclareLaunchArgument("imu", default_value="/imu0"),
        DeclareLaunchArgument("camera_info", default_value="/cam0/camera_info"),
        DeclareLaunchArgument("camera_info_right", default_value="/cam1/camera_info"),
        DeclareLaunchArgument("calibration_source", default_value="parameters", description="parameters | camera_info"),
        DeclareLaunchArgument("image_transport", default_value="raw", description="raw | compressed"),
        DeclareLaunchArgument("tracks_layout", default_value="vins_mono", description="vins_mono | vins_fusion"),
        DeclareLaunchArgument("tracks", default_value="/tracks"),
    ]
    # the project's Fast DDS profile (a shared-memory segment that holds stereo pairs) unless one is chosen
    profile = with_fastdds_profile(dict(os.environ)).get("FASTRTPS_DEFAULT_PROFILES_FILE")
    env = [SetEnvironmentVariable("FASTRTPS_DEFAULT_PROFILES_FILE", profile)] if profile else []
    return LaunchDescription(env + args + [OpaqueFunction(function=_frontend)])


def _frontend(context):
    """frontend_node; ``stereo`` is passed only where the argument gives it."""
    params = {"device": LaunchConfiguration("device"),
              # file names as text (not read as YAML)
              "camera_yaml": ParameterValue(LaunchConfiguration("camera_yaml"), value_type=str),
              "right.camera_yaml": ParameterValue(LaunchConfiguration("camera_right_yaml"), value_type=str),
              "calibration_source": LaunchConfiguration("calibration_source"),
              "image_transport": LaunchConfiguration("image_transport"),
              "tracks_layout": LaunchConfiguration("tracks_layout")}
    stereo = parse_stereo(context.launch_configurations.get("stereo", ""))
    if stereo is not None:
        params["stereo"] = stereo
    return [Node(
        package="vilib_ros",
        executable="frontend_node",
        name="frontend_node",
        output="screen",
        parameters=[LaunchConfiguration("params_file"), params],
        remappings=[("image", LaunchConfiguration("image")),
                    ("image_right", LaunchConfiguration("image_right")),
                    ("image/compressed", [LaunchConfiguration("image"), "/compressed"]),
                    ("image_right/compressed", [LaunchConfiguration("image_right"), "/compressed"]),
                    ("camera_info", LaunchConfiguration("camera_info")),
                    ("camera_info_right", LaunchConfiguration("camera_info_right")),
                    ("imu", LaunchConfiguration("imu")),
                    ("tracks", LaunchConfiguration("tracks")),
                    ("diagnostics", "/diagnostics")],
    )]
