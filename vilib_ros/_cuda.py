"""CUDA plumbing shared by every GPU stage.

* :func:`cuda_available` - is there a usable CUDA device through CuPy?
* :func:`resolve_device` - turn the user's ``device`` choice (``auto|cuda|cpu``) into
  ``cuda`` or ``cpu``, falling back to the CPU with a clear log line where CUDA is
  missing or a kernel does not compile.
* :func:`get_module` - load ``vilib_ros/kernels/<name>.cu`` once with
  ``cupy.RawModule`` and cache it per (device, name, compile-time defines), as
  ``cupyx.scipy.ndimage`` does.
* :func:`launch` - launch a kernel and, in checked mode (tests set
  ``VILIB_ROS_CHECK_LAUNCHES=1``), synchronise and raise on any asynchronous error.

No rclpy here; no allocation here.
"""
from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Mapping

log = logging.getLogger("vilib_ros.cuda")

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
DEVICES = ("auto", "cuda", "cpu")


class CudaUnavailable(RuntimeError):
    """Raised when a CUDA path is requested but cannot run here."""


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return False, f"CuPy is not importable ({exc.__class__.__name__}: {exc})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no CUDA device ({exc.__class__.__name__}: {exc})"
    if n < 1:
        return False, "no CUDA device (device count is 0)"
    return True, ""


def cuda_available() -> bool:
    """True where CuPy imports and at least one CUDA device answers."""
    return _probe()[0]


def cuda_unavailable_reason() -> str:
    """Why :func:`cuda_available` is False ('' when it is True)."""
    return _probe()[1]


def device_name() -> str:
    """Name of the current CUDA device, or 'cpu'."""
    if not cuda_available():
        return "cpu"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def resolve_device(device: str) -> str:
    """Map ``auto|cuda|cpu`` to ``cuda`` or ``cpu``.

    ``auto`` picks CUDA when available and logs why not otherwise; ``cuda`` raises
    :class:`CudaUnavailable` with the reason where there is none.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return "cpu"
    ok, why = _probe()
    if ok:
        return "cuda"
    if device == "cuda":
        raise CudaUnavailable(f"device='cuda' requested but {why}")
    log.warning("CUDA not available, using the CPU path: %s", why)
    return "cpu"


def _defines_key(defines: Mapping[str, int | float | str] | None) -> tuple:
    return tuple(sorted((defines or {}).items()))


@functools.lru_cache(maxsize=None)
def _load(device_id: int, name: str, defines: tuple) -> "cupy.RawModule":  # noqa: F821
    import cupy

    path = KERNEL_DIR / f"{name}.cu"
    if not path.is_file():
        raise FileNotFoundError(f"kernel source {path} is missing from the installation")
    options = ["-std=c++17", f"-I{KERNEL_DIR}"]
    options += [f"-D{k}={v}" for k, v in defines]
    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=path.read_text(), options=tuple(options))
        try:
            mod.compile()
        except Exception as exc:
            raise CudaUnavailable(f"kernel {path.name} failed to compile: {exc}") from exc
    return mod


def get_module(name: str, defines: Mapping[str, int | float | str] | None = None):
    """The compiled ``kernels/<name>.cu`` for the current device, cached."""
    import cupy

    return _load(cupy.cuda.Device().id, name, _defines_key(defines))


def checked_launches() -> bool:
    return os.environ.get("VILIB_ROS_CHECK_LAUNCHES", "0") not in ("", "0")


def launch(kernel, grid, block, args, shared_mem: int = 0, stream=None, checked: bool = True) -> None:
    """Launch ``kernel``; CuPy raises on a failed launch. In checked mode
    (``VILIB_ROS_CHECK_LAUNCHES=1``, set by the tests) also synchronise the stream, which
    raises on asynchronous faults; pass ``checked=False`` inside CUDA graph capture."""
    import cupy

    kernel(grid, block, args, shared_mem=shared_mem, stream=stream)
    if checked and checked_launches():
        # CuPy raises CUDADriverError from the synchronisation on any asynchronous fault.
        (stream or cupy.cuda.get_current_stream()).synchronize()
