"""vilib_ros: GPU-accelerated visual-inertial odometry frontend for ROS 2.

Algorithm modules (detector, tracker, frontend, synthetic, euroc, backend) never
import rclpy; the ROS 2 nodes live in :mod:`vilib_ros.nodes`.
"""

__version__ = "0.1.0"
