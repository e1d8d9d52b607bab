"""What every benchmark writes beside its figures: the machine, its load, the code, and the files.

One place for them (they were repeated in every bench module): :func:`machine` (CPU model, cores,
Python, gtsam, platform), :func:`load` (the load average, to say how shared the machine was),
:func:`code` (which vilib_ros wrote them) and :func:`write_results` (``<stem>.json``, with
``code`` added, and ``<stem>.md`` into the output folder, the Markdown printed).
"""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :func:`platform.processor` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def library_versions() -> str:
    """The libraries whose versions change rendered pixels or tracks: OpenCV draws the generator's images
    (one release moved a grey level on 0.06 % of the pixels, and our tracks with it), NumPy and numba
    compute the CPU frontend. Part of the rendering and track cache keys, and named with the results."""
    import cv2
    import numba
    import numpy

    return f"OpenCV {cv2.__version__}, NumPy {numpy.__version__}, numba {numba.__version__}"


def machine() -> dict:
    """CPU model, logical cores, Python, gtsam (``?`` where not installed), the image and array libraries
    (:func:`library_versions`), platform."""
    try:
        from importlib.metadata import version

        gv = version("gtsam")
    except Exception:  # noqa: BLE001
        gv = "?"
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(), "gtsam": gv,
            "libraries": library_versions(), "platform": platform.platform()}


def revision(root) -> str:
    """The commit of the checkout at ``root`` (``+changes`` where its vilib_ros differs from it);
    '' where ``root`` is no checkout of its own (a copied package, an unpacked commit)."""
    import subprocess

    root = Path(root)
    if not (root / ".git").exists():
        return ""
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        d = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "vilib_ros"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() + ("+changes" if d.stdout.strip() else "") if r.returncode == 0 else ""


def code() -> dict:
    """Which code wrote the figures: the ``vilib_ros`` package's folder and its :func:`revision`.
    An A/B comparison (``python -m bench ab``) checks it per run."""
    import vilib_ros

    pkg = Path(vilib_ros.__file__).resolve().parent
    return {"package": str(pkg), "revision": revision(pkg.parent)}


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the system has none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def _plain(o):
    """JSON for what ``json`` does not know: NumPy scalars and arrays as numbers and lists."""
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def write_results(out, stem: str, res: dict, markdown: str | None = None, echo: bool = True) -> Path:
    """``out/<stem>.json`` (``res``) and, given, ``out/<stem>.md`` (``markdown``, printed unless
    ``echo`` is false); ``out`` is created. Returns the JSON's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(res, dict) and "code" not in res:
        res = {**res, "code": code()}
    path = out / f"{stem}.json"
    path.write_text(json.dumps(res, indent=2, default=_plain))
    if markdown is not None:
        (out / f"{stem}.md").write_text(markdown if markdown.endswith("\n") else markdown + "\n")
        if echo:
            print(markdown)
    return path
