"""vilib_ros: ament_python package that is also pip-installable."""
from glob import glob

from setuptools import find_packages, setup

package_name = "vilib_ros"

setup(
    name=package_name,
    version="0.1.0",
    packages=find_packages(include=["vilib_ros", "vilib_ros.*"]),
    package_data={package_name: ["kernels/*.cu", "kernels/*.cuh", "nodes/fastdds_profile.xml"]},
    include_package_data=True,
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + package_name]),
        ("share/" + package_name, ["package.xml"]),
        ("share/" + package_name + "/launch", glob("launch/*.launch.py")),
        ("share/" + package_name + "/config", glob("config/*.yaml") + glob("config/*.rviz")),
        # launch_ros runs <prefix>/lib/vilib_ros/<node>: colcon installs the console scripts there
        # (setup.cfg), pip into <prefix>/bin; these launchers make both layouts work (see their text)
        ("lib/" + package_name, glob("resource/lib/*")),
    ],
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.24",
        "opencv-python-headless>=4.8",
        "pyyaml>=6",
        "tqdm>=4.60",
        "rosbags>=0.10",
        "matplotlib>=3.6",
        # the compiled CPU frontend (JIT, cached on disk; x86_64 and aarch64 wheels); without it
        # the CPU path falls back to the NumPy reference with a warning
        "numba>=0.59",
    ],
    extras_require={
        # CuPy built for CUDA 12 (Jetson JetPack 6, most desktops). For other CUDA
        # versions install the matching wheel instead, e.g. `pip install cupy-cuda13x`.
        "gpu": ["cupy-cuda12x>=13"],
        # Real rclpy over Fast DDS plus the message packages, from PyPI (x86_64 only).
        # On a Jetson or any machine with a system ROS 2, source it and skip this extra.
        "ros": [
            "ros-jazzy-rclpy[fastrtps]",
            "ros-jazzy-std-msgs",
            "ros-jazzy-sensor-msgs",
            "ros-jazzy-nav-msgs",
            "ros-jazzy-geometry-msgs",
            "ros-jazzy-visualization-msgs",
            "ros-jazzy-diagnostic-msgs",
        ],
        # Visual-inertial backend and trajectory evaluation.
        # (scipy: the own smoother's LAPACK calls; evo needs it as well)
        # gtsam 4.3 is built for CPython 3.11 and later only: on 3.10 (JetPack 6, Ubuntu 22.04) 4.3a1,
        # whose bindings vilib_ros/backend/_gtsam.py covers; final releases elsewhere (a pre-release in
        # the specifier would admit the next pre-release too). tools/check_platform_wheels.py checks.
        "backend": ['gtsam>=4.3; python_version >= "3.11"',
                    'gtsam>=4.3a1; python_version < "3.11"',
                    "evo>=1.20", "scipy>=1.8"],
        "test": ["pytest>=7", "scikit-image>=0.21"],
        # Benchmark-only peer (cuVSLAM through dim_odom, ~1.7 GB with its CUDA runtime wheels) for
        # `vilib-ros bench-accuracy`: install it into a separate environment and pass that Python
        # as --peer-python. Never imported by vilib_ros, never installed by CI.
        "peers": ["dim_odom>=0.4"],
    },
    zip_safe=False,
    maintainer="vilib_ros maintainers",
    maintainer_email="maintainers@vilib-ros.dev",
    description="GPU-accelerated VIO frontend (FAST, grid NMS, pyramidal LK) for ROS 2",
    license="BSD-3-Clause",
    entry_points={
        "console_scripts": [
            "vilib-ros = vilib_ros.cli:main",
            "frontend_node = vilib_ros.nodes.frontend_node:main",
            "backend_node = vilib_ros.nodes.backend_node:main",
            "player_node = vilib_ros.nodes.player_node:main",
            "recorder_node = vilib_ros.nodes.recorder_node:main",
        ],
    },
)
