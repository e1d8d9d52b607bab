"""jemalloc for the backend's processes, where the machine has it.

gtsam allocates and frees many small objects per update (factors, Jacobians, Bayes tree cliques),
which jemalloc serves faster than glibc's malloc, with bit-identical estimates. The library must be loaded when the process starts (``LD_PRELOAD``), so the
launchers set it: ``vilib-ros run`` and the launch files for ``backend_node``, the offline runner for
its backend process. Where the library is missing nothing changes (``apt install libjemalloc2``
installs it on Debian, Ubuntu and JetPack).

``VILIB_ROS_JEMALLOC``: ``0`` = never; a path = that library; unset = the distribution's
``libjemalloc.so.2`` where installed.
"""
from __future__ import annotations

import os
from pathlib import Path

#: where Debian / Ubuntu (x86_64, aarch64: Jetson) and source builds put it
CANDIDATES = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
              "/usr/lib64/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2")


def jemalloc_path(env: dict | None = None) -> str | None:
    """The jemalloc library to preload, or None (see the module docstring)."""
    choice = (os.environ if env is None else env).get("VILIB_ROS_JEMALLOC", "").strip()
    if choice.lower() in ("0", "off", "false", "no"):
        return None
    if choice:
        return choice if Path(choice).is_file() else None
    return next((p for p in CANDIDATES if Path(p).is_file()), None)


def with_jemalloc(env: dict) -> dict:
    """``env`` with jemalloc first in ``LD_PRELOAD`` where it is found (kept once). Returns ``env``."""
    lib = jemalloc_path(env)
    if lib:
        pre = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != lib]
        env["LD_PRELOAD"] = " ".join([lib] + pre) if pre else lib
    return env
