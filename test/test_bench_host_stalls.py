"""bench.host_stalls: the idle sampler process and the slow frames it explains."""
import os
import signal
import time

from bench.host_stalls import HostStallSampler, stall_overlap


class TestHostStallSampler:
    def test_a_stopped_process_is_a_stall(self, tmp_path):
        # SIGSTOP stands in for a host that does not run the sampler for 0.2 s
        s = HostStallSampler(tmp_path / "stalls.json").start()
        try:
            time.sleep(0.1)
            os.kill(s.proc.pid, signal.SIGSTOP)
            time.sleep(0.2)
            os.kill(s.proc.pid, signal.SIGCONT)
            time.sleep(0.1)
        finally:
            rec = s.stop()
        assert rec["samples"] > 10
        longest = max(late for _, late in rec["stalls"])
        assert longest >= 0.15, rec["stalls"]
        assert s.proc.returncode == 0

    def test_stop_without_start(self, tmp_path):
        assert HostStallSampler(tmp_path / "x.json").stop() == {}


class TestStallOverlap:
    def test_by_hand(self):
        rec = {"stalls": [[10.0, 0.005], [20.0, 0.002]], "span_s": 30.0}
        frames = [(9.999, 10.009),      # 10 ms, the first stall inside: explained
                  (15.0, 15.004),       # 4 ms, no stall
                  (20.003, 20.0035),    # 0.5 ms: not slow
                  (19.990, 19.9995)]    # 9.5 ms, ends before the second stall is due
        h = stall_overlap(rec, frames)
        assert (h["frames_over"], h["frames_over_with_stall"], h["stalls"]) == (3, 1, 2)
        assert h["stall_max_ms"] == 5.0 and h["stall_total_ms"] == 7.0

    def test_no_record(self):
        assert stall_overlap({}, [(0.0, 1.0)]) == {}
