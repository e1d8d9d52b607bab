"""Launch frontend + backend: camera(s) + IMU in, tracks, odometry, path and landmarks out.

    ros2 launch vilib_ros vio.launch.py image:=/cam0/image_raw image_right:=/cam1/image_raw imu:=/imu0

Arguments: ``params_file`` (default: the package's config/euroc.yaml), ``device``,
``camera_yaml`` / ``camera_right_yaml`` / ``imu_yaml`` (EuRoC sensor.yaml files; '' =
calibration from params_file), ``image``, ``image_right``, ``imu``, ``trajectory_path``
(TUM file written by the backend on shutdown; '' = none).
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
    params_file = LaunchConfiguration("params_file")
    calib = {"camera_yaml": LaunchConfiguration("camera_yaml"),
             "right.camera_yaml": LaunchConfiguration("camera_right_yaml")}
    args = [
        DeclareLaunchArgument("params_file", default_value=default_params),
        DeclareLaunchArgument("device", default_value="auto", description="auto | cuda | cpu"),
        DeclareLaunchArgument("camera_yaml", default_value=""),
        DeclareLaunchArgument("camera_right_yaml", default_value=""),
        DeclareLaunchArgument("imu_yaml", default_value=""),
        DeclareLaunchArgument("image", default_value="/cam0/image_raw"),
        DeclareLaunchArgument("image_right", default_value="/cam1/image_raw"),
        DeclareLaunchArgument("imu", default_value="/imu0"),
        DeclareLaunchArgument("trajectory_path", default_value=""),
    ]
    frontend = Node(
        package="vilib_ros",
        executable="frontend_node",
        name="frontend_node",
        output="screen",
        parameters=[params_file, dict(calib, device=LaunchConfiguration("device"))],
        remappings=[("image", LaunchConfiguration("image")),
                    ("image_right", LaunchConfiguration("image_right")),
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
        parameters=[params_file, dict(calib, imu_yaml=LaunchConfiguration("imu_yaml"),
                                      trajectory_path=LaunchConfiguration("trajectory_path"))],
        remappings=[("tracks", "/tracks"),
                    ("imu", LaunchConfiguration("imu")),
                    ("odometry", "/odometry"),
                    ("odometry_imu", "/odometry_imu"),
                    ("path", "/path"),
                    ("landmarks", "/landmarks"),
                    ("diagnostics", "/diagnostics")],
    )
    return LaunchDescription(args + [frontend, backend])
