"""The estimator behind :mod:`vilib_ros.backend.runner`'s queue interface, in a child process and in
this one, against :class:`vilib_ros.backend.VioEstimator` called directly on the same data.

The reference is the estimator itself fed in time order here: the runner must only move the
inputs and the estimates across (same inputs, same order, so the same numbers to the last bit),
keep one reply per frame in order, and report a child that dies instead of hanging.
"""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")

DURATION_S = 8.0


@pytest.fixture(scope="module")
def data():
    from vilib_ros.backend.simulation import synthetic_track_frames
    from vilib_ros.synthetic import SequenceConfig, SyntheticSequence

    seq = SyntheticSequence(SequenceConfig(duration_s=DURATION_S, seed=3))
    st, d, _, _ = seq.imu()
    frames = synthetic_track_frames(seq, pixel_sigma=1.0, drop_prob=0.03, max_tracks=150)
    return seq, st, d, frames


def _reference(seq, st, d, frames):
    from vilib_ros.backend import BackendConfig, VioEstimator

    est = VioEstimator(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict())
    out, i = [], 0
    for f in frames:
        j = int(np.searchsorted(st, f.stamp_ns, side="right"))
        est.add_imu_batch(st[i:j], d[i:j])
        i = j
        s = est.add_frame(f)
        cov = est.state_covariance() if s is not None and s.is_keyframe else None
        out.append((s, cov))
    return out, est.trajectory(True), est.counters()


def _through(runner, st, d, frames):
    from vilib_ros.backend.runner import BackendFrame

    replies, i = [], 0
    for k, f in enumerate(frames):
        j = int(np.searchsorted(st, f.stamp_ns, side="right"))
        runner.add_imu_batch(st[i:j], d[i:j])
        i = j
        runner.add_frame(BackendFrame.of(f), covariance=True, landmarks=(k % 7 == 0))
        replies += runner.results()
    final = runner.close()
    end = time.monotonic() + 60
    while sum(r["kind"] == "frame" for r in replies) < len(frames) and time.monotonic() < end:
        replies += runner.results()
        time.sleep(0.01)
    return [r for r in replies if r["kind"] == "frame"], final


def _same_state(a, b):
    if a is None or b is None:
        return a is None and b is None
    return (a.stamp_ns == b.stamp_ns and a.is_keyframe == b.is_keyframe and np.array_equal(a.p, b.p)
            and np.array_equal(a.q_xyzw, b.q_xyzw) and np.array_equal(a.v, b.v) and np.array_equal(a.bg, b.bg))


@pytest.mark.slow
class TestEstimatorRunner:
    @pytest.mark.parametrize("where", ["process", "inline"])
    def test_same_estimates_as_the_estimator(self, data, where):
        """One reply per frame, in order, each state and keyframe covariance bit-identical to the
        estimator's own; the final smoothed trajectory and counters identical too."""
        from vilib_ros.backend import BackendConfig
        from vilib_ros.backend.runner import EstimatorInline, EstimatorProcess

        seq, st, d, frames = data
        ref, ref_traj, ref_counters = _reference(seq, st, d, frames)
        cls = EstimatorProcess if where == "process" else EstimatorInline
        runner = cls(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict())
        assert runner.mode == "stereo"
        replies, final = _through(runner, st, d, frames)
        assert [r["stamp_ns"] for r in replies] == [f.stamp_ns for f in frames]
        assert all(r["error"] is None for r in replies)
        n_kf = 0
        for (s, cov), r in zip(ref, replies):
            assert _same_state(s, r["state"])
            if cov is not None:
                n_kf += 1
                assert np.array_equal(cov.pose, r["covariance"].pose)
        assert n_kf > 10
        assert any(r["landmarks"] is not None and len(r["landmarks"]) > 10 for r in replies)
        for a, b in zip(ref_traj, final["trajectory"]):
            assert np.array_equal(a, b)
        assert final["counters"] == ref_counters

    def test_reset_gives_the_trajectory_and_starts_afresh(self, data):
        from vilib_ros.backend import BackendConfig
        from vilib_ros.backend.runner import BackendFrame, EstimatorProcess

        seq, st, d, frames = data
        runner = EstimatorProcess(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict())
        half = len(frames) // 2
        runner.add_imu_batch(st[st <= frames[half].stamp_ns], d[st <= frames[half].stamp_ns])
        for f in frames[:half]:
            runner.add_frame(BackendFrame.of(f))
        t, p, q = runner.reset()
        assert len(t) > half // 2 and p.shape == (len(t), 3)
        replies = runner.results()
        assert sum(r["kind"] == "frame" for r in replies) == half      # every earlier reply kept, in order
        assert runner.counters()["frames"] == 0
        final = runner.close()
        assert len(final["trajectory"][0]) == 0

    def test_killed_child_reported_not_hung(self, data):
        """Regression guard: a child killed under the caller must come back as a 'died' reply and make
        close() raise, not block for ever."""
        from vilib_ros.backend import BackendConfig
        from vilib_ros.backend.runner import EstimatorProcess

        seq, _, _, _ = data
        woke = []
        runner = EstimatorProcess(BackendConfig(), seq.camera(0), seq.camera(1), seq.imu_noise_dict(),
                                  notify=lambda: woke.append(1))
        os.kill(runner.proc.pid, signal.SIGKILL)
        end = time.monotonic() + 30
        replies = []
        while not any(r["kind"] == "died" for r in replies) and time.monotonic() < end:
            replies += runner.results()
            time.sleep(0.02)
        assert any(r["kind"] == "died" for r in replies) and woke
        assert "exit code" in runner.error
        with pytest.raises(RuntimeError):
            runner.close(timeout_s=5)
