"""The replay sequence a player publishes (``vilib_ros.datasets.replay``), checked against the raw
dataset files read with plain text parsing and OpenCV: IMU up to an image's stamp precedes the
image, the IMU window, ``max_frames``, the cameras; the decode-ahead worker yields the same
sequence with the decoded images, skips unreadable frames with their reason, stays a bounded
number of frames ahead and hands on every other error.
"""
from __future__ import annotations

import threading
import time

import cv2
import numpy as np
import pytest

from test_euroc import make_asl
from vilib_ros.datasets import open_dataset
from vilib_ros.datasets.replay import Prefetcher, replay_events

T0 = 1_000_000_000_000


def _frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (480, 752), dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def asl(tmp_path_factory):
    # IMU at 200 Hz from T0, images at 20 Hz from T0: the IMU starts with the first image
    return make_asl(tmp_path_factory.mktemp("replay") / "seq", _frames(6), t0=T0, cams=2, imu_n=80, calibration=True)


def _csv_stamps(path):
    return [int(ln.split(",")[0]) for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def _sources(asl, tmp_path):
    pytest.importorskip("rosbags")
    from vilib_ros.datasets.bag_writer import write_bag

    return {"asl": asl, "ros1": write_bag(asl, tmp_path / "b1", kind="ros1"),
            "ros2": write_bag(asl, tmp_path / "b2", kind="ros2")}


class TestReplayEvents:
    def test_imu_precedes_its_image(self, asl, tmp_path):
        """Regression: test_ros_player asserted ``stamp >= last or topic == "imu0"``, always true for
        IMU records, so "IMU up to an image's stamp is published before the image" was never
        checked. Here the published sequence itself is checked against the raw csv files, for an
        ASL folder and the ROS 1 and ROS 2 bags written from it."""
        imu = _csv_stamps(asl / "mav0" / "imu0" / "data.csv")
        img = _csv_stamps(asl / "mav0" / "cam0" / "data.csv")
        for name, path in _sources(asl, tmp_path).items():
            ds = open_dataset(path)
            n, events = replay_events(ds, imu_margin_s=0.0, cameras=2)
            events = list(events)
            assert n == len(img) == 6, name
            seen_imu = []
            images = 0
            for ev in events:
                if ev[0] == "imu":
                    seen_imu.append(ev[1])
                    continue
                images += 1
                t = ev[2]
                # every IMU sample up to the image's stamp (and within the replayed window) came first
                assert seen_imu == [s for s in imu if img[0] <= s <= t], (name, t)
            assert images == 12, name        # both cameras
            assert seen_imu == [s for s in imu if img[0] <= s <= img[-1]], name
            ds.close()

    def test_imu_margin_max_frames_and_cameras(self, asl):
        imu = _csv_stamps(asl / "mav0" / "imu0" / "data.csv")
        img = _csv_stamps(asl / "mav0" / "cam0" / "data.csv")
        ds = open_dataset(asl)
        n, events = replay_events(ds, max_frames=3, imu_margin_s=0.02, cameras=1)
        events = list(events)
        assert n == 3
        assert [(e[1], e[2]) for e in events if e[0] == "image"] == [(0, t) for t in img[:3]]
        # the margin reaches before the first image, but the IMU log starts with it
        assert [e[1] for e in events if e[0] == "imu"] == [s for s in imu if s <= img[2]]

    def test_loops_continue_the_clock(self, asl):
        """``loops``: the same content again, stamps shifted so that time never goes back and the
        IMU stays continuous (no sample twice, none missing across a loop boundary)."""
        imu = _csv_stamps(asl / "mav0" / "imu0" / "data.csv")
        img = _csv_stamps(asl / "mav0" / "cam0" / "data.csv")
        ds = open_dataset(asl)
        n, events = replay_events(ds, imu_margin_s=0.0, cameras=1, loops=3)
        events = list(events)
        assert n == 18
        t = [e[1] if e[0] == "imu" else e[2] for e in events]
        assert all(a <= b for a, b in zip(t, t[1:]))
        period = img[1] - img[0]
        span = img[-1] - img[0] + period
        images = [e for e in events if e[0] == "image"]
        assert [e[2] for e in images] == [s + k * span for k in range(3) for s in img]
        assert [e[3] for e in images] == list(range(6)) * 3
        imu_t = [e[1] for e in events if e[0] == "imu"]
        assert len(imu_t) == len(set(imu_t))
        # 200 Hz throughout; at the 2 loop boundaries one frame period, since this IMU log starts
        # with the first image (where it starts earlier, the replay takes that period from it)
        gaps = np.diff(imu_t)
        assert np.count_nonzero(gaps == imu[1] - imu[0]) == len(gaps) - 2
        assert np.count_nonzero(gaps == period) == 2

    def test_max_frames_zero_means_all(self, tmp_path):
        root = make_asl(tmp_path / "seq", _frames(2), t0=T0)
        ds = open_dataset(root)
        n, events = replay_events(ds, max_frames=0, cameras=1)
        assert n == 2 and len([e for e in events if e[0] == "image"]) == 2

    def test_empty_camera(self, tmp_path):
        """A dataset whose cam0 has no image: nothing to replay, not even its IMU (the test of this name
        replayed a 2-frame folder; the empty case never ran)."""
        class NoImages:
            def __init__(self, ds):
                self.ds = ds

            def __getattr__(self, k):
                return getattr(self.ds, k)

            def image_stamps(self, cam):
                return np.zeros(0, np.int64)

        ds = open_dataset(make_asl(tmp_path / "seq", _frames(2), t0=T0))
        assert any(ev[0] == "imu" for ev in ds.iter_events())          # there is IMU it could have sent
        n, events = replay_events(NoImages(ds), max_frames=0, cameras=2)
        assert n == 0 and list(events) == []


class _Hooked:
    """A real dataset whose ``load_image`` goes through ``hook(ds, cam, index)``."""

    def __init__(self, path, hook):
        self.ds, self.hook = open_dataset(path), hook

    def __getattr__(self, k):
        return getattr(self.ds, k)

    def load_image(self, cam, index):
        return self.hook(self.ds, cam, index)


class TestPrefetcher:
    def test_same_sequence_with_decoded_images(self, asl):
        ds = open_dataset(asl)
        want = list(replay_events(ds, cameras=2)[1])
        feed = Prefetcher(lambda: open_dataset(asl), depth=3, kind="processes")
        assert feed.decoders.kind == "processes"        # an ASL folder: decoded outside this process
        feed.start(replay_events(feed.ds, cameras=2)[1])
        got = list(feed)
        feed.close()
        def key(ev):
            return ev[:2] if ev[0] == "imu" else ev[:4]

        assert [key(g) for g in got] == [key(w) for w in want]
        for g, w in zip(got, want):
            if g[0] == "imu":
                np.testing.assert_array_equal(np.concatenate(g[2:4]), np.concatenate(w[2:4]))
        files = {c: sorted((asl / "mav0" / f"cam{c}" / "data").glob("*.png")) for c in (0, 1)}
        for g in got:
            if g[0] == "image":
                np.testing.assert_array_equal(g[4], cv2.imread(str(files[g[1]][g[3]]), cv2.IMREAD_GRAYSCALE))

    def test_parallel_decode_keeps_the_order(self, asl):
        """Images decoded in 4 processes or on 4 threads arrive in the same order, with the same
        pixels, as from one thread."""
        got = []
        for workers, kind in ((1, "threads"), (4, "processes"), (4, "threads")):
            feed = Prefetcher(lambda: open_dataset(asl), depth=3, workers=workers, kind=kind)
            assert (feed.decoders.kind, feed.decoders.workers) == (kind, workers)
            feed.start(replay_events(feed.ds, cameras=2)[1])
            got.append(list(feed))
            feed.close()
        def key(ev):
            return ev[:2] if ev[0] == "imu" else ev[:4]

        for other in got[1:]:
            assert [key(g) for g in got[0]] == [key(g) for g in other]
            for a, b in zip(got[0], other):
                if a[0] == "image":
                    np.testing.assert_array_equal(a[4], b[4])

    def test_a_bag_is_read_in_the_worker_thread(self, asl, tmp_path):
        """A bag's reader (one file or sqlite3 cursor) is used by the thread that opened it only:
        the images are read there, not on decoder threads, and arrive as from the ASL folder."""
        bag = _sources(asl, tmp_path)["ros2"]
        feed = Prefetcher(lambda: open_dataset(bag), depth=3, workers=4)
        assert (feed.decoders.kind, feed.decoders.workers) == ("threads", 0)
        feed.start(replay_events(feed.ds, cameras=2)[1])
        got = [g for g in feed if g[0] == "image"]
        feed.close()
        assert len(got) == 12
        files = {c: sorted((asl / "mav0" / f"cam{c}" / "data").glob("*.png")) for c in (0, 1)}
        for g in got:
            np.testing.assert_array_equal(g[4], cv2.imread(str(files[g[1]][g[3]]), cv2.IMREAD_GRAYSCALE))

    @pytest.mark.parametrize("kind", ["processes", "threads"])
    def test_bad_frames_are_skip_events(self, tmp_path, kind):
        root = make_asl(tmp_path / "seq", _frames(5), t0=T0)
        files = sorted((root / "mav0" / "cam0" / "data").glob("*.png"))
        files[1].write_bytes(b"\\x89PNG garbage")
        files[2].write_bytes(b"")
        files[3].unlink()
        feed = Prefetcher(lambda: open_dataset(root), kind=kind)
        assert feed.decoders.kind == kind
        feed.start(replay_events(feed.ds)[1])
        got = [g for g in feed if g[0] != "imu"]
        feed.close()
        assert [(g[0], g[3]) for g in got] == [("image", 0), ("skip", 1), ("skip", 2), ("skip", 3), ("image", 4)]
        assert [g[4] for g in got if g[0] == "skip"] == ["corrupt", "empty_file", "missing_file"]
        assert files[3].name in got[3][5]

    def test_bounded_lead(self, asl):
        calls = []

        def counting(ds, cam, index):
            calls.append(index)
            return ds.load_image(cam, index)

        feed = Prefetcher(lambda: _Hooked(asl, counting), depth=2)
        feed.start(replay_events(feed.ds, cameras=1)[1])
        it = iter(feed)
        first = next(it)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(calls) < 3:
            time.sleep(0.05)
        time.sleep(0.3)
        # consumed one event (IMU): at most depth (2) images read ahead
        assert first[0] == "imu" and len(calls) <= 2
        rest = list(it)
        feed.close()
        assert len([g for g in rest if g[0] == "image"]) == 6 and sorted(calls) == list(range(6))

    def test_open_error_raised_in_constructor(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="nope"):
            Prefetcher(lambda: open_dataset(tmp_path / "nope"))

    def test_other_errors_reach_the_consumer(self, asl):
        def failing(ds, cam, index):
            if index == 2:
                raise OSError("disk gone")
            return ds.load_image(cam, index)

        feed = Prefetcher(lambda: _Hooked(asl, failing))
        feed.start(replay_events(feed.ds)[1])
        with pytest.raises(OSError, match="disk gone"):
            list(feed)
        feed.close()
        assert not any(t.name == "vilib_ros_prefetch" and t.is_alive() for t in threading.enumerate())


class TestHandGilToDecoders:
    """Decode threads get the GIL back within DECODE_SWITCH_INTERVAL_S (bench/decode_gil_probe.py:
    with Python's 5 ms the consumer waited 0.8 s for 601 decoded images, 0.1-0.2 s with 0.5 ms)."""

    def test_lowers_never_raises(self):
        import sys

        from vilib_ros.datasets.replay import DECODE_SWITCH_INTERVAL_S, hand_gil_to_decoders

        before = sys.getswitchinterval()
        try:
            sys.setswitchinterval(0.005)
            assert hand_gil_to_decoders() == pytest.approx(0.005, rel=0.05)
            assert sys.getswitchinterval() == pytest.approx(DECODE_SWITCH_INTERVAL_S, rel=0.05)
            sys.setswitchinterval(0.0001)          # a caller's own smaller interval stays
            hand_gil_to_decoders()
            assert sys.getswitchinterval() == pytest.approx(0.0001, rel=0.05)
        finally:
            sys.setswitchinterval(before)

    def test_offline_runner_restores_the_callers_interval(self, asl):
        """The offline runner decodes on threads with the lower interval and gives the caller's back."""
        import sys

        from vilib_ros.offline import process

        before = sys.getswitchinterval()
        try:
            sys.setswitchinterval(0.004)
            r = process(open_dataset(asl), "cpu", stereo=False, backend=False)
            assert r["frames"] == 6 and sys.getswitchinterval() == pytest.approx(0.004, rel=0.05)
        finally:
            sys.setswitchinterval(before)


class TestReplayClock:
    """ReplayClock: the player's publish times, against the formula of a fixed rate."""

    def test_constant_rate_is_the_first_event_plus_scaled_data_time(self):
        from vilib_ros.datasets.replay import ReplayClock

        c = ReplayClock()
        stamps = [10**9 + k * 50_000_000 for k in range(20)]
        got = [c.target(t, 2.0, now=100.0 + 0.001 * k) for k, t in enumerate(stamps)]
        want = [100.0 + (t - stamps[0]) * 1e-9 / 2.0 for t in stamps]
        assert np.allclose(got, want, rtol=0, atol=1e-9)

    def test_a_rate_change_applies_from_the_previous_event(self):
        """Regression: rate 1000 -> 1 after 3 s of data paused the replay ~3 s (every target counted from
        the first event at the new rate); now the next event comes one data period after the last."""
        from vilib_ros.datasets.replay import ReplayClock

        c = ReplayClock()
        s = 10**9
        t0 = c.target(s, 1000.0, now=5.0)
        t1 = c.target(s + 3 * 10**9, 1000.0, now=5.0)
        assert t1 == pytest.approx(t0 + 0.003)
        t2 = c.target(s + 3 * 10**9 + 50_000_000, 1.0, now=5.003)
        assert t2 == pytest.approx(t1 + 0.05)             # not t0 + 3.05: no pause
        t3 = c.target(s + 3 * 10**9 + 100_000_000, 1.0, now=5.06)
        assert t3 == pytest.approx(t1 + 0.10)
        # raised again: the next event 50 ms of data later takes 0.05 ms, not a burst back to the start's pace
        t4 = c.target(s + 3 * 10**9 + 150_000_000, 1000.0, now=5.1)
        assert t4 == pytest.approx(t3 + 0.00005)

    def test_refuses_a_rate_that_is_not_positive(self):
        from vilib_ros.datasets.replay import ReplayClock

        for bad in (0.0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="rate > 0"):
                ReplayClock().target(0, bad, now=0.0)
