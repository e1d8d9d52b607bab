"""Host stalls seen by an idle process beside a benchmark (``bench-node``).

A frame whose latency is far above its neighbours' can be the node's doing (a slow callback, a
backlog) or the machine's: the whole virtual machine not running for a few milliseconds, a core
waking from a deep idle state. The second kind slows every process at once, so an independent
process that does nothing but sleep sees it too. :class:`HostStallSampler` runs one
(``python -m bench.host_stalls OUT PERIOD THRESHOLD``): it sleeps ``PERIOD`` s in a
loop and records every wake-up later than ``THRESHOLD`` s (``CLOCK_MONOTONIC``, shared by the
processes of one machine). :func:`stall_overlap` then says how many of a run's slow frames had
such a stall inside their send -> tracks interval.

The sampler wakes every 0.5 ms, so its core never idles long: it can hide the deep-idle part of
what it measures (it shows a lower bound of the host's stalls).
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

PERIOD_S = 0.0005
THRESHOLD_S = 0.001


def sampler_main(out: str, period_s: float, threshold_s: float) -> int:
    """Sleep ``period_s`` in a loop until SIGTERM; write the late wake-ups to ``out`` (JSON)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    stalls, n = [], 0
    t_first = time.monotonic()
    Path(out + ".ready").write_text("1")
    while not stop:
        t = time.monotonic()
        time.sleep(period_s)
        late = time.monotonic() - t - period_s
        n += 1
        if late > threshold_s:
            stalls.append([t + period_s, late])     # the wake-up was due at t + period_s
    Path(out).write_text(json.dumps({"period_s": period_s, "threshold_s": threshold_s, "samples": n,
                                     "span_s": time.monotonic() - t_first, "stalls": stalls}))
    return 0


class HostStallSampler:
    """The sampler process around one benchmark configuration: ``start()``, then ``stop()`` gives
    its record (``stalls``: ``[due, late_s]`` pairs; ``{}`` if it failed)."""

    def __init__(self, out: Path, period_s: float = PERIOD_S, threshold_s: float = THRESHOLD_S):
        self.out, self.period_s, self.threshold_s = Path(out), period_s, threshold_s
        self.proc = None

    def start(self, timeout_s: float = 30.0) -> "HostStallSampler":
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.host_stalls", str(self.out),
                                      str(self.period_s), str(self.threshold_s)])
        ready = Path(str(self.out) + ".ready")
        t_end = time.monotonic() + timeout_s
        while not ready.is_file() and self.proc.poll() is None and time.monotonic() < t_end:
            time.sleep(0.01)
        return self

    def stop(self) -> dict:
        if self.proc is None:
            return {}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}


def stall_overlap(record: dict, frames: list, over_ms: float = 3.0) -> dict:
    """Of the frames (``(send_s, arrival_s)`` pairs, CLOCK_MONOTONIC) whose latency is over
    ``over_ms``, how many had a host stall (a late wake-up of the sampler) inside their interval;
    with the sampler's stall count and the longest stall. ``{}`` without a record."""
    if not record or "stalls" not in record:
        return {}
    stalls = record["stalls"]
    slow = [(s, a) for s, a in frames if (a - s) * 1e3 > over_ms]
    hit = sum(1 for s, a in slow if any(due < a and due + late > s for due, late in stalls))
    return {"over_ms": over_ms, "frames_over": len(slow), "frames_over_with_stall": hit,
            "stalls": len(stalls), "stall_max_ms": round(max((late for _, late in stalls), default=0.0) * 1e3, 2),
            "stall_total_ms": round(sum(late for _, late in stalls) * 1e3, 1),
            "sampler_span_s": round(record.get("span_s", 0.0), 2)}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: python -m bench.host_stalls OUT PERIOD_S THRESHOLD_S")
    sys.exit(sampler_main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
