"""``python -m bench node``'s latency breakdown (no ROS: the arithmetic on recorded times)."""
from __future__ import annotations

import pytest


class TestLatencyBreakdown:
    """bench.node.latency_breakdown against segments worked out by hand."""

    def test_segments(self):
        from bench.node import latency_breakdown

        # frame a: sent at 10.000 s (publish() returned at 10.0002), received by the node's middleware
        # at 10.001, the executor busy with another callback until 10.003, its callback at 10.0035,
        # published at 10.0085, here at 10.009; frame b: the executor idle (its last callback ended
        # at 10.010), the middleware got it at 10.0205, its callback at 10.0215
        sends = [[1, 10.000, 10.0002], [2, 10.020, 10.0201]]
        frames = {"stamp_ns": [1, 2], "dds_received": [10.001, 10.0205], "previous_callback_end": [10.003, 10.010],
                  "callback": [10.0035, 10.0215], "imu_ready": [10.004, 10.022], "processed": [10.008, 10.025],
                  "published": [10.0085, 10.0255]}
        arrivals = {1: 10.009, 2: 10.026}
        rows: list = []
        w = latency_breakdown(sends, arrivals, frames, rows)
        (ia, la, a), (ib, lb, b) = rows
        assert (ia, ib) == (0, 1) and la == pytest.approx(9.0) and lb == pytest.approx(6.0)
        ref_a = {"publish_call": 0.2, "to_node": 1.0, "busy": 2.0, "wakeup": 0.5, "in_node": 5.0, "to_driver": 0.5}
        ref_b = {"publish_call": 0.1, "to_node": 0.5, "busy": 0.0, "wakeup": 1.0, "in_node": 4.0, "to_driver": 0.5}
        for seg, ref in ((a, ref_a), (b, ref_b)):
            assert seg == pytest.approx(ref, abs=1e-6)
            assert sum(seg.values()) - seg["publish_call"] == pytest.approx(la if seg is a else lb)
        assert w["worst"][0]["index"] == 0 and w["busy"]["max"] == pytest.approx(2.0)

    def test_frames_the_node_did_not_trace_are_left_out(self):
        from bench.node import latency_breakdown

        assert latency_breakdown([[1, 1.0, 1.0]], {1: 1.1}, None) == {}
        frames = {"stamp_ns": [1], "dds_received": [None], "previous_callback_end": [None], "callback": [1.01],
                  "imu_ready": [1.02], "processed": [1.03], "published": [1.04]}
        w = latency_breakdown([[1, 1.0, 1.0], [2, 1.05, 1.05]], {1: 1.1, 2: 1.2}, frames)
        assert len(w["worst"]) == 1 and "to_node" not in w and w["in_node"]["p50"] == pytest.approx(30.0)
