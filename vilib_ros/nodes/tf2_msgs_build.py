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
import subprocess
import sys
import sysconfig
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
_TYPESUPPORTS = ("rosidl_typesupport_fastrtps_c", "rosidl_typesupport_introspection_c")


class Tf2MsgsUnavailable(RuntimeError):
    """tf2_msgs is neither installed nor buildable here (the reason says why)."""


def cache_dir() -> Path:
    base = Path(os.environ.get("VILIB_ROS_CACHE") or Path.home() / ".cache" / "vilib_ros")
    key = hashlib.sha1(f"{sys.prefix}|{sys.version}|{IDL}".encode()).hexdigest()[:12]
    return base / f"tf2_msgs-py{sys.version_info[0]}{sys.version_info[1]}-{key}"


_LIBS = ("generator_c", "typesupport_introspection_c", "typesupport_fastrtps_c", "typesupport_c", "generator_py")


def _activate(root: Path) -> None:
    import ctypes

    # rosidl_typesupport_c's dispatch dlopen()s the type support libraries by name; the dynamic
    # loader reads LD_LIBRARY_PATH only at process start, so load them now: a later dlopen of the
    # same soname finds the loaded library.
    for name in _LIBS:
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
    with _lock(root.with_suffix(".lock")):
        if (root / "tf2_msgs" / "msg" / "__init__.py").is_file():
            return root
        cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
        cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
        if not cc or not cxx:
            raise Tf2MsgsUnavailable("tf2_msgs is not installed and no C/C++ compiler (gcc, g++) is here to "
                                     "build it; install ros-<distro>-tf2-msgs, or a compiler")
        with tempfile.TemporaryDirectory(prefix="tf2_msgs_") as tmpd:
            tmp = Path(tmpd)
            try:
                _generate(tmp)
            except ImportError as exc:
                raise Tf2MsgsUnavailable(f"tf2_msgs is not installed and the rosidl generators are missing "
                                         f"({exc}); install ros-<distro>-tf2-msgs") from exc
            stage = tmp / "stage"
            _compile(tmp / "gen", stage, cc, cxx)
            if root.exists():
                shutil.rmtree(root)
            shutil.move(str(stage), str(root))
    return root


def _generate(tmp: Path) -> None:
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    from rosidl_generator_c.cli import GenerateC
    from rosidl_generator_py.cli import GeneratePython
    from rosidl_typesupport_c.cli import GenerateCTypesupport
    from rosidl_typesupport_fastrtps_c.cli import GenerateFastRTPSCTypesupport
    from rosidl_typesupport_introspection_c.cli import GenerateIntrospectionCTypesupport

    (tmp / "idl" / "msg").mkdir(parents=True)
    (tmp / "idl" / "msg" / "TFMessage.idl").write_text(IDL)
    files = [f"{tmp / 'idl'}:msg/TFMessage.idl"]
    include = [str(Path(sys.prefix) / "share")]
    gens = [("c", GenerateC("c")),
            ("typesupport_c", GenerateCTypesupport("c", typesupport_implementations=list(_TYPESUPPORTS))),
            ("introspection_c", GenerateIntrospectionCTypesupport("introspection_c")),
            ("fastrtps_c", GenerateFastRTPSCTypesupport("fastrtps_c")),
            ("py", GeneratePython("py", typesupport_implementations=["rosidl_typesupport_c", *_TYPESUPPORTS]))]
    for name, ext in gens:
        ext.generate("tf2_msgs", files, include, tmp / "gen" / name)


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise Tf2MsgsUnavailable(f"building tf2_msgs failed: {' '.join(cmd[:4])} ...\n{r.stderr[-2000:]}")


def _compile(gen: Path, stage: Path, cc: str, cxx: str) -> None:
    import numpy

    prefix = Path(sys.prefix)
    inc_root = gen / "include"
    for part in ("c", "introspection_c", "fastrtps_c"):       # as installed: include/tf2_msgs/msg/...
        shutil.copytree(gen / part, inc_root / "tf2_msgs", dirs_exist_ok=True)
    incs = [f"-I{inc_root}", f"-I{prefix / 'include'}"] + [f"-I{d}" for d in sorted((prefix / "include").glob("*")) if d.is_dir()]
    incs += [f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}"]
    lib = stage / "lib"
    lib.mkdir(parents=True)
    link = [f"-L{prefix / 'lib'}", f"-L{lib}", "-Wl,-rpath,$ORIGIN", f"-Wl,-rpath,{prefix / 'lib'}"]
    deps_c = [f"-l{d}__rosidl_generator_c" for d in _DEPS] + ["-lrosidl_runtime_c", "-lrcutils"]

    def shared(name, sources, compiler, extra_libs, flags=()):
        _run([compiler, "-shared", "-fPIC", "-O2", *flags, *incs, *map(str, sources), "-o", str(lib / name),
              f"-Wl,-soname,{name}", *link, *extra_libs])

    c = gen / "c" / "msg" / "detail"
    shared("libtf2_msgs__rosidl_generator_c.so", sorted(c.glob("*.c")), cc,
           deps_c + ["-lrosidl_dynamic_typesupport"], ["-DROSIDL_GENERATOR_C_BUILDING_DLL_tf2_msgs"])
    shared("libtf2_msgs__rosidl_typesupport_introspection_c.so",
           sorted((gen / "introspection_c" / "msg" / "detail").glob("*.c")), cc,
           ["-ltf2_msgs__rosidl_generator_c", "-lrosidl_typesupport_introspection_c"] + deps_c
           + [f"-l{d}__rosidl_typesupport_introspection_c" for d in _DEPS],
           ["-DROSIDL_TYPESUPPORT_INTROSPECTION_C_BUILDING_DLL_tf2_msgs"])
    shared("libtf2_msgs__rosidl_typesupport_fastrtps_c.so",
           sorted((gen / "fastrtps_c" / "msg" / "detail").glob("*.cpp")), cxx,
           ["-ltf2_msgs__rosidl_generator_c", "-lrosidl_typesupport_fastrtps_c", "-lrosidl_typesupport_fastrtps_cpp",
            "-lfastcdr", "-lrmw"] + deps_c + [f"-l{d}__rosidl_typesupport_fastrtps_c" for d in _DEPS],
           ["-std=c++17", "-DROSIDL_TYPESUPPORT_FASTRTPS_C_BUILDING_DLL_tf2_msgs"])
    shared("libtf2_msgs__rosidl_typesupport_c.so", sorted((gen / "typesupport_c" / "msg").glob("*.cpp")), cxx,
           ["-ltf2_msgs__rosidl_generator_c", "-lrosidl_typesupport_c", "-lrcpputils"] + deps_c,
           ["-std=c++17", "-DROSIDL_TYPESUPPORT_C_BUILDING_DLL_tf2_msgs"])
    py = gen / "py"
    shared("libtf2_msgs__rosidl_generator_py.so", [py / "msg" / "_tf_message_s.c"], cc,
           ["-ltf2_msgs__rosidl_generator_c", "-ltf2_msgs__rosidl_typesupport_c"]
           + [f"-l{d}__rosidl_generator_py" for d in _DEPS] + deps_c)
    pkg = stage / "tf2_msgs"
    shutil.copytree(py / "msg", pkg / "msg", ignore=shutil.ignore_patterns("*.c"))
    (pkg / "__init__.py").write_text("")
    for ts in ("rosidl_typesupport_c", *_TYPESUPPORTS):
        ext = f"tf2_msgs_s__{ts}"
        _run([cc, "-shared", "-fPIC", "-O2", *incs, str(py / f"_tf2_msgs_s.ep.{ts}.c"), "-o", str(pkg / f"{ext}.so"),
              f"-L{prefix / 'lib'}", f"-L{lib}", "-Wl,-rpath,$ORIGIN/../lib", f"-Wl,-rpath,{prefix / 'lib'}",
              "-ltf2_msgs__rosidl_generator_py", f"-ltf2_msgs__{ts}", "-ltf2_msgs__rosidl_generator_c",
              "-lrosidl_runtime_c", "-lrcutils", "-lrmw"])


if __name__ == "__main__":
    try:
        import_tf2_msgs()
    except Tf2MsgsUnavailable as exc:
        print(f"tf2_msgs: {exc}", file=sys.stderr)
        sys.exit(1)
    import tf2_msgs

    print(Path(tf2_msgs.__file__).parent.parent)
