"""Images decoded outside the interpreter lock (``vilib_ros.datasets.decoders``), checked against
the PNG files read with OpenCV and against the dataset's own reader:

* decoder processes give the pixels of the files, in the order asked, through a ring of fewer
  slots than frames; an image the consumer kept is not overwritten when its slot is filled again;
* an unreadable frame comes back as the dataset reader's FrameError (same reason, same message);
* at most ``capacity`` jobs wait to be collected;
* the processes end when closed, and by themselves when their parent is killed; the shared
  memory is gone after ``close()``;
* a Ctrl-C at the terminal during an offline replay (SIGINT to the whole process group) ends the
  run with "interrupted", exit 130, no traceback, and leaves no process of its group behind.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import wait_until
from test_euroc import make_asl
from vilib_ros.datasets import FrameError, open_dataset
from vilib_ros.datasets.decoders import DecoderProcesses, DecoderThreads, open_decoders

REPO = Path(__file__).resolve().parents[1]
T0 = 1_000_000_000_000


def _frames(n, seed=0, shape=(480, 752)):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def asl(tmp_path_factory):
    return make_asl(tmp_path_factory.mktemp("decoders") / "seq", _frames(9), t0=T0, cams=2, calibration=True)


def _png(root, cam, k):
    return cv2.imread(str(sorted((root / "mav0" / f"cam{cam}" / "data").glob("*.png"))[k]), cv2.IMREAD_UNCHANGED)


def _alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


class TestDecoderProcesses:
    def test_pixels_and_order_through_fewer_slots_than_frames(self, asl):
        ds = open_dataset(asl)
        dec = open_decoders(ds, (0, 1), per_job=2, workers=3, capacity=4, kind="processes")
        try:
            assert isinstance(dec, DecoderProcesses)
            got, ahead, nxt = [], [], 0
            for k in range(9):
                while len(ahead) < dec.capacity and nxt < 9:
                    ahead.append(dec.submit(((0, nxt), (1, nxt))))
                    nxt += 1
                got.append(ahead.pop(0).result())
            for k, (left, right) in enumerate(got):     # every image kept: none was overwritten later
                np.testing.assert_array_equal(left, _png(asl, 0, k))
                np.testing.assert_array_equal(right, _png(asl, 1, k))
            assert dec.jobs == 9 and dec.decode_s > 0 and dec.busy_s == pytest.approx(dec.decode_s / 3)
        finally:
            dec.close()

    def test_unreadable_frames_are_the_dataset_readers_errors(self, tmp_path):
        frames = _frames(6, seed=1)
        root = make_asl(tmp_path / "seq", frames, t0=T0)
        files = sorted((root / "mav0" / "cam0" / "data").glob("*.png"))
        files[1].write_bytes(b"\x89PNG garbage")
        files[2].write_bytes(b"")
        files[3].unlink()
        cv2.imwrite(str(files[4]), frames[4][:240, :376])      # another size than the camera's
        ds = open_dataset(root)
        want = []
        for k in range(6):
            try:
                want.append(ds.load_image(0, k))
            except FrameError as exc:
                want.append(exc)
        dec = open_decoders(ds, (0,), per_job=1, workers=2, capacity=6, kind="processes")
        try:
            assert isinstance(dec, DecoderProcesses)
            got = [t.result()[0] for t in [dec.submit(((0, k),)) for k in range(6)]]
        finally:
            dec.close()
        assert [type(g).__name__ for g in got] == ["ndarray", "FrameError", "FrameError", "FrameError",
                                                    "FrameError", "ndarray"]
        for g, w in zip(got, want):
            if isinstance(w, FrameError):
                assert (g.reason, str(g)) == (w.reason, str(w))
            else:
                np.testing.assert_array_equal(g, w)
        assert [g.reason for g in got[1:5]] == ["corrupt", "empty_file", "missing_file", "size_mismatch"]

    def test_capacity_is_enforced(self, asl):
        dec = open_decoders(open_dataset(asl), (0,), workers=2, capacity=2, kind="processes")
        try:
            a, b = dec.submit(((0, 0),)), dec.submit(((0, 1),))
            with pytest.raises(RuntimeError, match="more than 2 decoded frames"):
                dec.submit(((0, 2),))
            a.result()
            c = dec.submit(((0, 2),))          # a collected job frees its slot
            np.testing.assert_array_equal(c.result()[0], _png(asl, 0, 2))
            np.testing.assert_array_equal(b.result()[0], _png(asl, 0, 1))
        finally:
            dec.close()

    def test_close_ends_the_processes_and_frees_the_shared_memory(self, asl):
        dec = open_decoders(open_dataset(asl), (0, 1), per_job=2, workers=2, capacity=3, kind="processes")
        dec.wait_ready()
        pids = [p.pid for p in dec._procs]
        names = [s.name for s in dec._shm]
        dec.submit(((0, 0), (1, 0))).result()
        dec.close()
        dec.close()        # a second close does nothing
        assert not any(_alive(p) for p in pids)
        assert not any(Path("/dev/shm", n).exists() for n in names)

    def test_the_processes_end_when_their_parent_is_killed(self, asl):
        script = textwrap.dedent(f"""
            import sys, time
            from vilib_ros.datasets import open_dataset
            from vilib_ros.datasets.decoders import open_decoders
            if __name__ == "__main__":
                dec = open_decoders(open_dataset({str(asl)!r}), (0,), workers=2, capacity=2, kind="processes")
                dec.wait_ready()
                print(" ".join(str(p.pid) for p in dec._procs), flush=True)
                time.sleep(600)
        """)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            pids = [int(p) for p in proc.stdout.readline().split()]
            assert len(pids) == 2 and all(_alive(p) for p in pids)
        finally:
            proc.kill()
            proc.wait(10)
        assert wait_until(lambda: not any(_alive(p) for p in pids), 20), "a decoder outlived its parent"


class TestChoice:
    def test_auto_takes_processes_only_with_cpus_for_them(self, asl, monkeypatch):
        from vilib_ros.datasets import decoders

        ds = open_dataset(asl)
        for n, want in ((2, DecoderThreads), (3, DecoderThreads), (4, DecoderProcesses), (6, DecoderProcesses)):
            monkeypatch.setattr(decoders, "cpus", lambda n=n: n)
            dec = open_decoders(ds, (0,))
            try:
                assert isinstance(dec, want), n
                assert dec.workers == ({2: 4, 3: 4, 4: 2, 6: 3}[n]), n      # processes: half, 2..8; threads: 4..8
            finally:
                dec.close()
        with pytest.raises(ValueError, match="decoders must be one of auto, processes, threads"):
            open_decoders(ds, (0,), kind="fork")


class TestDecoderThreads:
    def test_datasets_without_parallel_loads_read_on_one_thread(self, asl):
        """Regression: the offline runner read a bag on 4 threads at once; the ROS 1 bag reader is one
        file handle, and a run failed now and then ("Could not read uint8 field 'op'", "I/O
        operation on closed file"). A dataset that does not allow parallel loads is read on one."""
        import threading

        from vilib_ros.offline import process

        class OneReader:
            parallel_loads = False

            def __init__(self, ds):
                self.ds, self.now, self.most, self.lock = ds, 0, 0, threading.Lock()

            def __getattr__(self, k):
                return getattr(self.ds, k)

            def load_image(self, cam, index):
                with self.lock:
                    self.now += 1
                    self.most = max(self.most, self.now)
                time.sleep(0.01)
                with self.lock:
                    self.now -= 1
                return self.ds.load_image(cam, index)

        ds = OneReader(open_dataset(asl))
        assert isinstance(open_decoders(ds, (0,), workers=4, kind="processes"), DecoderThreads)
        r = process(ds, "cpu", stereo=False, backend=False, readers=4)
        assert len(r["tracks"]) == 9 and r["reader"]["workers"] == 1 and ds.most == 1


class TestCtrlC:
    @pytest.mark.slow
    def test_sigint_to_the_group_mid_replay_leaves_no_process(self, generated_sequence, tmp_path):
        """The offline runner's tree (decoder processes, the backend child) under a terminal's Ctrl-C:
        SIGINT to the whole foreground group while frames are being decoded and tracked."""
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        script = textwrap.dedent(f"""
            import sys, time
            from vilib_ros.datasets import open_dataset
            from vilib_ros.offline import process
            def progress(k, n):
                if k == 3:
                    print("replaying", flush=True)
                time.sleep(0.2)     # a slow consumer: the interrupt comes mid-replay
            if __name__ == "__main__":
                try:
                    process(open_dataset({str(generated_sequence)!r}), "cpu", progress=progress, decoders="processes")
                except KeyboardInterrupt:
                    print("interrupted", file=sys.stderr)
                    sys.exit(130)
        """)
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=REPO, env=env, start_new_session=True)
        sid = proc.pid

        def in_session():
            pids = []
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    except (FileNotFoundError, IndexError):
                        continue
                    if int(fields[3]) == sid and fields[0] != "Z":
                        pids.append(int(d.name))
            return pids

        try:
            assert proc.stdout.readline().strip() == "replaying", proc.stderr.read()
            assert len(in_session()) >= 3        # the runner, its decoders, the backend
            os.killpg(sid, signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(sid, signal.SIGKILL)
                proc.wait(10)
        assert proc.returncode == 130 and "interrupted" in err, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
        assert wait_until(lambda: not in_session(), 20), f"left running: {in_session()}"
