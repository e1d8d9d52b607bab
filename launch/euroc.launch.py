"""Replay EuRoC through the whole pipeline and show it in rviz2.

    ros2 launch vilib_ros euroc.launch.py dataset:=/data/V1_01_easy rate:=1.0

Starts player_node (ASL folder, ROS 1 .bag or ROS 2 bag), frontend_node and backend_node
(through vio.launch.py) and rviz2 with config/vio.rviz (track image, path, odometry,
landmarks). Arguments: ``dataset`` (required), ``rate`` (1.0 = real time, 0 = as fast as
the frontend accepts), ``device``, ``params_file``, ``rviz`` (true|false),
``trajectory_path``, ``camera_yaml`` / ``camera_right_yaml`` / ``imu_yaml`` (default: the
EuRoC calibration in params_file).
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from vilib_ros.nodes.processes import with_fastdds_profile


def generate_launch_description():
    share = get_package_share_directory("vilib_ros")
    default_params = os.path.join(share, "config", "euroc.yaml")
    rviz_config = os.path.join(share, "config", "vio.rviz")
    dataset = LaunchConfiguration("dataset")
    args = [
        DeclareLaunchArgument("dataset", description="EuRoC ASL folder, ROS 1 .bag or ROS 2 bag folder"),
        DeclareLaunchArgument("rate", default_value="1.0", description="replay speed; 0 = backpressure"),
        DeclareLaunchArgument("device", default_value="auto"),
        DeclareLaunchArgument("params_file", default_value=default_params),
        DeclareLaunchArgument("rviz", default_value="true"),
        DeclareLaunchArgument("trajectory_path", default_value=""),
        # '' = the EuRoC calibration in params_file (the same for every EuRoC sequence); for other
        # ASL folders pass their mav0/cam0/sensor.yaml, mav0/cam1/sensor.yaml, mav0/imu0/sensor.yaml.
        DeclareLaunchArgument("camera_yaml", default_value=""),
        DeclareLaunchArgument("camera_right_yaml", default_value=""),
        DeclareLaunchArgument("imu_yaml", default_value=""),
    ]
    player = Node(
        package="vilib_ros",
        executable="player_node",
        name="player_node",
        output="screen",
        parameters=[LaunchConfiguration("params_file"),
                    {"dataset": dataset, "rate": LaunchConfiguration("rate")}],
        remappings=[("cam0/image_raw", "/cam0/image_raw"), ("cam1/image_raw", "/cam1/image_raw"),
                    ("imu0", "/imu0"), ("tracks", "/tracks"), ("player_done", "/player_done")],
    )
    vio = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(os.path.join(share, "launch", "vio.launch.py")),
        launch_arguments={
            "params_file": LaunchConfiguration("params_file"),
            "device": LaunchConfiguration("device"),
            "camera_yaml": LaunchConfiguration("camera_yaml"),
            "camera_right_yaml": LaunchConfiguration("camera_right_yaml"),
            "imu_yaml": LaunchConfiguration("imu_yaml"),
            "trajectory_path": LaunchConfiguration("trajectory_path"),
            "image": "/cam0/image_raw", "image_right": "/cam1/image_raw", "imu": "/imu0",
        }.items(),
    )
    rviz = Node(
        package="rviz2",
        executable="rviz2",
        name="rviz2",
        arguments=["-d", rviz_config],
        condition=IfCondition(LaunchConfiguration("rviz")),
    )
    # the project's Fast DDS profile (a shared-memory segment that holds stereo pairs) unless one is chosen
    profile = with_fastdds_profile(dict(os.environ)).get("FASTRTPS_DEFAULT_PROFILES_FILE")
    env = [SetEnvironmentVariable("FASTRTPS_DEFAULT_PROFILES_FILE", profile)] if profile else []
    return LaunchDescription(env + args + [player, vio, rviz])
