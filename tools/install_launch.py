"""Install ROS 2's ``launch`` and ``launch_ros`` (not on PyPI) into this Python environment.

    python tools/install_launch.py                    # from ../shared/vendor beside the checkout
    python tools/install_launch.py --vendor DIR       # a folder holding launch/, launch_ros/, composition_interfaces/
    python tools/install_launch.py --check            # only say whether they are installed and work

The vendor folder holds the unmodified Jazzy sources (its README says which commits). It is
read-only, so everything is built from a copy in a temporary folder:

* ``launch`` and ``launch_ros`` are pip-installed from their setup.py (``--no-deps``: their
  ROS dependencies come from the ROS wheels), with ``osrf-pycommon`` and, where no ``lark``
  module is importable, ``lark``;
* ``composition_interfaces`` (imported by launch_ros; its services load composable nodes) is
  generated from its ``srv/*.srv`` files with the rosidl generators of the ROS wheels and the
  C compiler (:mod:`vilib_ros.nodes.rosidl_build`), packed as a small setuptools project (the
  Python package, its libraries into ``<prefix>/lib``, its definitions and ament index entry
  into ``<prefix>/share``) and pip-installed, so ``pip uninstall composition_interfaces`` removes it.

Nothing is done where the vendored versions are installed already and work (``--force``
reinstalls). Ends with a check in a fresh interpreter: ``launch.LaunchService`` and
``launch_ros.actions.Node`` import, and a ``composition_interfaces/srv/LoadNode`` request goes
through rclpy's serializer and back unchanged. Exit 0 when installed and working, 1 when the
install or the check failed, 2 for a vendor folder that is not there.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENDOR = REPO.parent / "shared" / "vendor"
PACKAGES = ("launch", "launch_ros", "composition_interfaces")
#: interface packages that composition_interfaces' services use (Parameter; the service event's info)
INTERFACE_DEPS = ("rcl_interfaces", "service_msgs", "builtin_interfaces")

CHECK = """
import sys
from importlib.metadata import version
import launch, launch_ros.actions
from launch import LaunchService
from rclpy.serialization import deserialize_message, serialize_message
from rcl_interfaces.msg import Parameter
from composition_interfaces.srv import LoadNode
req = LoadNode.Request(package_name="vilib_ros", plugin_name="p", node_name="n", remap_rules=["a:=b"],
                       parameters=[Parameter(name="x")])
assert deserialize_message(serialize_message(req), LoadNode.Request) == req, "LoadNode round trip differs"
print(" ".join(f"{p} {version(p)}" for p in ("launch", "launch_ros", "composition_interfaces")))
"""


def say(msg: str) -> None:
    print(f"install_launch: {msg}", flush=True)


def package_version(folder: Path) -> str:
    m = re.search(r"<version>([^<]+)</version>", (folder / "package.xml").read_text())
    if not m:
        raise ValueError(f"{folder / 'package.xml'}: no <version>")
    return m.group(1).strip()


def installed_version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def check() -> tuple[bool, str]:
    """(works, what it printed): the imports and the LoadNode round trip, in a fresh interpreter."""
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip().splitlines()
    return r.returncode == 0, (out[-1] if out else f"exit {r.returncode}")


def pip_install(*targets: str) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *targets], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"pip install {' '.join(targets)} failed:\n{(r.stdout + r.stderr)[-3000:]}")


def build_composition_interfaces(src: Path, tmp: Path) -> Path:
    """A setuptools project in ``tmp / "composition_interfaces"`` holding the built package."""
    from vilib_ros.nodes.rosidl_build import build_interface_package, idl_from_definitions

    name = "composition_interfaces"
    pkg_dir = tmp / f"{name}_src"
    shutil.copytree(src, pkg_dir)
    srvs = sorted(f"srv/{p.name}" for p in (pkg_dir / "srv").glob("*.srv"))
    idl_dir = tmp / "idl"
    idls = idl_from_definitions(name, pkg_dir, srvs, idl_dir)
    project = tmp / name
    build_interface_package(name, idl_dir, idls, INTERFACE_DEPS, project / "stage", tmp / "work")
    share = project / "share"
    (share / "srv").mkdir(parents=True)
    for rel in srvs + idls:
        shutil.copy(pkg_dir / rel if rel.endswith(".srv") else idl_dir / rel, share / rel)
    shutil.copy(pkg_dir / "package.xml", share / "package.xml")
    (project / "resource").mkdir()
    (project / "resource" / name).write_text("")
    libs = sorted(p.name for p in (project / "stage" / "lib").glob("*.so"))
    (project / "setup.py").write_text(f'''"""{name}, generated and compiled from its definitions (tools/install_launch.py)."""
from setuptools import setup

setup(
    name="{name}",
    version="{package_version(pkg_dir)}",
    packages=["{name}", "{name}.srv"],
    package_dir={{"": "stage"}},
    package_data={{"{name}": ["*.so"]}},
    data_files=[
        ("lib", {[f"stage/lib/{n}" for n in libs]!r}),
        ("share/{name}", ["share/package.xml"]),
        ("share/{name}/srv", {[f"share/{r}" for r in srvs + idls]!r}),
        ("share/ament_index/resource_index/packages", ["resource/{name}"]),
    ],
    zip_safe=False,
)
''')
    return project


def install(vendor: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="vilib_ros_launch_") as tmpd:
        tmp = Path(tmpd)
        for p in ("launch", "launch_ros"):
            shutil.copytree(vendor / p, tmp / p)
        extra = ["osrf-pycommon"]
        if importlib.util.find_spec("lark") is None:      # launch's grammar needs one (lark or lark-parser)
            extra.append("lark")
        say("installing launch and launch_ros from " + str(vendor))
        pip_install(str(tmp / "launch"), str(tmp / "launch_ros"), *extra)
        say("building composition_interfaces from its service definitions")
        chatter = io.StringIO()      # the generators print every file they read and write
        try:
            with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
                project = build_composition_interfaces(vendor / "composition_interfaces", tmp)
        except Exception:
            print(chatter.getvalue()[-3000:], file=sys.stderr)
            raise
        pip_install(str(project))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vendor", type=Path, default=DEFAULT_VENDOR, help=f"default: {DEFAULT_VENDOR}")
    ap.add_argument("--force", action="store_true", help="reinstall even where installed and working")
    ap.add_argument("--check", action="store_true", help="only check; exit 1 where not installed or not working")
    args = ap.parse_args(argv)
    if args.check:
        ok, out = check()
        say(("works: " if ok else "not working: ") + out)
        return 0 if ok else 1
    vendor = args.vendor.resolve()
    missing = [p for p in PACKAGES if not (vendor / p / "package.xml").is_file()]
    if missing:
        print(f"install_launch: error: {vendor} holds no {', '.join(missing)} (give the vendor folder with --vendor)",
              file=sys.stderr)
        return 2
    wanted = {p: package_version(vendor / p) for p in PACKAGES}
    if not args.force and all(installed_version(p) == v for p, v in wanted.items()):
        ok, out = check()
        if ok:
            say(f"already installed and working: {out}")
            return 0
        say(f"installed but not working ({out}): reinstalling")
    try:
        install(vendor)
    except (subprocess.CalledProcessError, RuntimeError, OSError, ValueError) as exc:
        print(f"install_launch: error: {exc}", file=sys.stderr)
        return 1
    ok, out = check()
    if not ok:
        print(f"install_launch: error: installed, but the check failed: {out}", file=sys.stderr)
        return 1
    say(f"installed: {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))          # vilib_ros from this checkout where it is not installed
    sys.exit(main())
