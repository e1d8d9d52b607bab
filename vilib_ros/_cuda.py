"""CUDA plumbing shared by every GPU stage.

* :func:`cuda_available` - is there a usable CUDA device through CuPy?
* :func:`resolve_device` - turn the user's ``device`` choice (``auto|cuda|cpu``) into
  ``cuda`` or ``cpu``, falling back to the CPU with a clear log line where CUDA is
  missing or a kernel does not compile.
* :func:`get_module` - load ``vilib_ros/kernels/<name>.cu`` (or ``<name>.cu`` of another
  folder, ``kernel_dir``) once with ``cupy.RawModule`` and cache it per (device, name,
  compile-time defines), as ``cupyx.scipy.ndimage`` does.
* :func:`launch` - launch a kernel and, in checked mode (tests set
  ``VILIB_ROS_CHECK_LAUNCHES=1``), synchronise and raise on any asynchronous error.
* :class:`Layout` - named fields in one flat byte buffer (host pinned or device), so that
  one copy, or one kernel argument, moves them all: the one home for buffer layouts.
* :func:`pinned_buffer` / :func:`host_device_pointer` - page-locked host memory that kernels
  read and write directly (zero-copy), and the device address of a caller's pinned array.
* :class:`GraphCache` - CUDA graphs captured from a stream, keyed by their variant: the one
  home for graph capture (a failed capture is logged once and the caller launches directly).

No rclpy here. Kernel sources may ``#include "x.cuh"`` from their own folder or the package's
kernel folder: the header text is inlined before compilation, so CuPy's source-keyed kernel
cache sees header edits.
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
        from vilib_ros.dependencies import INSTALL

        return False, f"CuPy is not importable ({exc.__class__.__name__}: {exc}): {INSTALL['cupy']}"
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

    ``auto`` picks CUDA when available and logs why not otherwise (once per process: a stereo
    run's two trackers and every rebuild said it again); ``cuda`` raises :class:`CudaUnavailable`
    with the reason where there is none.
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
    if not _said_cpu_fallback:
        _said_cpu_fallback.append(why)
        log.warning("CUDA not available, using the CPU path: %s", why)
    return "cpu"


_said_cpu_fallback: list = []       # resolve_device's warning, said once per process


def _defines_key(defines: Mapping[str, int | float | str] | None) -> tuple:
    return tuple(sorted((defines or {}).items()))


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*$', re.MULTILINE)


def kernel_source(name: str, kernel_dir: Path | str | None = None) -> str:
    """``<kernel_dir>/<name>.cu`` (default: the package's ``kernels/``) with its quoted includes
    (from ``kernel_dir``, else the package's kernel folder; each once) inlined."""
    folder = Path(kernel_dir) if kernel_dir is not None else KERNEL_DIR
    seen: set[str] = set()

    def expand(path: Path) -> str:
        if not path.is_file():
            raise FileNotFoundError(f"kernel source {path} is missing from the installation")

        def sub(m):
            inc = m.group(1)
            if inc in seen:
                return ""
            seen.add(inc)
            return expand(folder / inc if (folder / inc).is_file() else KERNEL_DIR / inc)

        return _INCLUDE.sub(sub, path.read_text())

    return expand(folder / f"{name}.cu")


@functools.lru_cache(maxsize=None)
def _load(device_id: int, name: str, defines: tuple, extra: tuple = (), kernel_dir: str | None = None):
    import cupy

    code = kernel_source(name, kernel_dir)
    options = ["-std=c++17", f"-I{KERNEL_DIR}", *extra]
    options += [f"-D{k}={v}" for k, v in defines]
    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=code, options=tuple(options))
        try:
            mod.compile()
        except Exception as exc:
            raise CudaUnavailable(f"kernel {name}.cu failed to compile: {exc}") from exc
    return mod


def get_module(name: str, defines: Mapping[str, int | float | str] | None = None, options: tuple[str, ...] = (),
               kernel_dir: Path | str | None = None):
    """The compiled ``kernels/<name>.cu`` for the current device, cached; ``options``: further
    NVRTC options (e.g. ``-fmad=false`` where results must match the CPU bit for bit);
    ``kernel_dir``: the folder of ``<name>.cu`` where it is not the package's ``kernels/``."""
    import cupy

    folder = None if kernel_dir is None else str(Path(kernel_dir).resolve())
    return _load(cupy.cuda.Device().id, name, _defines_key(defines), tuple(options), folder)


@functools.lru_cache(maxsize=1)
def checked_launches() -> bool:
    """``VILIB_ROS_CHECK_LAUNCHES`` set (read once: the tests set it before the first launch)."""
    return os.environ.get("VILIB_ROS_CHECK_LAUNCHES", "0") not in ("", "0")


def launch(kernel, grid, block, args, shared_mem: int = 0, stream=None, checked: bool = True) -> None:
    """Launch ``kernel``; a failed launch raises. In checked mode (``VILIB_ROS_CHECK_LAUNCHES=1``,
    set by the tests) also synchronise the stream, which raises on asynchronous faults; pass
    ``checked=False`` inside CUDA graph capture. A launch captured into a graph carries the
    programmatic-serialisation attribute where :func:`pdl_enabled` (``kernels/pdl.cuh``); every
    other launch is CuPy's (its marshalling is the cheaper one on the host, per frame)."""
    import cupy

    s = stream if stream is not None else cupy.cuda.get_current_stream()
    if pdl_enabled() and s.is_capturing():
        _launch_pdl(kernel, grid, block, args, shared_mem, s.ptr)
    else:
        kernel(grid, block, args, shared_mem=shared_mem, stream=stream)
    if checked and checked_launches():
        s.synchronize()                     # CuPy raises CUDADriverError here on any asynchronous fault


# ---------------------------------------------------------- programmatic dependent launch
# Hopper's programmatic dependent launch: a kernel launched with this attribute may be scheduled
# while the kernel before it on the stream still runs; kernels/pdl.cuh makes each kernel wait for
# its predecessor's completion before it touches memory, so a graph's chain of small kernels overlaps
# each launch's latency with the kernel before it. CuPy launches have no attributes, so
# such launches go through the driver's cuLaunchKernelEx by ctypes; the arguments are marshalled
# as CuPy marshals them (arrays as device pointers, NumPy scalars as their type, Python int and
# float as int64 and float64). Captured into a graph, the stream edge becomes a programmatic one.

_PDL_ATTRIBUTE = 6                      # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def _cu_types():
    import ctypes

    class Attr(ctypes.Structure):       # CUlaunchAttribute: id, 4 bytes of padding, a 64-byte union
        _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                    ("rest", ctypes.c_char * 60)]

    class Config(ctypes.Structure):     # CUlaunchConfig
        _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                    ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                    ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                    ("attrs", ctypes.POINTER(Attr)), ("numAttrs", ctypes.c_uint)]
    return Attr, Config


@functools.lru_cache(maxsize=1)
def _driver():
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuLaunchKernelEx
    Attr, Config = _cu_types()
    fn.argtypes = [ctypes.POINTER(Config), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn, Attr, Config


@functools.lru_cache(maxsize=None)
def _pdl_device(device_id: int) -> bool:
    import cupy

    try:
        major = cupy.cuda.runtime.getDeviceProperties(device_id)["major"]
        _driver()
    except Exception as exc:
        log.info("programmatic dependent launch off: %s", exc)
        return False
    return int(major) >= 9


def pdl_setting() -> str:
    """``VILIB_ROS_PDL``: '1' (default) uses programmatic dependent launch where the device has it
    (compute capability 9.0 and later), '0' never."""
    return os.environ.get("VILIB_ROS_PDL", "1")


_PDL_FAILED: list[str] = []             # why it was switched off in this process (a refused launch)


class PdlLaunchError(RuntimeError):
    """The driver refused a launch with the programmatic-serialisation attribute."""


def pdl_enabled() -> bool:
    """Launches carry the programmatic-serialisation attribute (see :func:`pdl_setting`), unless a
    launch with it was refused in this process (then :class:`GraphCache` captures again without)."""
    if pdl_setting() in ("", "0") or _PDL_FAILED:
        return False
    import cupy

    return _pdl_device(cupy.cuda.Device().id)


def _pdl_off(reason: str) -> None:
    if not _PDL_FAILED:
        log.warning("programmatic dependent launch switched off for this process: %s", reason)
    _PDL_FAILED.append(reason)


def _arg(a, ctypes):
    import cupy

    if isinstance(a, cupy.ndarray):
        return ctypes.c_uint64(a.data.ptr)
    if isinstance(a, np.generic):
        return (ctypes.c_char * a.itemsize).from_buffer_copy(a.tobytes())
    if isinstance(a, bool):
        return ctypes.c_bool(a)
    if isinstance(a, int):
        return ctypes.c_int64(a)
    if isinstance(a, float):
        return ctypes.c_double(a)
    raise TypeError(f"kernel argument of type {type(a).__name__} cannot be passed")


def _launch_pdl(kernel, grid, block, args, shared_mem: int, stream_ptr: int) -> None:
    import ctypes

    fn, Attr, Config = _driver()
    func = getattr(kernel, "kernel", kernel).ptr  # a RawKernel's Function for the current device
    vals = [_arg(a, ctypes) for a in args]
    ptrs = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    attr = Attr(id=_PDL_ATTRIBUTE, value=1)
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    cfg = Config(g[0], g[1], g[2], b[0], b[1], b[2], int(shared_mem), ctypes.c_void_p(stream_ptr),
                 ctypes.pointer(attr), 1)
    err = fn(ctypes.byref(cfg), ctypes.c_void_p(func), ptrs, None)
    if err != 0:
        name = getattr(kernel, "name", "kernel")
        raise PdlLaunchError(f"cuLaunchKernelEx of {name} with programmatic serialisation failed: CUresult {err}")


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

        try:
            try:
                g = self._capture(enqueue)
            except PdlLaunchError as exc:   # a driver without it under capture: once more without
                try:
                    cupy.cuda.runtime.getLastError()
                except Exception:
                    pass
                _pdl_off(str(exc))
                g = self._capture(enqueue)
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

    def _capture(self, enqueue: Callable[[], None]):
        s = self.stream
        s.synchronize()
        s.begin_capture()
        try:
            enqueue()
        except BaseException:
            try:                            # leave capture mode; the enqueue's error is the one to see
                s.end_capture()
            except Exception:
                pass
            raise
        return s.end_capture()
