"""``python -m bench node`` (bench.node): its latency breakdown against segments worked out by hand
(no ROS), and the benchmark end to end on a tiny configuration (real processes, real DDS).

Not a speed test (speed is what the benchmark reports): the end-to-end run checks that the benchmark
runs, that every frame it sends at backpressure comes back as tracks, and that node_bench.json
carries its summary keys, with device and date.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


@pytest.mark.ros
@pytest.mark.slow
def test_bench_node_small(ros_graph, sequence_path, tmp_path):
    out = tmp_path / "out"
    env = dict(ros_graph.env)
    env["VILIB_ROS_EUROC"] = str(sequence_path)
    # the laboratory from this checkout; run in tmp_path (the replay's generated sequence goes to ./vilib_ros_output)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env["PYTHONPATH"]])
    r = subprocess.run([sys.executable, "-m", "bench", "node", "--device", "cpu", "--rates", "bp,bp4",
                        "--modes", "mono,stereo", "--frames", "12", "--burst", "40", "--out", str(out),
                        "--domain-id", str(ros_graph.domain), "--replay-duration", "2",
                        "--backend-duration", "2"], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads((out / "node_bench.json").read_text())
    for key in ("device", "date", "overhead_p50_ms", "stereo_overhead_p50_ms", "mono_sustained_fps",
                "stereo_sustained_fps", "latency_p99_ms_at_200hz", "replay_fps"):
        assert key in d, key
    assert d["device"] == "cpu"
    c = d["configs"]["mono_bp"]
    assert c["sent"] == c["received"] == c["frames_in"] == 12 and c["dropped"] == 0
    assert c["overhead_p50_ms"] > 0 and c["latency_p50_ms"] > 0 and c["cpu_ms_per_frame"] > 0
    assert d["mono_sustained_fps"] > 0
    # at most 4 frames in flight: still every frame answered, none dropped
    c4 = d["configs"]["mono_bp4"]
    assert c4["sent"] == c4["received"] == c4["frames_in"] == 12 and c4["dropped"] == 0
    assert len(c4["latency_worst"]) == 5 and c4["latency_p99_steady_ms"] is None    # 12 frames: none after 20
    # a stereo pair did not fit Fast DDS's default 512 KB shared-memory segment: repaired ~100 ms
    # later, with the IMU behind it, so nearly every stereo frame waited out imu_wait_s
    s = d["configs"]["stereo_bp"]
    assert s["sent"] == s["received"] == 12 and s["imu_incomplete"] <= 2
    for qos in ("reliable", "best_effort"):
        b = d["burst"][qos]
        assert b["sent"] == 40 and b["received"] + b["dropped"] == 40 and b["rss_end_kb"] > 0
    md = (out / "node_bench.md").read_text()
    assert "| mono_bp | 12 |" in md
    # the replay figure is measured
    rp = d["replay"]
    assert rp["rc"] == 0 and rp["frames"] >= 40 and d["replay_fps"] == pytest.approx(rp["frames"] / rp["replay_s"])
    assert "Replay (`vilib-ros run --duration 2" in md
    # the player alone on the same sequence: every frame and IMU sample it sent reached the subscriber
    pa = rp["player_alone"]
    assert pa["images_sent"] == rp["frames"] == pa["received"]["cam0"] == pa["received"]["cam1"]
    assert pa["received"]["imu"] >= 10 * (rp["frames"] - 1) and pa["player_fps"] > 0
    assert "The player alone on the same sequence" in md
    # the player with backpressure against an instant frontend: it waited for every image's tracks
    # (none timed out) and sent every frame
    pb = rp["player_backpressure"]
    assert pb["backpressure"] and pb["images_sent"] == rp["frames"] == pb["received"]["cam0"]
    assert pb["player_time_s"]["backpressure"] > 0 and pb["backpressure_timeouts"] == 0 and pb["player_fps"] > 0
    assert "The player with backpressure against an instant frontend" in md
    # where each frame's latency went: every frame of the node's trace joined with its send and arrival
    w = d["configs"]["mono_bp"]["where"]
    assert len(w["worst"]) == 5 and w["in_node"]["p50"] > 0 and w["to_node"]["p50"] > 0
    assert d["configs"]["mono_bp"]["publisher"]["busy_ms_per_frame"] > 0
    # the backend node against the offline backend on the same tracks: every frame processed
    be = d["backend_node"]
    assert be["offline"]["frames"] == be["node"]["frames"] == be["node"]["processed"] == 41
    assert be["node_no_covariance"]["processed"] == 41 and be["node"]["odometry"] > 0
    assert d["backend_node_fps"] > 0 and d["backend_offline_fps"] > 0
    assert "| backend_node (defaults) | 41/41 |" in md

    # the host-stall sampler ran beside every configuration (its record there, its table in the md)
    assert d["host_stall_sampler"] is True
    hs = d["configs"]["mono_bp"]["host_stalls"]
    assert hs["sampler_span_s"] > 0 and hs["frames_over"] <= 12 and hs["frames_over_with_stall"] <= hs["frames_over"]
    assert "| config | stalls |" in md
