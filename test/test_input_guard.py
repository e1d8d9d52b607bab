"""Input checks of the nodes (vilib_ros.nodes.input_guard), no ROS graph.

References are written out by hand: which stamps are resets, which samples are gaps, what
the log may hold.
"""
from __future__ import annotations

import numpy as np
import pytest

from vilib_ros.nodes.input_guard import IN_ORDER, OUT_OF_ORDER, RESET, ImuQueue, SkipLog, TimeJump, imu_reached, truncate

S = 1_000_000_000


class TestSkipLog:
    def test_counts_and_warns_once_per_key(self):
        log = []
        sl = SkipLog(("a", "b"), log.append)
        for _ in range(3):
            sl.skip("a", "image", "first")
        sl.skip("b", "image", "second")
        sl.skip("a", "imu", "third")
        assert sl.counts == {"a": 4, "b": 1}
        assert len(log) == 3 and "counted as 'a'" in log[0]

    def test_undeclared_reason_is_an_error(self):
        with pytest.raises(KeyError):
            SkipLog(("a",), print).count("nope")

    def test_hostile_details_bounded(self):
        """Distinct hostile encoding strings give at most max_keys warnings, each truncated, and the
        key set stays bounded (guards: a log and a node growing with every new string)."""
        log = []
        sl = SkipLog(("unsupported_encoding",), log.append, max_keys=32)
        for i in range(300):
            enc = f"{i:05d}" + "x" * 100_000
            sl.skip("unsupported_encoding", "image", f"unsupported image encoding {enc!r}", key_detail=enc)
        assert sl.counts["unsupported_encoding"] == 300
        assert len(log) == 33                                # 32 kinds + one "suppressed" line
        assert sum(len(x) for x in log) < 33 * 700
        assert len(sl._warned) == 32
        assert all(len(k[2]) < 200 for k in sl._warned)

    def test_truncate(self):
        assert truncate("abc", 10) == "abc"
        t = truncate("y" * 1000, 10)
        assert t.startswith("y" * 10) and "990 more characters" in t


class TestTimeJump:
    @pytest.mark.parametrize("t,kind", [(S + 1, IN_ORDER), (S, OUT_OF_ORDER), (S - S // 2, OUT_OF_ORDER),
                                        (S - 2 * S, RESET), (S + 2 * S, RESET), (S + S, IN_ORDER)])
    def test_classes(self, t, kind):
        j = TimeJump(S)
        j.accept(S)
        assert j.check(t) == kind

    def test_first_stamp_in_order(self):
        assert TimeJump(S).check(-5) == IN_ORDER


class TestImuQueue:
    def _feed(self, q, stamps, g=(0.01, 0.02, 0.03), a=(0.0, 0.0, 9.8)):
        return [q.add(int(t), g, a) for t in stamps]

    def test_range_non_finite_order(self):
        """Guards: absurd but finite gyro values (1e30) used by the prediction."""
        q = ImuQueue(gyro_range=35.0, accel_range=160.0)
        assert self._feed(q, [S]) == [""]
        assert q.add(S + 5_000_000, (1e30, 0, 0), (0, 0, 9.8)) == "imu_out_of_range"
        assert q.add(S + 5_000_000, (0, 0, 0), (0, 200.0, 9.8)) == "imu_out_of_range"
        assert q.add(S + 5_000_000, (np.nan, 0, 0), (0, 0, 9.8)) == "imu_non_finite"
        assert q.add(S - 5_000_000, (0, 0, 0), (0, 0, 9.8)) == "imu_out_of_order"
        rows = q.gyro_between(0, 2 * S)
        assert rows.shape == (1, 4) and rows[0, 0] == S

    def test_gaps_counted(self):
        """Guards: holes in the IMU stream counted nowhere."""
        q = ImuQueue()
        stamps = list(S + np.arange(20) * 5_000_000)
        stamps += list(stamps[-1] + 100_000_000 + np.arange(20) * 5_000_000)   # a 100 ms hole
        assert all(r == "" for r in self._feed(q, stamps))
        assert q.gaps == 1 and q.gap_samples == 19

    def test_time_reset_empties(self):
        q = ImuQueue(jump_threshold_ns=S)
        self._feed(q, S * 100 + np.arange(10) * 5_000_000)
        self._feed(q, S + np.arange(10) * 5_000_000)          # a replay started again
        assert q.resets == 1
        rows = q.gyro_between(0, 10 * S)
        assert rows.shape == (10, 4) and rows[0, 0] == S

    def test_gyro_between_bounds(self):
        q = ImuQueue()
        stamps = S + np.arange(100) * 5_000_000
        for k, t in enumerate(stamps):
            q.add(int(t), (k, 0, 0), (0, 0, 9.8))
        rows = q.gyro_between(int(stamps[10]), int(stamps[20]))
        np.testing.assert_array_equal(rows[:, 0], stamps[10:21])
        np.testing.assert_array_equal(rows[:, 1], np.arange(10, 21))

    def test_ring_bounded(self):
        q = ImuQueue(capacity=64)
        self._feed(q, S + np.arange(1000) * 5_000_000)
        assert q._n <= 64
        rows = q.gyro_between(0, 10 * S)
        assert rows[-1, 0] == S + 999 * 5_000_000


def _feed_one_by_one(q, t, g, a):
    return [q.add(int(ti), gi, ai) for ti, gi, ai in zip(t, g, a)]


def _feed_batch(q, t, g, a):
    """The node's IMU path: the burst at once, or one by one where the batch declines."""
    if q.add_batch(list(t), np.concatenate([g, a], axis=1).tolist()):
        return [""] * len(t)
    return _feed_one_by_one(q, t, g, a)


class TestImuQueueAddBatch:
    """add_batch against K calls of add: the same ring, stamps, counters and rejections, on streams
    with every check firing (NaN, out of range, out of order, a reset back and forward, gaps, a
    full ring)."""

    def _stream(self, seed, n=3000):
        rng = np.random.default_rng(seed)
        t = 10 * S + np.cumsum(rng.choice([5_000_000, 5_000_000, 5_000_000, 20_000_000], n)).astype(np.int64)
        g = rng.normal(size=(n, 3))
        a = rng.normal(size=(n, 3)) * 9
        for j, i in enumerate(rng.choice(np.arange(1, n), 15, replace=False)):
            kind = j % 5                                        # every kind three times
            if kind == 0:
                g[i, rng.integers(0, 3)] = np.nan
            elif kind == 1:
                a[i, 2] = 500.0
            elif kind == 2:
                t[i] = t[i - 1]                                 # not after the previous one
            elif kind == 3:
                t[i:] -= 3 * S                                  # jump back: a reset
            else:
                t[i:] += 2 * S                                  # jump forward: a reset and a gap
        return t, g, a

    @pytest.mark.parametrize("seed", [0, 1, 2, 3])
    def test_same_as_one_by_one(self, seed):
        t, g, a = self._stream(seed)
        rng = np.random.default_rng(100 + seed)
        one, batch = ImuQueue(capacity=512), ImuQueue(capacity=512)
        why_one, why_batch = [], []
        i = 0
        while i < len(t):
            k = int(rng.integers(1, 25))
            why_one += _feed_one_by_one(one, t[i:i + k], g[i:i + k], a[i:i + k])
            why_batch += _feed_batch(batch, t[i:i + k], g[i:i + k], a[i:i + k])
            i += k
            assert (batch.last_t, batch.resets, batch.gaps, batch.gap_samples) == \
                (one.last_t, one.resets, one.gaps, one.gap_samples)
            tb, sb = batch.between(0, 1 << 62)
            to, so = one.between(0, 1 << 62)
            assert np.array_equal(tb, to) and np.array_equal(sb, so)
        assert why_batch == why_one
        assert {w for w in why_one if w} == {"imu_non_finite", "imu_out_of_range", "imu_out_of_order"}
        assert one.resets > 0 and one.gaps > 0

    def test_declines_without_change(self):
        q = ImuQueue()
        q.add(S, [0, 0, 0], [0, 0, 9.8])
        t = np.array([S + 5_000_000, S])                        # the second goes back
        assert not q.add_batch(t, [(0.0,) * 6] * 2)
        assert q.last_t == S and q.between(0, 2 * S)[0].tolist() == [S]
        assert not q.add_batch([S + 5_000_000], [(0.0, float("nan"), 0.0, 0.0, 0.0, 9.8)])      # NaN
        assert not q.add_batch([S + 5_000_000], [(0.0, 0.0, 0.0, 0.0, 0.0, float("inf"))])      # inf
        assert q.last_t == S
        assert q.add_batch([S + 5_000_000, S + 10_000_000], [(0.0,) * 6] * 2)
        assert q.last_t == S + 10_000_000


class TestStereoPairer:
    """Pairing by stamp (vilib_ros.nodes.stereo_pairing). Guards the bug where a right stream one
    message behind the left one paired no frame at all (one left image could wait, the next
    left image pushed it out unmatched)."""

    def _pairer(self, has_right=True, timeout=10.0):
        from vilib_ros.nodes.stereo_pairing import StereoPairer

        out, unmatched = [], []
        p = StereoPairer(lambda s, img, fid, t, img_right=None: out.append((s, img_right)), lambda: has_right,
                         timeout, lambda: unmatched.append(1))
        return p, out, unmatched

    def test_right_one_behind(self):
        p, out, un = self._pairer()
        p.left(1, "L1", "", 0.0)
        for k in range(2, 20):
            p.left(k, f"L{k}", "", 0.0)       # the right stream lags one message
            p.right(k - 1, f"R{k - 1}", 0.0)
        assert out == [(k, f"R{k}") for k in range(1, 19)] and not un

    def test_right_first_and_in_order(self):
        p, out, un = self._pairer()
        p.right(1, "R1", 0.0)
        p.left(1, "L1", "", 0.0)
        p.left(2, "L2", "", 0.0)
        p.left(3, "L3", "", 0.0)
        p.right(3, "R3", 0.0)                  # the right stream passed 2: it will not come
        assert out == [(1, "R1"), (2, None), (3, "R3")] and un == [1]

    def test_no_right_camera(self):
        p, out, un = self._pairer(has_right=False)
        p.left(1, "L1", "", 0.0)
        assert out == [(1, None)] and not un

    def test_bounded_and_timeout(self):
        p, out, un = self._pairer(timeout=0.0)
        for k in range(15):
            p.left(k, "L", "", 0.0)
        assert len(p.lefts) == 10 and [s for s, _ in out] == list(range(5))
        p.flush()
        assert not p.lefts and len(out) == 15 and len(un) == 15
        for k in range(100, 130):
            p.right(k, "R", 0.0)
        assert len(p.rights) == 10


class TestImuHoles:
    def test_three_second_hole_counted(self):
        """A 3 s hole in the IMU is counted as a gap and, beyond the time-jump threshold, empties the
        ring (no gyro prediction across it) (guards: a hole bridged silently)."""
        q = ImuQueue(jump_threshold_ns=S)
        for k in range(40):
            q.add(S + k * 5_000_000, (0, 0, 0), (0, 0, 9.8))
        q.add(S + 39 * 5_000_000 + 3 * S, (0, 0, 0), (0, 0, 9.8))
        assert q.gaps == 1 and q.gap_samples == 599 and q.resets == 1
        assert q.gyro_between(0, 10 * S).shape == (1, 4)


class TestImuReached:
    """When a backend frame may go on: the IMU has reached it on its own time line."""

    S = 1_000_000_000
    T = 100 * S                                         # a frame stamp

    def test_behind(self):
        assert not imu_reached(self.T, self.T - 2 * self.S, self.T - 1, self.S)
        assert not imu_reached(self.T, None, None, self.S)

    def test_just_reached(self):
        assert imu_reached(self.T, self.T - 2 * self.S, self.T, self.S)

    def test_far_ahead_on_the_same_line(self):
        """The ring holds the frame's time, so the IMU has reached it (guards: a backend 2 s behind
        its IMU, a replay 40 frames ahead at 20 Hz, waiting out imu_wait_s on every frame)."""
        assert imu_reached(self.T, self.T - 3 * self.S, self.T + 2 * self.S, self.S)

    def test_earlier_line_after_a_restart(self):
        """A replay restarted from its first stamp, its IMU still on the old line far ahead: the
        frame waits for the IMU to come onto its line."""
        assert not imu_reached(self.T, self.T + 50 * self.S, self.T + 60 * self.S, self.S)

    def test_through_the_queue(self):
        q = ImuQueue(jump_threshold_ns=self.S)
        for k in range(600):                            # 3 s at 200 Hz from T - 1 s
            assert q.add(self.T - self.S + k * 5_000_000, (0, 0, 0), (0, 0, 9.81)) == ""
        assert q.first_t == self.T - self.S
        assert q.reached(self.T) and q.reached(self.T + self.S) and not q.reached(self.T + 3 * self.S)
        assert not q.reached(self.T - 3 * self.S)          # older than the ring and > 1 s behind its end
