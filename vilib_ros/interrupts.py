"""Stop signals that are never lost: Ctrl-C (SIGINT), SIGTERM and the other signals a program hands
to :func:`install_stop_handlers` end the main thread's work with an exception, wherever Python
happens to run the handler.

Python runs a signal's handler in the main thread, between two bytecodes of whatever Python code
runs there at that moment: a garbage-collector callback (``gc.callbacks``), a ``__del__`` finaliser
or a weakref callback included. An exception that leaves one of those does not propagate: Python
hands it to ``sys.unraisablehook`` ("Exception ignored in ...") and goes on, and the
``KeyboardInterrupt`` the handler raised there is gone with it. Three layers keep the stop:

1. The handlers installed here record the request (:func:`stop_requested`) before they raise.
2. A ``sys.unraisablehook`` (chained to the one installed before it) that is handed a swallowed
   ``KeyboardInterrupt`` (or :class:`Terminated`) has it raised again in the main thread: a helper
   thread sends the main thread SIGINT once the hook has returned (raised from the hook itself, it
   would be raised inside the hook, where Python swallows it as well). A re-delivery that lands in a
   finaliser again is handed to the hook again and re-delivered again; the main thread runs on between
   two attempts (each waits longer, up to :data:`REDELIVERY_MAX_DELAY_S`), so it is raised in ordinary
   code in the end, and a blocking call in the main thread is woken by the signal. Re-delivery stops
   once the stop is settled (:func:`settle_stop`: the exception reached the code that handles it) or
   SIGINT's handler is no longer this module's (a program that closes ignores further SIGINTs).
3. Code with long phases calls :func:`raise_if_stop_requested` at their boundaries: a stop that a
   library caught (``except BaseException``) instead of Python swallowing it still ends them.

A re-delivery raises the kind of the first stop: :class:`Terminated` after SIGTERM (or another
termination signal), ``KeyboardInterrupt`` after SIGINT.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: longest wait of the helper thread before it re-delivers a swallowed stop, s
REDELIVERY_MAX_DELAY_S = 0.05


class Terminated(KeyboardInterrupt):
    """SIGTERM (or another termination signal), raised in the main thread the way Ctrl-C raises
    ``KeyboardInterrupt``."""


class _State:
    signum: int | None = None       # the first stop signal received
    settled = False                 # the last stop reached the code that handles it: no re-delivery
    redelivering = False            # the next SIGINT handler call is a re-delivery
    redeliveries = 0                # stops swallowed and re-delivered so far
    pipe: tuple[int, int] | None = None
    previous_hook = None
    lock = threading.Lock()


_S = _State()


def _exception(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(f"signal {signum}")


def _on_stop_signal(signum, frame) -> None:
    if _S.redelivering:
        _S.redelivering = False
        if _S.settled:
            return                  # handled meanwhile: nothing left to deliver
        raise _exception(_S.signum if _S.signum is not None else signum)
    if _S.signum is None:
        _S.signum = signum
    _S.settled = False
    raise _exception(signum)


def install_stop_handlers(signals=(signal.SIGINT, signal.SIGTERM)) -> bool:
    """Raise ``KeyboardInterrupt`` on SIGINT and :class:`Terminated` on the other ``signals`` in the
    main thread, record each request first, and re-deliver one that a finaliser or callback swallowed
    (see the module's description). SIGINT is handled even where it was ignored at start-up (a shell
    starts background jobs so). Only from the main thread (Python runs handlers there alone): False
    elsewhere, with nothing installed."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for s in signals:
        signal.signal(s, _on_stop_signal)
    with _S.lock:
        if _S.pipe is None:
            r, w = os.pipe()
            os.set_blocking(w, False)
            _S.pipe = (r, w)
            threading.Thread(target=_redeliver_loop, args=(r,), name="vilib_ros-stop-redelivery",
                             daemon=True).start()
            _S.previous_hook = sys.unraisablehook
            sys.unraisablehook = _unraisable
    return True


def stop_requested() -> int | None:
    """The number of the first stop signal received where a stop is not settled yet, else None."""
    return _S.signum if _S.signum is not None and not _S.settled else None


def raise_if_stop_requested() -> None:
    """Raise the stop (``KeyboardInterrupt`` / :class:`Terminated`) where one was requested and its
    exception has not reached the code that handles it: it was swallowed in a finaliser or caught by
    a library. The stop is settled by this."""
    signum = stop_requested()
    if signum is not None:
        _S.settled = True
        raise _exception(signum)


def settle_stop() -> None:
    """The stop reached the code that handles it: no re-delivery from now on (a later signal is a
    new request)."""
    _S.settled = True


def redeliveries() -> int:
    """How many swallowed stops were re-delivered so far (for diagnostics and tests)."""
    return _S.redeliveries


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook``: a swallowed stop is re-delivered; anything else goes to the hook
    installed before."""
    try:
        exc_type = unraisable.exc_type
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            if _S.signum is None:       # raised by a handler other than this module's
                _S.signum = signal.SIGTERM if issubclass(exc_type, Terminated) else signal.SIGINT
            _S.settled = False
            _wake()
            return
    except BaseException:  # noqa: BLE001 - a stop that landed in this hook: recorded by the handler
        _S.settled = False
        _wake()
        return
    (_S.previous_hook or sys.__unraisablehook__)(unraisable)


def _wake() -> None:
    """Wake the helper thread (a byte into its pipe: no lock, never blocks)."""
    try:
        os.write(_S.pipe[1], b"!")
    except (OSError, TypeError):   # full (a wake-up is pending already) or not installed
        pass


def _redeliver_loop(r_fd: int) -> None:
    """The helper thread: once woken by the hook, SIGINT to the main thread (after a short wait that
    lets it leave the finaliser; longer while re-deliveries follow each other)."""
    attempt, last = 0, 0.0
    main_ident = threading.main_thread().ident
    while True:
        try:
            if not os.read(r_fd, 64):
                return
        except OSError:
            return
        now = time.monotonic()
        attempt = attempt + 1 if now - last < 1.0 else 0
        last = now
        time.sleep(min(0.005 * (1 << min(attempt, 8)), REDELIVERY_MAX_DELAY_S))
        if _S.settled or _S.signum is None or signal.getsignal(signal.SIGINT) is not _on_stop_signal:
            continue
        _S.redelivering = True
        _S.redeliveries += 1
        try:
            signal.pthread_kill(main_ident, signal.SIGINT)
        except (OSError, ValueError):   # the main thread has ended
            return
