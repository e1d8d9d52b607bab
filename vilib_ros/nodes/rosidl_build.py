"""Build a ROS 2 interface package (messages, services) from its definitions, as colcon would.

Environments whose ROS 2 comes from PyPI wheels have the ``rosidl`` generators (C, C type support
dispatch, introspection and Fast DDS type supports, Python) but not every interface package.
:func:`build_interface_package` generates the sources of one package from its ``.idl`` files and
compiles them with the C/C++ compiler into a folder laid out like an install prefix:

    <stage>/lib/lib<package>__rosidl_{generator_c,typesupport_*,generator_py}.so
    <stage>/<package>/{msg,srv}/...           the Python package, with its C extensions

``.msg`` / ``.srv`` definitions become ``.idl`` first (:func:`idl_from_definitions`, rosidl_adapter).
Used by :mod:`vilib_ros.nodes.tf2_msgs_build` and by the project's installer of the launch
tooling. No rclpy import here.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

TYPESUPPORTS = ("rosidl_typesupport_fastrtps_c", "rosidl_typesupport_introspection_c")
#: the libraries of one interface package, ``lib<package>__rosidl_<name>.so``, in load order
LIBRARIES = ("generator_c", "typesupport_introspection_c", "typesupport_fastrtps_c", "typesupport_c", "generator_py")


class BuildError(RuntimeError):
    """The package cannot be generated or compiled here (the message says why)."""


def compilers() -> tuple[str, str]:
    """(cc, cxx) found on PATH (``$CC`` / ``$CXX`` first); raises :class:`BuildError` without them."""
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    cxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if not cc or not cxx:
        raise BuildError("no C/C++ compiler (gcc, g++) is here to build ROS interface packages")
    return cc, cxx


def idl_from_definitions(package: str, package_dir: Path, rel_files: list[str], out_dir: Path) -> list[str]:
    """Translate ``.msg`` / ``.srv`` files (paths relative to ``package_dir``, e.g. ``srv/LoadNode.srv``)
    into ``.idl`` files under ``out_dir`` with rosidl_adapter; returns their paths relative to it."""
    from rosidl_adapter.msg import convert_msg_to_idl
    from rosidl_adapter.srv import convert_srv_to_idl

    out = []
    for rel in rel_files:
        rel_path = Path(rel)
        convert = {".msg": convert_msg_to_idl, ".srv": convert_srv_to_idl}.get(rel_path.suffix)
        if convert is None:
            raise BuildError(f"{rel}: not a .msg or .srv definition")
        convert(Path(package_dir), package, rel_path, Path(out_dir) / rel_path.parent)
        out.append(str(rel_path.with_suffix(".idl")))
    return out


def build_interface_package(package: str, idl_root: Path, idl_files: list[str], deps: tuple[str, ...],
                            stage: Path, work: Path) -> Path:
    """Generate and compile ``package`` from ``idl_root/<idl_files>`` (e.g. ``msg/TFMessage.idl``)
    into ``stage`` (which must not exist), using ``work`` for the generated sources. ``deps``: the
    interface packages its definitions use (their headers and libraries from this Python's prefix)."""
    cc, cxx = compilers()
    try:
        _generate(package, Path(idl_root), idl_files, Path(work) / "gen")
    except ImportError as exc:
        raise BuildError(f"the rosidl generators are missing ({exc})") from exc
    _compile(package, Path(work) / "gen", Path(stage), deps, cc, cxx)
    return Path(stage)


def _generate(package: str, idl_root: Path, idl_files: list[str], gen: Path) -> None:
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    from rosidl_generator_c.cli import GenerateC
    from rosidl_generator_py.cli import GeneratePython
    from rosidl_typesupport_c.cli import GenerateCTypesupport
    from rosidl_typesupport_fastrtps_c.cli import GenerateFastRTPSCTypesupport
    from rosidl_typesupport_introspection_c.cli import GenerateIntrospectionCTypesupport

    files = [f"{idl_root}:{f}" for f in idl_files]
    include = [str(Path(sys.prefix) / "share")]
    gens = [("c", GenerateC("c")),
            ("typesupport_c", GenerateCTypesupport("c", typesupport_implementations=list(TYPESUPPORTS))),
            ("introspection_c", GenerateIntrospectionCTypesupport("introspection_c")),
            ("fastrtps_c", GenerateFastRTPSCTypesupport("fastrtps_c")),
            ("py", GeneratePython("py", typesupport_implementations=["rosidl_typesupport_c", *TYPESUPPORTS]))]
    for name, ext in gens:
        ext.generate(package, files, include, gen / name)


def _run(cmd: list[str], package: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise BuildError(f"building {package} failed: {' '.join(cmd[:4])} ...\n{r.stderr[-2000:]}")


def _sources(folder: Path, pattern: str) -> list[Path]:
    """``pattern`` in every interface kind's folder (msg, srv) under ``folder``."""
    return sorted(p for kind in ("msg", "srv") for p in (folder / kind).glob(pattern))


def _compile(package: str, gen: Path, stage: Path, deps: tuple[str, ...], cc: str, cxx: str) -> None:
    import numpy

    prefix = Path(sys.prefix)
    inc_root = gen / "include"
    for part in ("c", "introspection_c", "fastrtps_c"):       # as installed: include/<package>/msg/...
        shutil.copytree(gen / part, inc_root / package, dirs_exist_ok=True)
    incs = [f"-I{inc_root}", f"-I{prefix / 'include'}"] + [f"-I{d}" for d in sorted((prefix / "include").glob("*")) if d.is_dir()]
    incs += [f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}"]
    lib = stage / "lib"
    lib.mkdir(parents=True)
    link = [f"-L{prefix / 'lib'}", f"-L{lib}", "-Wl,-rpath,$ORIGIN", f"-Wl,-rpath,{prefix / 'lib'}"]
    deps_c = [f"-l{d}__rosidl_generator_c" for d in deps] + ["-lrosidl_runtime_c", "-lrcutils"]
    own = f"-l{package}__rosidl_generator_c"

    def shared(name, sources, compiler, extra_libs, flags=()):
        if not sources:
            raise BuildError(f"building {package}: the generator wrote no sources for {name}")
        _run([compiler, "-shared", "-fPIC", "-O2", *flags, *incs, *map(str, sources), "-o", str(lib / name),
              f"-Wl,-soname,{name}", *link, *extra_libs], package)

    shared(f"lib{package}__rosidl_generator_c.so", _sources(gen / "c", "detail/*.c"), cc,
           deps_c + ["-lrosidl_dynamic_typesupport"], [f"-DROSIDL_GENERATOR_C_BUILDING_DLL_{package}"])
    shared(f"lib{package}__rosidl_typesupport_introspection_c.so",
           _sources(gen / "introspection_c", "detail/*.c"), cc,
           [own, "-lrosidl_typesupport_introspection_c"] + deps_c
           + [f"-l{d}__rosidl_typesupport_introspection_c" for d in deps],
           [f"-DROSIDL_TYPESUPPORT_INTROSPECTION_C_BUILDING_DLL_{package}"])
    shared(f"lib{package}__rosidl_typesupport_fastrtps_c.so", _sources(gen / "fastrtps_c", "detail/*.cpp"), cxx,
           [own, "-lrosidl_typesupport_fastrtps_c", "-lrosidl_typesupport_fastrtps_cpp", "-lfastcdr", "-lrmw"]
           + deps_c + [f"-l{d}__rosidl_typesupport_fastrtps_c" for d in deps],
           ["-std=c++17", f"-DROSIDL_TYPESUPPORT_FASTRTPS_C_BUILDING_DLL_{package}"])
    shared(f"lib{package}__rosidl_typesupport_c.so", _sources(gen / "typesupport_c", "*.cpp"), cxx,
           [own, "-lrosidl_typesupport_c", "-lrcpputils"] + deps_c + [f"-l{d}__rosidl_typesupport_c" for d in deps],
           ["-std=c++17", f"-DROSIDL_TYPESUPPORT_C_BUILDING_DLL_{package}"])
    py = gen / "py"
    shared(f"lib{package}__rosidl_generator_py.so", _sources(py, "_*_s.c"), cc,
           [own, f"-l{package}__rosidl_typesupport_c"]
           + [f"-l{d}__rosidl_generator_py" for d in deps] + deps_c)
    pkg = stage / package
    for kind in ("msg", "srv"):
        if (py / kind).is_dir():
            shutil.copytree(py / kind, pkg / kind, ignore=shutil.ignore_patterns("*.c"))
    (pkg / "__init__.py").write_text("")
    for ts in ("rosidl_typesupport_c", *TYPESUPPORTS):
        ext = f"{package}_s__{ts}"
        _run([cc, "-shared", "-fPIC", "-O2", *incs, str(py / f"_{package}_s.ep.{ts}.c"), "-o", str(pkg / f"{ext}.so"),
              f"-L{prefix / 'lib'}", f"-L{lib}", "-Wl,-rpath,$ORIGIN/../lib", f"-Wl,-rpath,{prefix / 'lib'}",
              f"-l{package}__rosidl_generator_py", f"-l{package}__{ts}", own,
              "-lrosidl_runtime_c", "-lrcutils", "-lrmw"], package)
