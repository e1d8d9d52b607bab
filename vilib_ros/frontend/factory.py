"""Which implementation runs: the one module that imports the frontend's three twins and picks one.

Every stage exists three times with one interface: on the GPU (:mod:`vilib_ros.frontend.gpu`,
CuPy and ``vilib_ros/kernels``), compiled for the CPU (:mod:`vilib_ros.frontend.compiled`,
numba) and as the NumPy reference (:mod:`vilib_ros.frontend.reference`: the definitions, the
test oracle). The twins never import this module; the shared pieces they build on
(:mod:`~vilib_ros.frontend.config`, :mod:`~vilib_ros.frontend.fast_lut`,
:mod:`~vilib_ros.frontend.ransac`, :mod:`~vilib_ros.frontend.track_table`, ...) import no twin.

The device (``device`` of :func:`make_detector`, :func:`make_tracker`, :func:`make_pipeline`):
``auto`` is the GPU where CUDA works, else the CPU with a logged reason (no CUDA, or kernels
that fail to compile); ``cuda`` raises :class:`vilib_ros._cuda.CudaUnavailable` instead.

The CPU implementation, ``VILIB_ROS_CPU_IMPL`` (:func:`cpu_implementation`):

* ``auto`` (default): compiled where numba imports, else NumPy with one logged warning that
  says why;
* ``numba``: compiled, or :class:`CompiledUnavailable` with the reason;
* ``numpy``: the NumPy reference (tests, debugging).

The compiled modules are imported where they are chosen (numba is an optional dependency);
their threads: :mod:`vilib_ros.frontend.compiled.threads`.
"""
from __future__ import annotations

import functools
import logging
import os

from vilib_ros._cuda import CudaUnavailable, resolve_device
from vilib_ros.frontend.config import DetectorConfig, TrackerConfig, check_geometry
from vilib_ros.frontend.cpu_pipeline import CpuPipeline
from vilib_ros.frontend.gpu.detector import GpuFastDetector
from vilib_ros.frontend.gpu.pipeline import RESULT_SLOTS, GpuPipeline
from vilib_ros.frontend.gpu.tracker import GpuLKTracker
from vilib_ros.frontend.reference.detector import CpuFastDetector
from vilib_ros.frontend.reference.pyramid import build_pyramid_cpu
from vilib_ros.frontend.reference.ransac import ransac_reference
from vilib_ros.frontend.reference.tracker import CpuLKTracker

log = logging.getLogger("vilib_ros.frontend.factory")
cpu_log = logging.getLogger("vilib_ros.frontend.cpu")      # the CPU implementation's choice

ENV = "VILIB_ROS_CPU_IMPL"
CHOICES = ("auto", "numba", "numpy")
__all__ = ["RESULT_SLOTS", "CompiledUnavailable", "build_pyramid_host", "cpu_implementation", "make_detector",
           "make_pipeline", "make_tracker", "ransac_outliers"]


class CompiledUnavailable(RuntimeError):
    """Raised when the compiled CPU path is requested but numba cannot be imported."""


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    try:
        import numba  # noqa: F401
    except Exception as exc:  # ImportError, or a broken llvmlite raising at import
        return False, f"numba is not importable ({exc.__class__.__name__}: {exc})"
    return True, ""


def compiled_available() -> bool:
    """True where numba imports."""
    return _probe()[0]


_warned = False


def cache_location() -> str:
    """Where numba keeps the compiled functions: ``$NUMBA_CACHE_DIR``, else the ``__pycache__``
    folders of the installed package (numba falls back to a per-user folder where those are not
    writable)."""
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return env
    from pathlib import Path

    return str(Path(__file__).resolve().parents[1] / "**" / "__pycache__")


def cpu_implementation(choice: str | None = None) -> str:
    """``'numba'`` or ``'numpy'`` for the CPU stages (``choice`` default: ``$VILIB_ROS_CPU_IMPL``).

    Falls back from ``auto`` to ``numpy`` with one logged warning per process.
    """
    global _warned
    choice = (choice or os.environ.get(ENV) or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"{ENV} must be one of {CHOICES}, got {choice!r}")
    if choice == "numpy":
        return "numpy"
    ok, why = _probe()
    if ok:
        return "numba"
    if choice == "numba":
        raise CompiledUnavailable(f"{ENV}=numba requested but {why}; pip install numba")
    if not _warned:
        _warned = True
        cpu_log.warning("compiled CPU path unavailable, using the NumPy reference (much slower): %s; "
                        "pip install numba", why)
    return "numpy"


def _compiled_or_reference(what: str, impl: str, build_compiled, build_reference):
    """The compiled object where ``impl`` (:func:`cpu_implementation`) is ``'numba'`` and it builds
    (its constructor runs every compiled function once, so JIT loading happens here and not on
    the first frame), else the reference."""
    global _warned
    if impl == "numba":
        try:
            return build_compiled()
        except (ImportError, OSError) as exc:  # a numba / llvmlite that imports but cannot compile or load
            if (os.environ.get(ENV) or "").strip().lower() == "numba":
                raise CompiledUnavailable(f"compiled CPU {what} unavailable: {exc}") from exc
            if not _warned:
                _warned = True
                cpu_log.warning("compiled CPU %s unavailable, using the NumPy reference (much slower): %s: %s",
                                what, exc.__class__.__name__, exc)
    return build_reference()


def _cpu_detector(width: int, height: int, config: DetectorConfig, impl: str):
    """NumbaFastDetector, or CpuFastDetector where the compiled path is off or unavailable."""
    def compiled():
        from vilib_ros.frontend.compiled.detector import NumbaFastDetector

        return NumbaFastDetector(width, height, config)

    return _compiled_or_reference("detector", impl, compiled, lambda: CpuFastDetector(width, height, config))


def _cpu_tracker(width: int, height: int, config: TrackerConfig, max_features: int, impl: str):
    """NumbaLKTracker, or CpuLKTracker where the compiled path is off or unavailable."""
    def compiled():
        from vilib_ros.frontend.compiled.tracker import NumbaLKTracker

        return NumbaLKTracker(width, height, config, max_features)

    return _compiled_or_reference("tracker", impl, compiled, lambda: CpuLKTracker(width, height, config, max_features))


def pyramid_builder(impl: str | None = None):
    """The CPU pipeline's pyramid function: the compiled twin of ``build_pyramid_cpu``
    (bit-identical) where the compiled path is selected (``impl``, default
    :func:`cpu_implementation`), else ``build_pyramid_cpu`` itself."""
    if (impl or cpu_implementation()) == "numba":
        try:
            from vilib_ros.frontend.compiled.pyramid import build_pyramid_compiled
        except ImportError:
            pass
        else:
            return build_pyramid_compiled
    return build_pyramid_cpu


def build_pyramid_host(img, levels: int) -> list:
    """One pyramid with :func:`pyramid_builder`'s choice."""
    return pyramid_builder()(img, levels)


def ransac_solver(impl: str | None = None):
    """The CPU pipeline's fundamental-matrix RANSAC (:mod:`vilib_ros.frontend.ransac`): the
    compiled one where numba is selected (``impl``, default :func:`cpu_implementation`), else the
    NumPy reference; called as ``(xy_old, xy_new, threshold, confidence)``, it returns (outlier
    mask or None, best hypothesis, its inliers)."""
    if (impl or cpu_implementation()) == "numba":
        from vilib_ros.frontend.compiled.ransac import ransac_numba

        return ransac_numba
    return ransac_reference


def ransac_outliers(xy_old, xy_new, threshold: float, confidence: float):
    """Outliers of :func:`ransac_solver`'s RANSAC on undistorted normalised points, as a bool
    mask over the rows; None where it cannot run (fewer than 8 finite points, no model)."""
    return ransac_solver()(xy_old, xy_new, threshold, confidence)[0]


def make_detector(width: int, height: int, config: DetectorConfig | None = None, device: str = "auto"):
    """:class:`~vilib_ros.frontend.gpu.detector.GpuFastDetector` where CUDA works, else the CPU
    detector (compiled, or the NumPy :class:`~vilib_ros.frontend.reference.detector.CpuFastDetector`).
    ``config`` is validated here, and checked against the image size, before any device is touched
    (ValueError: it reads the same with and without CUDA)."""
    config = (config or DetectorConfig()).validate()
    check_geometry(width, height, config)
    dev = resolve_device(device)
    if dev == "cpu":
        return _cpu_detector(width, height, config, cpu_implementation())
    try:
        return GpuFastDetector(width, height, config)
    except CudaUnavailable as exc:
        if device == "cuda":
            raise
        log.warning("GPU detector unavailable, using the CPU path: %s", exc)
        return _cpu_detector(width, height, config, cpu_implementation())


def make_tracker(width: int, height: int, config: TrackerConfig | None = None, device: str = "auto",
                 max_features: int = 1024):
    """:class:`~vilib_ros.frontend.gpu.tracker.GpuLKTracker` where CUDA works, else the CPU tracker
    (compiled, or the NumPy :class:`~vilib_ros.frontend.reference.tracker.CpuLKTracker`).
    ``config`` is validated here (ValueError)."""
    config = (config or TrackerConfig()).validate()
    dev = resolve_device(device)
    if dev == "cuda":
        try:
            return GpuLKTracker(width, height, config, max_features)
        except CudaUnavailable:
            if device == "cuda":
                raise
            log.warning("LK kernel unavailable, using the CPU tracker", exc_info=True)
    return _cpu_tracker(width, height, config, max_features, cpu_implementation())


def make_pipeline(device: str, camera, config, capacity: int, levels: int, first_id: int = 0, camera_right=None,
                  T_right_left=None):
    """The frame pipeline of a :class:`~vilib_ros.frontend.FeatureTracker` on ``device``
    (``'cuda'``: :class:`~vilib_ros.frontend.gpu.pipeline.GpuPipeline`, or
    :class:`vilib_ros._cuda.CudaUnavailable`; ``'cpu'``:
    :class:`~vilib_ros.frontend.cpu_pipeline.CpuPipeline` with the CPU implementation's
    detector, tracker, pyramid and RANSAC), for ``capacity`` tracks on ``levels`` pyramid levels.
    ``config``: a validated :class:`~vilib_ros.frontend.config.FrontendConfig`."""
    w, h = int(camera.width), int(camera.height)
    kw = dict(camera=camera, config=config, capacity=capacity, levels=levels, first_id=first_id,
              camera_right=camera_right, T_right_left=T_right_left)
    if device == "cuda":
        detector = GpuFastDetector(w, h, config.detector)
        tracker = GpuLKTracker(w, h, config.tracker, capacity)
        return GpuPipeline(detector=detector, tracker=tracker, **kw)
    if device != "cpu":
        raise ValueError(f"a pipeline's device is 'cuda' or 'cpu', got {device!r}")
    impl = cpu_implementation()             # VILIB_ROS_CPU_IMPL, read once for the whole pipeline
    detector = _cpu_detector(w, h, config.detector, impl)
    tracker = _cpu_tracker(w, h, config.tracker, capacity, impl)
    return CpuPipeline(detector=detector, tracker=tracker, pyramid=pyramid_builder(impl), ransac=ransac_solver(impl),
                       **kw)
