"""Do the package's requirements install as wheels on the platforms it is for? Asks the package index.

Targets (``--target``, default both):

* ``jetson``: JetPack 6 (Jetson Orin): Ubuntu 22.04, glibc 2.35, CPython 3.10, aarch64. Checks
  ``install_requires`` and the ``backend`` and ``gpu`` extras. Not the ``ros`` extra: its
  ``ros-jazzy-*`` wheels are built for x86_64 only, and JetPack's system ROS 2 (Humble) provides rclpy
  and the messages there.
* ``desktop``: an x86_64 Linux desktop with glibc 2.35 (Ubuntu 22.04) or newer, CPython 3.10 to 3.13.
  Checks ``install_requires`` and the ``backend``, ``gpu`` and ``ros`` extras.

Neither checks ``test`` (development only) or ``peers`` (a benchmark's separate environment).

The requirements are read from ``setup.py`` (parsed, not imported: ``install_requires`` and
``extras_require`` must be literals there); a requirement's environment marker is evaluated for the
target (pip would evaluate it for the interpreter running it). For each target and Python version:

1. each requirement alone (``--no-deps``): one line, ``ok`` with the wheel the index offers
   (a pure-Python ``py3-none-any`` wheel counts) or ``MISS`` with pip's reason;
2. all of them with their dependencies, resolved together (skip with ``--direct-only``); the desktop's
   ``ros`` extra is left out of that (one of its dependencies is a source archive only).

pip decides, as on the target: ``pip install --dry-run --ignore-installed --only-binary=:all:
--python-version X.Y --implementation cp --platform TAG ...`` with every platform tag the target's glibc
accepts (``manylinux_2_17`` .. ``manylinux_2_35`` and the legacy aliases). A dry run reads the wheels'
metadata (PEP 658) instead of downloading them (``cupy-cuda12x`` alone is ~100 MB). The local pip
configuration is left out (``PIP_CONFIG_FILE=/dev/null``: no local wheel folders, no extra indexes, no
constraints); the index is ``--index-url`` (default: PyPI).

Exit status: 0 every requirement resolves; 1 some do not (listed at the end); 3 the index cannot be
reached (nothing checked).

    python tools/check_platform_wheels.py                    # both targets
    python tools/check_platform_wheels.py --target jetson    # JetPack 6 only
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPI = "https://pypi.org/simple"
UNREACHABLE = 3


@dataclass(frozen=True)
class Target:
    name: str
    description: str
    machine: str                    # platform_machine
    glibc_minor: int                # glibc 2.<minor>
    pythons: tuple                  # "3.10", ...
    extras: tuple                   # the extras checked
    not_checked: dict = field(default_factory=dict)     # extra -> why not
    alone: dict = field(default_factory=dict)           # extra -> why it is left out of the resolution together

    def platforms(self) -> list[str]:
        """Every manylinux tag this glibc accepts (pip does not expand ``manylinux_2_X`` itself)."""
        legacy = ["manylinux2014"] + (["manylinux2010", "manylinux1"] if self.machine == "x86_64" else [])
        first = 17 if self.machine == "aarch64" else 5
        tags = [f"manylinux_2_{m}" for m in range(self.glibc_minor, first - 1, -1)] + legacy
        return [f"{t}_{self.machine}" for t in tags]

    def environment(self, python: str) -> dict:
        """The marker environment of the target (PEP 508)."""
        return {"python_version": python, "python_full_version": python + ".0", "platform_machine": self.machine,
                "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "platform_release": "", "platform_version": "", "implementation_version": python + ".0",
                "extra": ""}


NOT_CHECKED = {"test": "development only", "peers": "a benchmark's separate environment"}
TARGETS = {
    "jetson": Target("jetson", "JetPack 6 (Jetson Orin): Ubuntu 22.04, glibc 2.35, aarch64", "aarch64", 35,
                     ("3.10",), ("backend", "gpu"),
                     {"ros": "its ros-jazzy-* wheels are x86_64 only; JetPack's system ROS 2 (Humble) provides "
                             "rclpy and the messages", **NOT_CHECKED}),
    "desktop": Target("desktop", "x86_64 Linux desktop, glibc 2.35 (Ubuntu 22.04) or newer", "x86_64", 35,
                      ("3.10", "3.11", "3.12", "3.13"), ("backend", "gpu", "ros"), dict(NOT_CHECKED),
                      {"ros": "its rosidl tools need empy, published as a source archive only: pip builds it "
                              "on install, a wheels-only resolution for another platform cannot"}),
}


def read_requirements(setup_py: Path) -> tuple[list[str], dict[str, list[str]]]:
    """``install_requires`` and ``extras_require`` of the ``setup(...)`` call in ``setup_py`` (literals)."""
    tree = ast.parse(setup_py.read_text(), str(setup_py))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "setup":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            try:
                install = ast.literal_eval(kw["install_requires"]) if "install_requires" in kw else []
                extras = ast.literal_eval(kw["extras_require"]) if "extras_require" in kw else {}
            except ValueError as exc:
                raise SystemExit(f"{setup_py}: install_requires / extras_require are not literals ({exc})")
            return list(install), {k: list(v) for k, v in extras.items()}
    raise SystemExit(f"{setup_py}: no setup(...) call")


def requirements_for(target: Target, python: str, install: list[str], extras: dict,
                     only: tuple | None = None) -> list[tuple[str, str]]:
    """[(where, requirement without its marker)] that apply to ``target`` on ``python`` (of the extras
    in ``only``, where given)."""
    out = []
    env = target.environment(python)
    chosen = [e for e in target.extras if only is None or e in only]
    for where, reqs in [("install_requires", install)] + [(f"[{e}]", extras.get(e, [])) for e in chosen]:
        for text in reqs:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            req.marker = None
            out.append((where, str(req)))
    return out


def pip_env() -> dict:
    """This environment without the local pip configuration (see the module docstring); the
    certificate bundle, timeout and proxies stay."""
    keep = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_PROXY", "PIP_TRUSTED_HOST", "PIP_RETRIES"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def pip_resolve(reqs: list[str], target: Target, python: str, index_url: str, deps: bool) -> tuple[bool, object]:
    """(True, {name: wheel file}) where pip resolves ``reqs`` for the target, else (False, pip's reason)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "--only-binary=:all:", "--python-version", python, "--implementation",
               "cp", "--index-url", index_url]
        for p in target.platforms():
            cmd += ["--platform", p]
        if not deps:
            cmd.append("--no-deps")
        r = subprocess.run(cmd + reqs, capture_output=True, text=True, env=pip_env(), timeout=900)
        if r.returncode != 0 or not report.is_file():
            return False, _reason(r.stderr)
        files = {}
        for item in json.loads(report.read_text()).get("install", []):
            name = _canonical(item["metadata"]["name"])
            files[name] = (item["metadata"]["version"], item["download_info"]["url"].rsplit("/", 1)[-1])
        return True, files


def _reason(stderr: str) -> str:
    """pip's own words for a failed resolution, in one line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for key in ("Could not find a version", "No matching distribution", "ResolutionImpossible", "conflict"):
        hit = [ln for ln in lines if key in ln]
        if hit:
            return re.sub(r"^ERROR:\s*", "", hit[0])
    return re.sub(r"^ERROR:\s*", "", lines[-1]) if lines else "pip failed without a message"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def reachable(index_url: str) -> str | None:
    """None where the index answers, else why not."""
    cafile = os.environ.get("PIP_CERT")
    ctx = ssl.create_default_context(cafile=cafile if cafile and os.path.isfile(cafile) else None)
    try:
        with urllib.request.urlopen(index_url.rstrip("/") + "/pip/", timeout=30, context=ctx) as resp:
            resp.read(256)
        return None
    except Exception as exc:  # noqa: BLE001 - URLError, timeouts, TLS errors: all mean "not reachable"
        return f"{type(exc).__name__}: {exc}"


def check(target: Target, install: list[str], extras: dict, index_url: str, direct_only: bool) -> list[str]:
    """Print the target's lines; return its misses."""
    misses = []
    print(f"{target.name}: {target.description}")
    print(f"  checks install_requires and the extras {', '.join(target.extras)}")
    for extra, why in target.not_checked.items():
        if extra in extras:
            print(f"  not checked: [{extra}]: {why}")
    for python in target.pythons:
        tag = f"cp{python.replace('.', '')}"
        reqs = requirements_for(target, python, install, extras)
        print(f"  {tag} {target.machine} (manylinux, glibc <= 2.{target.glibc_minor}):")
        ok, files = pip_resolve([r for _, r in reqs], target, python, index_url, deps=False)
        width = max(len(r) for _, r in reqs)
        for where, req in reqs:
            if ok:
                got = files.get(_canonical(Requirement(req).name))
                found, detail = got is not None, (f"{got[1]}" if got else "not in pip's report")
            else:                                           # one at a time, to name every miss
                found, got = pip_resolve([req], target, python, index_url, deps=False)
                detail = next(iter(got.values()))[1] if found else got
            print(f"    {'ok  ' if found else 'MISS'} {req:<{width}}  {where:<16} {detail}")
            if not found:
                misses.append(f"{target.name} {tag}: {req} ({where}): {detail}")
        if not direct_only:
            together = tuple(e for e in target.extras if e not in target.alone)
            reqs = requirements_for(target, python, install, extras, together)
            ok, got = pip_resolve([r for _, r in reqs], target, python, index_url, deps=True)
            print(f"    {'ok  ' if ok else 'MISS'} with dependencies (install_requires"
                  + "".join(f", [{e}]" for e in together) + "): "
                  + (f"{len(got)} wheels resolve together" if ok else got))
            for extra, why in target.alone.items():
                print(f"    not resolved with dependencies: [{extra}]: {why}")
            if not ok:
                misses.append(f"{target.name} {tag}: with dependencies: {got}")
    return misses


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", action="append", choices=sorted(TARGETS), help="default: all")
    ap.add_argument("--setup", type=Path, default=REPO / "setup.py", help="the setup.py to read (default: this one)")
    ap.add_argument("--index-url", default=PYPI, help=f"the package index (default {PYPI})")
    ap.add_argument("--direct-only", action="store_true", help="skip the resolution with dependencies")
    args = ap.parse_args(argv)
    install, extras = read_requirements(args.setup)
    why = reachable(args.index_url)
    if why is not None:
        print(f"check_platform_wheels: cannot reach {args.index_url} ({why}): nothing checked", file=sys.stderr)
        return UNREACHABLE
    misses = []
    for name in args.target or list(TARGETS):
        misses += check(TARGETS[name], install, extras, args.index_url, args.direct_only)
    if misses:
        print(f"\n{len(misses)} requirement(s) do not resolve:")
        for m in misses:
            print(f"  {m}")
        return 1
    print("\nevery requirement resolves on every target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
