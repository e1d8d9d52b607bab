"""Optional dependencies: import one, or refuse in one line that names the package and the extra installing it.

The extras (``setup.py``): ``backend`` (gtsam, scipy, evo), ``gpu`` (CuPy for CUDA 12), ``ros`` (rclpy and
the message packages from PyPI; a system ROS 2 provides them instead). A command or node that needs one
calls :func:`require` (or :func:`require_backend`, :func:`require_evaluation`) before it starts anything;
:class:`MissingDependency` is a ``ValueError`` as well as an ``ImportError``, so the CLI prints it as
``vilib-ros <cmd>: error: <message>`` and a node as ``<Node>: cannot start: <message>``, both exit 2.
"""
from __future__ import annotations

import importlib
import importlib.util

#: what to run for each optional module (the extra, and the bare requirement for those not using extras)
INSTALL = {
    "gtsam": 'pip install "vilib_ros[backend]" (or gtsam>=4.3a1)',
    "scipy": 'pip install "vilib_ros[backend]" (or scipy>=1.8)',
    "evo": 'pip install "vilib_ros[backend]" (or evo>=1.20)',
    "cupy": 'pip install "vilib_ros[gpu]" (CUDA 12; for another CUDA version its cupy-cudaNNx wheel)',
}


class MissingDependency(ImportError, ValueError):
    """An optional dependency that a command or node needs cannot be imported (see the module docstring)."""


def require(module: str, needed_by: str, load: bool = True):
    """``module`` imported (``load``) or found on the path (not ``load``: cheap, for a process that only
    starts others that import it); :class:`MissingDependency` ``"<needed_by> needs <module>: <install>"``
    where it is absent. A module that is there but fails to import (a broken wheel, a missing shared
    library) is named with the import's own error."""
    install = INSTALL.get(module, f"pip install {module}")
    if not load:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            return None
        raise MissingDependency(f"{needed_by} needs {module}: {install}", name=module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        absent = isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == module
        cause = "" if absent else f" (it is installed but does not import: {type(exc).__name__}: {exc})"
        raise MissingDependency(f"{needed_by} needs {module}: {install}{cause}", name=module) from exc


def require_backend(load: bool = True) -> None:
    """The backend's own dependencies (gtsam, scipy: the ``backend`` extra), as :func:`require`."""
    for module in ("gtsam", "scipy"):
        require(module, "the backend", load)


def require_evaluation(load: bool = True) -> None:
    """evo, which trajectory evaluation (``vilib-ros eval``, a run's ATE) uses (the ``backend`` extra)."""
    require("evo", "trajectory evaluation", load)
