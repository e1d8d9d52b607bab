"""Launch the vilib_ros frontend alone: camera(s) + IMU in, feature tracks out.

    ros2 launch vilib_ros frontend.launch.py image:=/cam0/image_raw imu:=/imu0 device:=cuda

Arguments: ``params_file`` (default: the package's config/euroc.yaml), ``device``
(auto|cuda|cpu), ``camera_yaml`` (EuRoC sensor.yaml; '' = calibration from params_file),
``image``, ``image_right``, ``imu`` (input topics), ``tracks`` (output topic).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node


def generate_launch_description():
    share = get_package_share_directory("vilib_ros")
    default_params = os.path.join(share, "config", "euroc.yaml")
    args = [
        DeclareLaunchArgument("params_file", default_value=default_params,
                              description="parameter file (frontend_node section)"),
        DeclareLaunchArgument("device", default_value="auto", description="auto | cuda | cpu"),
        DeclareLaunchArgument("camera_yaml", default_value="",
                              description="EuRoC sensor.yaml of cam0 ('' = calibration from params_file)"),
        DeclareLaunchArgument("image", default_value="/cam0/image_raw"),
        DeclareLaunchArgument("image_right", default_value="/cam1/image_raw"),
        DeclareLaunchArgument("imu", default_value="/imu0"),
        DeclareLaunchArgument("tracks", default_value="/tracks"),
    ]
    frontend = Node(
        package="vilib_ros",
        executable="frontend_node",
        name="frontend_node",
        output="screen",
        parameters=[LaunchConfiguration("params_file"),
                    {"device": LaunchConfiguration("device"),
                     "camera_yaml": LaunchConfiguration("camera_yaml")}],
        remappings=[("image", LaunchConfiguration("image")),
                    ("image_right", LaunchConfiguration("image_right")),
                    ("imu", LaunchConfiguration("imu")),
                    ("tracks", LaunchConfiguration("tracks")),
                    ("diagnostics", "/diagnostics")],
    )
    return LaunchDescription(args + [frontend])
