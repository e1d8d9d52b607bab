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
* :class:`Layout` - named fields in one flat byte buffer (host pinned or device), so that
  one copy, or one kernel argument, moves them all: the one home for buffer layouts.
* :func:`pinned_buffer` / :func:`host_device_pointer` - page-locked host memory that kernels
  read and write directly (zero-copy), and the device address of a caller's pinned array.
* :class:`GraphCache` - CUDA graphs captured from a stream, keyed by their variant: the one
  home for graph capture (a failed capture is logged once and the caller launches directly).

No rclpy here. Kernel sources may ``#include "x.cuh"`` from the kernel folder: the header
text is inlined before compilation, so CuPy's source-keyed kernel cache sees header edits.
"""
from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path
from typing import Callable, Hashable, Mapping

import numpy as np

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


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.MULTILINE)


def kernel_source(name: str) -> str:
    """``kernels/<name>.cu`` with its quoted includes (kernel folder, each once) inlined."""
    seen: set[str] = set()

    def expand(path: Path) -> str:
        if not path.is_file():
            raise FileNotFoundError(f"kernel source {path} is missing from the installation")

        def sub(m):
            inc = m.group(1)
            if inc in seen:
                return ""
            seen.add(inc)
            return expand(KERNEL_DIR / inc)

        return _INCLUDE.sub(sub, path.read_text())

    return expand(KERNEL_DIR / f"{name}.cu")


@functools.lru_cache(maxsize=None)
def _load(device_id: int, name: str, defines: tuple, extra: tuple = ()):
    import cupy

    code = kernel_source(name)
    options = ["-std=c++17", f"-I{KERNEL_DIR}", *extra]
    options += [f"-D{k}={v}" for k, v in defines]
    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=code, options=tuple(options))
        try:
            mod.compile()
        except Exception as exc:
            raise CudaUnavailable(f"kernel {name}.cu failed to compile: {exc}") from exc
    return mod


def get_module(name: str, defines: Mapping[str, int | float | str] | None = None, options: tuple[str, ...] = ()):
    """The compiled ``kernels/<name>.cu`` for the current device, cached; ``options``: further
    NVRTC options (e.g. ``-fmad=false`` where results must match the CPU bit for bit)."""
    import cupy

    return _load(cupy.cuda.Device().id, name, _defines_key(defines), tuple(options))


@functools.lru_cache(maxsize=1)
def checked_launches() -> bool:
    """``VILIB_ROS_CHECK_LAUNCHES`` set (read once: the tests set it before the first launch)."""
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


# ------------------------------------------------------------------------------ buffers


class Layout:
    """Named, 16-byte aligned fields in one flat byte buffer (host pinned or device), so that
    one copy moves them all and kernels get one base pointer plus offsets.

    ``fields``: ``(name, dtype, shape)`` triples. :meth:`views` gives a dict of typed views of
    a NumPy or CuPy ``uint8`` buffer of at least :attr:`nbytes` bytes.
    """

    def __init__(self, fields):
        self.spec: dict[str, tuple[int, np.dtype, tuple, int]] = {}
        off = 0
        for name, dt, shape in fields:
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            nb = int(np.dtype(dt).itemsize * int(np.prod(shape)))
            self.spec[name] = (off, np.dtype(dt), shape, nb)
            off += (nb + 15) // 16 * 16
        self.nbytes = max(off, 16)

    def offset(self, name: str) -> int:
        return self.spec[name][0]

    def views(self, buf) -> dict:
        return {n: buf[o:o + nb].view(dt).reshape(shape) for n, (o, dt, shape, nb) in self.spec.items()}


def pinned_buffer(nbytes: int, keep: list, write_combined: bool = False) -> np.ndarray:
    """A zero-filled, page-locked, device-mapped host ``uint8`` buffer; its memory object is
    appended to ``keep`` (the caller holds it as long as the array). Kernels may read and write
    it directly at :func:`host_device_pointer` of the array (zero-copy).

    ``write_combined``: ``cudaHostAllocWriteCombined``, for buffers the host only writes and the
    device reads (the frame staging slots): the host's stores bypass its caches (no lines to
    fetch or to snoop when the device reads the buffer over PCIe); host READS of such a buffer
    are very slow."""
    import cupy

    rt = cupy.cuda.runtime
    flags = rt.hostAllocPortable | rt.hostAllocMapped | (rt.hostAllocWriteCombined if write_combined else 0)
    mem = cupy.cuda.PinnedMemory(int(nbytes), flags)
    keep.append(mem)
    a = np.frombuffer(cupy.cuda.PinnedMemoryPointer(mem, 0), np.uint8, int(nbytes))
    a[:] = 0
    return a


def pinned_frames(count: int, height: int, width: int, keep: list, registry: dict) -> list[np.ndarray]:
    """``count`` page-locked (height, width) uint8 frames, each entered in ``registry`` (host
    address -> device address) so that its owner reads it without a host copy."""
    out = []
    for _ in range(int(count)):
        a = pinned_buffer(int(width) * int(height), keep).reshape(int(height), int(width))
        registry[a.ctypes.data] = host_device_pointer(a.ctypes.data)
        out.append(a)
    return out


def host_device_pointer(ptr: int) -> int:
    """Device address of page-locked host memory at ``ptr``, or 0 where ``ptr`` is pageable
    (or not mapped into the device's address space)."""
    import cupy

    try:
        attr = cupy.cuda.runtime.pointerGetAttributes(int(ptr))
    except Exception:  # pageable memory on some CUDA versions raises instead
        try:
            cupy.cuda.runtime.getLastError()
        except Exception:
            pass
        return 0
    if int(getattr(attr, "type", 0)) != int(getattr(cupy.cuda.runtime, "memoryTypeHost", 1)):
        return 0
    return int(getattr(attr, "devicePointer", 0) or 0)


class GraphCache:
    """CUDA graphs captured from ``stream``, one per variant key.

    :meth:`get` returns the graph for ``key``, capturing ``enqueue()`` (which must only
    enqueue work on ``stream``, with unchecked launches) the first time; ``None`` when graphs
    are off or capture failed (then :attr:`error` says why, logged once, and the caller
    launches the same work directly). :meth:`clear` drops every graph (after a change of
    kernel arguments)."""

    def __init__(self, stream, enabled: bool = True, max_graphs: int = 64, name: str = "frontend"):
        self.stream = stream
        self.enabled = bool(enabled)
        self.max_graphs = int(max_graphs)
        self.name = name
        self.error: str | None = None
        self._graphs: dict = {}

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        self._graphs.clear()

    def get(self, key: Hashable, enqueue: Callable[[], None]):
        g = self._graphs.get(key)
        if g is not None or not self.enabled or self.error is not None:
            return g
        if len(self._graphs) >= self.max_graphs:
            self._graphs.clear()
        import cupy

        s = self.stream
        try:
            s.synchronize()
            s.begin_capture()
            try:
                enqueue()
            finally:
                g = s.end_capture()
        except Exception as exc:  # capture unsupported here: keep the launch path
            self.error = f"{exc.__class__.__name__}: {exc}"
            log.warning("%s: CUDA graph capture failed, launching kernels directly: %s", self.name, self.error)
            try:
                cupy.cuda.runtime.getLastError()
            except Exception:
                pass
            return None
        self._graphs[key] = g
        return g
