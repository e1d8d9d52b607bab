"""Which CPU implementation runs: the compiled one (numba) or the NumPy reference.

The CPU stages exist twice with one interface: the NumPy functions in
:mod:`.pyramid`, :mod:`.detector` and :mod:`.tracker` (the conformance reference, the test
oracle) and their numba-compiled twins in :mod:`.cpu_pyramid`, :mod:`.cpu_fast`,
:mod:`.cpu_nms`, :mod:`.cpu_lk` (the same algorithm, bit-identical detector output, LK within
float rounding). The factories ``make_detector`` / ``make_tracker`` ask :func:`cpu_implementation`
which one to build:

* ``VILIB_ROS_CPU_IMPL=auto`` (default): compiled where numba imports, else NumPy with one
  logged warning that says why;
* ``VILIB_ROS_CPU_IMPL=numba``: compiled, or :class:`CompiledUnavailable` with the reason;
* ``VILIB_ROS_CPU_IMPL=numpy``: the NumPy reference (tests, debugging).

Compiled functions are cached on disk (numba ``cache=True``: ``__pycache__`` beside the
sources, or ``NUMBA_CACHE_DIR``): the first process compiles, later ones load.

Threads: the compiled loops are parallel (``prange`` over rows, cells, features), and
``VILIB_ROS_CPU_THREADS`` (default 1; 0 = every core numba sees) sets how many threads each
detector / tracker uses, per call, whichever thread calls it. One is the default because a
frame is small work (~2 ms at 752x480): on a loaded 2-core machine two threads made the
frontend several times slower (each parallel region waits for a core that the player and the
backend hold), and one thread leaves the other cores to the backend.
"""
from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger("vilib_ros.frontend.cpu")

ENV = "VILIB_ROS_CPU_IMPL"
THREADS_ENV = "VILIB_ROS_CPU_THREADS"
CHOICES = ("auto", "numba", "numpy")


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
        log.warning("compiled CPU path unavailable, using the NumPy reference (about 15x slower): %s; "
                    "pip install numba", why)
    return "numpy"


def cpu_threads() -> int:
    """Threads for the compiled stages: ``$VILIB_ROS_CPU_THREADS`` (default 1; 0 = all cores)."""
    import numba

    raw = (os.environ.get(THREADS_ENV) or "1").strip()
    top = int(numba.config.NUMBA_NUM_THREADS)
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"{THREADS_ENV} must be an integer (0 = all {top} cores), got {raw!r}") from None
    if not 0 <= n <= top:
        raise ValueError(f"{THREADS_ENV} must be in 0..{top} (0 = all cores), got {n}")
    return n or top


def _compiled_or_reference(what: str, build_compiled, build_reference):
    """The compiled object where selected and it builds (its constructor runs every compiled
    function once, so JIT loading happens here and not on the first frame), else the reference."""
    global _warned
    if cpu_implementation() == "numba":
        try:
            return build_compiled()
        except (ImportError, OSError) as exc:  # a numba / llvmlite that imports but cannot compile or load
            if (os.environ.get(ENV) or "").strip().lower() == "numba":
                raise CompiledUnavailable(f"compiled CPU {what} unavailable: {exc}") from exc
            if not _warned:
                _warned = True
                log.warning("compiled CPU %s unavailable, using the NumPy reference (about 15x slower): %s: %s",
                            what, exc.__class__.__name__, exc)
    return build_reference()


def make_cpu_detector(width: int, height: int, config=None):
    """NumbaFastDetector, or CpuFastDetector where the compiled path is off or unavailable."""
    from vilib_ros.frontend.detector import CpuFastDetector

    def compiled():
        from vilib_ros.frontend.cpu_detector import NumbaFastDetector

        return NumbaFastDetector(width, height, config)

    return _compiled_or_reference("detector", compiled, lambda: CpuFastDetector(width, height, config))


def make_cpu_tracker(width: int, height: int, config=None, max_features: int = 1024):
    """NumbaLKTracker, or CpuLKTracker where the compiled path is off or unavailable."""
    from vilib_ros.frontend.tracker import CpuLKTracker

    def compiled():
        from vilib_ros.frontend.cpu_lk import NumbaLKTracker

        return NumbaLKTracker(width, height, config, max_features)

    return _compiled_or_reference("tracker", compiled,
                                  lambda: CpuLKTracker(width, height, config, max_features))


def build_pyramid_host(img, levels: int) -> list:
    """The CPU pipeline's pyramid: the compiled twin of ``build_pyramid_cpu`` (bit-identical,
    ~7x faster) where the compiled path is selected, else ``build_pyramid_cpu`` itself."""
    if cpu_implementation() == "numba":
        try:
            from vilib_ros.frontend.cpu_pyramid import build_pyramid_compiled
        except ImportError:
            pass
        else:
            return build_pyramid_compiled(img, levels)
    from vilib_ros.frontend.pyramid import build_pyramid_cpu

    return build_pyramid_cpu(img, levels)
