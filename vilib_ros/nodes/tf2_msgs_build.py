"""``tf2_msgs`` for environments whose ROS 2 comes from PyPI wheels (which do not ship it).

With a system ROS 2 (``source /opt/ros/<distro>/setup.bash``) ``tf2_msgs`` is there and this
module only imports it. Where it is missing, :func:`import_tf2_msgs` builds the message
package ``tf2_msgs/msg/TFMessage`` (``geometry_msgs/TransformStamped[] transforms``, the
message of ``/tf`` and ``/tf_static``) from its interface definition with the ``rosidl``
generators the wheels do ship (C, C type support dispatch, introspection and Fast DDS type
supports, Python) and the C compiler, exactly as ``colcon build`` would, into a cache folder
(``$VILIB_ROS_CACHE`` or ``~/.cache/vilib_ros``), once per Python / ROS environment, then
imports it from there. The result is the real message type: ``tf2_ros`` / rviz2 on the same
DDS domain see our transforms.

Command line: ``python -m vilib_ros.nodes.tf2_msgs_build`` builds (or finds) it and prints the
folder. No rclpy import here until the package is imported.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

IDL = """\
// tf2_msgs/msg/TFMessage (ROS 2 geometry2), the message of /tf and /tf_static
#include "geometry_msgs/msg/TransformStamped.idl"

module tf2_msgs {
  module msg {
    struct TFMessage {
      sequence<geometry_msgs::msg::TransformStamped> transforms;
    };
  };
};
"""
_DEPS = ("geometry_msgs", "std_msgs", "builtin_interfaces")


class Tf2MsgsUnavailable(RuntimeError):
    """tf2_msgs is neither installed nor buildable here (the reason says why)."""


def cache_dir() -> Path:
    base = Path(os.environ.get("VILIB_ROS_CACHE") or Path.home() / ".cache" / "vilib_ros")
    key = hashlib.sha1(f"{sys.prefix}|{sys.version}|{IDL}".encode()).hexdigest()[:12]
    return base / f"tf2_msgs-py{sys.version_info[0]}{sys.version_info[1]}-{key}"


def _activate(root: Path) -> None:
    import ctypes

    # rosidl_typesupport_c's dispatch dlopen()s the type support libraries by name; the dynamic
    # loader reads LD_LIBRARY_PATH only at process start, so load them now: a later dlopen of the
    # same soname finds the loaded library.
    from vilib_ros.nodes.rosidl_build import LIBRARIES

    for name in LIBRARIES:
        ctypes.CDLL(str(root / "lib" / f"libtf2_msgs__rosidl_{name}.so"), mode=ctypes.RTLD_GLOBAL)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def import_tf2_msgs():
    """``tf2_msgs.msg`` (installed, cached, or built now); raises :class:`Tf2MsgsUnavailable`."""
    try:
        import tf2_msgs.msg as m

        return m
    except ImportError:
        pass
    root = cache_dir()
    if not (root / "tf2_msgs" / "msg" / "__init__.py").is_file():
        build(root)
    _activate(root)
    sys.modules.pop("tf2_msgs", None)
    import tf2_msgs.msg as m

    return m


@contextlib.contextmanager
def _lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build(root: Path) -> Path:
    """Generate and compile tf2_msgs into ``root`` (atomically; concurrent callers wait)."""
    from vilib_ros.nodes.rosidl_build import BuildError, build_interface_package

    with _lock(root.with_suffix(".lock")):
        if (root / "tf2_msgs" / "msg" / "__init__.py").is_file():
            return root
        with tempfile.TemporaryDirectory(prefix="tf2_msgs_") as tmpd:
            tmp = Path(tmpd)
            (tmp / "idl" / "msg").mkdir(parents=True)
            (tmp / "idl" / "msg" / "TFMessage.idl").write_text(IDL)
            stage = tmp / "stage"
            try:
                build_interface_package("tf2_msgs", tmp / "idl", ["msg/TFMessage.idl"], _DEPS, stage, tmp)
            except BuildError as exc:
                raise Tf2MsgsUnavailable(f"tf2_msgs is not installed and cannot be built here ({exc}); "
                                         "install ros-<distro>-tf2-msgs") from exc
            if root.exists():
                shutil.rmtree(root)
            shutil.move(str(stage), str(root))
    return root


if __name__ == "__main__":
    try:
        import_tf2_msgs()
    except Tf2MsgsUnavailable as exc:
        print(f"tf2_msgs: {exc}", file=sys.stderr)
        sys.exit(1)
    import tf2_msgs

    print(Path(tf2_msgs.__file__).parent.parent)
