"""player_node replays the same sequence identically from an ASL folder, a ROS 1 .bag, a
ROS 2 bag and a ROS 2 bag of a user's camera (other topic names, no camera_info, no tf: replayed
with the ``*_topic`` parameters, no calibration needed) (real processes, real DDS): every image
(stamp and pixels, checked against the PNG files decoded with OpenCV), the IMU stream,
``player_done`` at the end, and a clean exit with ``exit_when_done``.
"""
from __future__ import annotations

import json
import time
import zlib

import numpy as np
import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from conftest import ros_domain  # noqa: E402

DOMAIN = ros_domain("ros_player")


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
    pytest.importorskip("rosbags", reason="rosbags not installed")
    from vilib_ros.synthetic import SequenceConfig, generate_sequence

    root = tmp_path_factory.mktemp("player_seq")
    cfg = SequenceConfig(duration_s=1.0, stereo=True)
    asl = generate_sequence(root / "asl", cfg, progress=False, workers=1)
    generate_sequence(root / "b1", cfg, progress=False, bag="ros1", workers=1)
    generate_sequence(root / "b2", cfg, progress=False, bag="ros2", workers=1)
    bag1 = next((root / "b1").glob("*.bag"))
    bag2 = next(p for p in (root / "b2").iterdir() if p.is_dir() and p.name.endswith("_ros2"))
    from vilib_ros.datasets.bag_writer import write_bag

    own = write_bag(asl, root / "own", image_topics=list(OWN_TOPICS[:2]), imu_topic=OWN_TOPICS[2],
                    camera_info=False, tf_static=False)
    return {"asl": asl, "ros1": bag1, "ros2": bag2, "own": own}


#: a user's camera: its bag's left, right and IMU topics
OWN_TOPICS = ("/camera/infra1/image_rect_raw", "/camera/infra2/image_rect_raw", "/camera/imu")
OWN_PARAMS = {"image_topic": OWN_TOPICS[0], "image_right_topic": OWN_TOPICS[1], "imu_topic": OWN_TOPICS[2]}


def _replay(path, tmp, tag, params=None):
    from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env
    from vilib_ros.pipeline_report import read_jsonl

    env = ros_env(DOMAIN)
    client = GraphClient(DOMAIN, f"test_player_{tag}")
    rec = NodeProcess("recorder_node", node_argv("recorder_node", params={
        "output": str(tmp / f"{tag}.jsonl"),
        "topics": ["cam0/image_raw:sensor_msgs/msg/Image", "cam1/image_raw:sensor_msgs/msg/Image",
                   "imu0:sensor_msgs/msg/Imu", "player_done:std_msgs/msg/Bool"]}), env, tmp / f"rec_{tag}.log")
    try:
        assert client.wait_for_subscribers({"/cam0/image_raw": 1, "/player_done": 1}, 60, [rec])
        # the player waits until every subscriber it has (the recorder's four) is matched; before,
        # it waited for cam0 only and lost the first IMU samples or images when the others matched late
        player = NodeProcess("player_node", node_argv("player_node", params={
            "dataset": str(path), "rate": 2.0, "exit_when_done": True, "progress": True,
            "wait_for_imu_subscribers": 1, "stats_path": str(tmp / f"stats_{tag}.json"), **(params or {})}), env,
            tmp / f"pl_{tag}.log")
        rc = player.wait(120)
        out = tmp / f"{tag}.jsonl"
        sizes = []

        def settled():   # the recorder has written everything that was delivered
            sizes.append(out.stat().st_size if out.exists() else 0)
            return len(sizes) > 10 and sizes[-1] == sizes[-10] and "player_done" in out.read_text()

        client.spin_until(settled, 60, 0.1)
        stats = tmp / f"stats_{tag}.json"
        return {"rc": rc, "records": read_jsonl(tmp / f"{tag}.jsonl"), "log": player.output(),
                "rec_rc": rec.stop(), "stats": json.loads(stats.read_text()) if stats.exists() else None}
    finally:
        rec.stop()
        client.close()


@pytest.fixture(scope="module")
def replays(sequence, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("player_out")
    return {k: _replay(v, tmp, k, OWN_PARAMS if k == "own" else None) for k, v in sequence.items()}


class TestPlayerSources:
    @pytest.mark.parametrize("source", ["asl", "ros1", "ros2", "own"])
    def test_images_match_the_png_files(self, replays, sequence, source):
        import cv2

        r = replays[source]
        assert r["rc"] == 0, r["log"][-3000:]
        for cam in (0, 1):
            folder = sequence["asl"] / "mav0" / f"cam{cam}" / "data"
            files = sorted(folder.glob("*.png"))
            want = {int(f.stem): zlib.crc32(cv2.imread(str(f), cv2.IMREAD_UNCHANGED).tobytes()) for f in files}
            got = {x["stamp_ns"]: x["crc32"] for x in r["records"] if x["topic"] == f"cam{cam}/image_raw"}
            assert got == want
            assert all(x["encoding"] == "mono8" for x in r["records"] if x["topic"] == f"cam{cam}/image_raw")

    @pytest.mark.parametrize("source", ["asl", "ros1", "ros2", "own"])
    def test_imu_stream_and_done(self, replays, sequence, source):
        """Every IMU sample of the replay window arrives, once, in order, and ``player_done`` once.

        Regression (failed in 2 of 4 runs on the loaded 2-core machine, ``[ros1]`` here and a
        missing cam0 frame in ``[ros2]``): the player waited only until cam0/image_raw had a
        subscriber and then started; the recorder's imu0 and cam1 subscriptions, discovered
        independently, could still be unmatched and lost the first samples. The player now waits
        for every subscriber of every topic it publishes. The old "IMU precedes its image" check
        here was always true for IMU records and never checked anything: the publication order is
        asserted on the sequence the player publishes (test_replay.py); DDS keeps the order per
        topic only, which is what is checked here."""
        r = replays[source]
        rows = [ln.split(",") for ln in (sequence["asl"] / "mav0" / "imu0" / "data.csv").read_text().splitlines()
                if ln and not ln.startswith("#")]
        t_imu = np.array([int(x[0]) for x in rows])
        t_img = sorted(int(f.stem) for f in (sequence["asl"] / "mav0" / "cam0" / "data").glob("*.png"))
        expect = t_imu[(t_imu >= t_img[0] - 500_000_000) & (t_imu <= t_img[-1])]
        got = [x["stamp_ns"] for x in r["records"] if x["topic"] == "imu0"]
        assert got == expect.tolist()          # all of them, once, in publication order
        cam0 = [x["stamp_ns"] for x in r["records"] if x["topic"] == "cam0/image_raw"]
        assert cam0 == t_img
        done = [x for x in r["records"] if x["topic"] == "player_done"]
        assert len(done) == 1 and done[0]["data"] is True
        st = r["stats"]
        assert st["imu"] == len(expect) and st["images"] == [len(t_img), len(t_img)] and st["skipped"] == {}

    def test_progress_bar_on_stderr(self, replays):
        assert "player: 100%" in replays["asl"]["log"]

    def test_own_topics_are_said(self, replays):
        assert (f"replaying {OWN_TOPICS[0]} as cam0/image_raw, {OWN_TOPICS[1]} as cam1/image_raw, "
                f"{OWN_TOPICS[2]} as imu0") in replays["own"]["log"]

    def test_two_image_topics_without_a_name_is_a_start_up_error(self, sequence, tmp_path):
        """No topic parameters and two Image topics: the player cannot tell left from right and
        says so, listing them (exit 2), instead of taking them in name order."""
        from vilib_ros.nodes.processes import NodeProcess, node_argv, ros_env

        player = NodeProcess("player_node", node_argv("player_node", params={
            "dataset": str(sequence["own"]), "exit_when_done": True}), ros_env(DOMAIN), tmp_path / "pl.log")
        assert player.wait(120) == 2, player.tail()
        line = [ln for ln in player.output().splitlines() if "cannot start" in ln]
        assert line and "2 sensor_msgs/Image topics and no way to tell which is the left camera" in line[0], \
            player.tail()
        assert f"{OWN_TOPICS[0]}, {OWN_TOPICS[1]}" in line[0]


class TestRateAtRunTime:
    """``rate`` set while the player runs (``ros2 param set``): within its mode it is taken, the replay
    goes on and ends; across modes (timed <-> backpressure) it is refused with the reason. Regression:
    rate 0 set mid-replay was taken, and every image then waited backpressure_timeout_s (5 s) for
    tracks the player had no subscription for."""

    def test_taken_within_the_mode_refused_across(self, sequence, tmp_path):
        from rclpy.parameter import Parameter
        from rclpy.parameter_client import AsyncParameterClient

        from vilib_ros.nodes.processes import GraphClient, NodeProcess, node_argv, ros_env

        env = ros_env(DOMAIN)
        client = GraphClient(DOMAIN, "test_player_rate")
        from std_msgs.msg import Bool

        from vilib_ros.nodes._common import latched_qos
        done = []
        client.node.create_subscription(Bool, "player_done", lambda m: done.append(m.data), latched_qos())
        player = NodeProcess("player_node", node_argv("player_node", params={
            "dataset": str(sequence["asl"]), "rate": 0.01, "wait_for_subscribers": 0, "start_delay_s": 0.0,
            "progress": False, "exit_when_done": True, "stats_path": str(tmp_path / "stats.json")}), env,
            tmp_path / "player.log")
        try:
            pc = AsyncParameterClient(client.node, "player_node")
            assert pc.wait_for_services(60), player.tail()

            def set_rate(value):
                fut = pc.set_parameters([Parameter("rate", value=value)])
                assert client.spin_until(fut.done, 30), player.tail()
                r = fut.result().results[0]
                return r.successful, r.reason

            ok, reason = set_rate(0.0)
            assert not ok and "started timed (rate 0.01)" in reason and "restart" in reason, reason
            t_set = time.monotonic()
            assert set_rate(1000.0) == (True, "")
            # at 0.01x the 1.5 s replay (IMU margin included) takes ~150 s; at 1000x it ends now. A player
            # that took the value but kept its old rate would still be replaying 20 s later (however long
            # the start took here: the replay began at most when this test's client did)
            assert player.wait(120) == 0, player.tail()
            assert time.monotonic() - t_set < 20.0, "the rate set at run time was not applied"
            stats = json.loads((tmp_path / "stats.json").read_text())
            from vilib_ros.datasets import open_dataset

            n = len(open_dataset(sequence["asl"]).image_stamps(0))
            assert stats["images"][0] == n and stats["backpressure_timeouts"] == 0, stats
            assert client.spin_until(lambda: done == [True], 30)
        finally:
            player.stop()
            client.close()


class TestCtrlC:
    def test_sigint_to_the_group_mid_replay_leaves_no_decoder(self, sequence, tmp_path):
        """The player decodes an ASL folder's images in processes of its own. A terminal's Ctrl-C
        (SIGINT to the whole group) mid-replay ends the player with its stats written, and no
        decoder is left running."""
        import os
        import signal
        from pathlib import Path

        from vilib_ros.nodes.processes import NodeProcess, node_argv, ros_env

        stats = tmp_path / "stats.json"
        player = NodeProcess("player_node", node_argv("player_node", params={
            "dataset": str(sequence["asl"]), "rate": 0.1, "imu_margin_s": 0.0, "wait_for_subscribers": 0,
            "start_delay_s": 0.0,
            "progress": False, "decoders": "processes", "decode_workers": 2, "stats_path": str(stats)}), ros_env(DOMAIN), tmp_path / "pl.log")

        def session():      # live processes of the player's session (it is the session's leader)
            pids = []
            for d in Path("/proc").iterdir():
                if not d.name.isdigit():
                    continue
                try:
                    fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(fields[3]) == player.pid and fields[0] != "Z":
                    pids.append(int(d.name))
            return pids

        try:
            t_end = time.monotonic() + 120
            while "decoded by 2 decoder processes" not in player.output() and time.monotonic() < t_end:
                assert player.alive, player.tail()
                time.sleep(0.2)
            assert "decoded by 2 decoder processes" in player.output(), player.tail()
            time.sleep(3.0)      # replaying: at 0.1x the 21 images of the 1 s sequence take 10 s
            assert len(session()) >= 3, session()
            os.killpg(player.pid, signal.SIGINT)
            rc = player.wait(60)
        finally:
            player.stop()
        assert rc == 0 and "Traceback" not in player.output(), player.tail()
        assert 0 < json.loads(stats.read_text())["images"][0] < 21         # interrupted mid-replay
        t_end = time.monotonic() + 20
        while session() and time.monotonic() < t_end:
            time.sleep(0.2)
        assert not session(), f"left running: {session()}"
