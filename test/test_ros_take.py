"""Taking messages outside the executor (vilib_ros.nodes._common): ``take_pending`` and
``SubscriptionWaiter``, over real rclpy / Fast DDS on localhost.

The frontend node takes its IMU bursts and, while images stream, its next images this way (an
executor turn per message cost 0.1-0.3 ms of Python: the frame budget at 1,000 frames/s), and the
node benchmark's recorder takes the tracks this way. These tests hold what that relies on: every
waiting message comes out, in order, with its middleware receive time; the waiter wakes when a
message comes and times out when none does.
"""
from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.ros]


@pytest.fixture(scope="module")
def client(ros_graph):
    """The module graph's client: publishers and subscriptions in this process alone."""
    return ros_graph.client


def _pub_sub(client, topic):
    from sensor_msgs.msg import Imu

    from vilib_ros.nodes._common import reliable_qos

    node = client.node
    pub = node.create_publisher(Imu, topic, reliable_qos(100))
    sub = node.create_subscription(Imu, topic, lambda m: None, reliable_qos(100), raw=True)
    assert client.spin_until(lambda: node.count_subscribers(topic) >= 1 and node.count_publishers(topic) >= 1, 30)
    return pub, sub


def _imu(k):
    from vilib_ros.nodes.cdr import encode_imu

    return encode_imu(1_000_000_000 + k * 5_000_000, "imu0", (0.1 * k, 0.0, 0.0), (0.0, 0.0, 9.8))


class TestTakePending:
    def test_burst_in_order_with_receive_time(self, client):
        from vilib_ros.nodes._common import SubscriptionWaiter, received_monotonic, take_pending
        from vilib_ros.nodes.cdr import decode_imu

        pub, sub = _pub_sub(client, "take_burst")
        t_before = time.monotonic()
        for k in range(25):
            pub.publish(_imu(k))
        waiter = SubscriptionWaiter(client.node, [sub])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 25 and time.monotonic() < deadline:
            waiter.wait(0.5)
            got += list(take_pending(sub, 10, with_info=True))     # at most 10 per call
        assert [decode_imu(m)[0] for m, _ in got] == [decode_imu(_imu(k))[0] for k in range(25)]
        rx = [received_monotonic(info) for _, info in got]
        assert all(r is not None for r in rx)
        assert t_before - 0.01 <= rx[0] <= rx[-1] <= time.monotonic() + 0.01
        assert list(take_pending(sub)) == []                       # nothing left
        client.node.destroy_subscription(sub)
        client.node.destroy_publisher(pub)


class TestSubscriptionWaiter:
    def test_times_out_without_a_message(self, client):
        from vilib_ros.nodes._common import SubscriptionWaiter

        pub, sub = _pub_sub(client, "take_quiet")
        waiter = SubscriptionWaiter(client.node, [sub])
        assert waiter.native        # rclpy's wait set is there (else it polls: the node still works, slower)
        t0 = time.monotonic()
        assert waiter.wait(0.2) is False
        assert 0.15 <= time.monotonic() - t0 < 5.0
        assert waiter.wait(0.0) is False
        client.node.destroy_subscription(sub)
        client.node.destroy_publisher(pub)

    def test_wakes_when_a_message_comes(self, client):
        from vilib_ros.nodes._common import SubscriptionWaiter, take_pending

        pub, sub = _pub_sub(client, "take_wake")
        waiter = SubscriptionWaiter(client.node, [sub])
        timer = threading.Timer(0.3, lambda: pub.publish(_imu(7)))
        timer.start()
        t0 = time.monotonic()
        try:
            assert waiter.wait(30.0) is True
        finally:
            timer.join()
        assert time.monotonic() - t0 < 20.0          # woken by the message, not the timeout
        assert len(list(take_pending(sub))) == 1
        client.node.destroy_subscription(sub)
        client.node.destroy_publisher(pub)


class TestReceivedMonotonic:
    def test_system_stamp_on_the_monotonic_line(self):
        """A system-clock stamp taken between two monotonic readings converts to a time between them."""
        from vilib_ros.nodes._common import received_monotonic

        for _ in range(200):
            m0 = time.monotonic()
            ns = time.time_ns()
            m1 = time.monotonic()
            t = received_monotonic({"received_timestamp": ns})
            assert m0 - 2e-4 <= t <= m1 + 2e-4     # the kept offset may be 0.25 s old (clock slew)

    def test_offset_from_the_tightest_reading(self):
        """The offset is the tightest bracketed reading, kept for a quarter second: two calls agree
        exactly (guards: ``time.time() - time.monotonic()`` read in one go at every call, where a
        preemption between the two reads moves a middleware receive time past the callback that
        took the message)."""
        from vilib_ros.nodes._common import system_minus_monotonic

        a = system_minus_monotonic(max_age_s=0.0)          # measured now
        b = system_minus_monotonic()                       # the kept one
        assert a == b
        assert abs(a - (time.time() - time.monotonic())) < 0.05

    def test_tightest_bracket_chosen_and_kept_for_its_age(self, monkeypatch):
        """On scripted clocks: of 8 bracketed readings the one with the narrowest monotonic bracket gives
        the offset (the others are off by up to 70 ms, as a preemption between the reads makes them),
        it is kept while younger than ``max_age_s`` and measured again after. The test above holds for
        the one-call ``time.time() - time.monotonic()`` too; this one does not."""
        import types

        from vilib_ros.nodes import _common

        def readings(t0, tight_at):
            mono, wall = [t0], []                          # the age check's reading, then 8 brackets
            for k in range(8):
                m0 = t0 + 0.1 * (k + 1)
                width = 1e-6 if k == tight_at else 1e-3 * (k + 2)
                mono += [m0, m0 + width]
                wall.append(5000.0 + m0 + 0.5 * width + (0.0 if k == tight_at else 0.01 * (k + 1)))
            return mono, wall

        clock = {"mono": [], "wall": []}
        fake = types.SimpleNamespace(monotonic=lambda: clock["mono"].pop(0), time=lambda: clock["wall"].pop(0))
        monkeypatch.setattr(_common, "time", fake)
        monkeypatch.setattr(_common, "_CLOCK_OFFSET", [float("-inf"), 0.0])
        clock["mono"], clock["wall"] = readings(100.0, tight_at=5)
        assert _common.system_minus_monotonic(max_age_s=0.25) == pytest.approx(5000.0, abs=1e-9)
        assert clock["mono"] == [] and clock["wall"] == []
        clock["mono"] = [100.2]                            # 0.2 s later: the kept value, nothing read
        assert _common.system_minus_monotonic(max_age_s=0.25) == pytest.approx(5000.0, abs=1e-9)
        clock["mono"], clock["wall"] = readings(100.3, tight_at=2)
        clock["wall"] = [w + 1.0 for w in clock["wall"]]   # the system clock stepped by 1 s meanwhile
        assert _common.system_minus_monotonic(max_age_s=0.25) == pytest.approx(5001.0, abs=1e-9)
