"""No process outlives its parent: ``kill -9`` the parent of a running ``vilib-ros run`` and of a
node test's fixture (nodes started through ``vilib_ros.nodes.processes``), and no child of
either is left running a few seconds later.

Regression: a test process killed on a timeout left the recorder, backend and frontend nodes
of test_ros_restart running on their own (parent 1, still in their ROS domain, ~14% CPU) until
they were killed by hand. Every child now asks the kernel for SIGTERM when its parent dies.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from conftest import live_pids, ros_domain  # noqa: E402

DOMAIN = ros_domain("process_lifetime")
REPO = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _wait(predicate, timeout: float, step: float = 0.2) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _kill_9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


class TestKillNineTheParent:
    def test_vilib_ros_run(self, generated_sequence, tmp_path):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        out = tmp_path / "run"
        # the run itself is started plainly here: the test kills it, not the other way round
        proc = subprocess.Popen([sys.executable, "-m", "vilib_ros", "run", str(generated_sequence), "--out", str(out),
                                 "--domain-id", str(DOMAIN), "--rate", "0.5", "--no-video"],
                                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        params = str(out / "params.yaml")
        try:
            assert _wait(lambda: len(live_pids(params, "vilib_ros.nodes.")) == 4, 120), \
                "the run did not start its four nodes"
            children = live_pids(params, "vilib_ros.nodes.")
            _kill_9(proc)
            assert _wait(lambda: not live_pids(params, "vilib_ros.nodes."), 15), \
                f"children of the killed run still alive: {live_pids(params, 'vilib_ros.nodes.')} of {children}"
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in live_pids(params, "vilib_ros.nodes."):   # clean up after a failure
                os.kill(pid, signal.SIGKILL)

    def test_node_fixture(self, tmp_path):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        marker = str(tmp_path / "fixture_nodes")
        # what a node test's fixture does: nodes through NodeProcess, then it waits on them
        script = f"""
import sys, time
from vilib_ros.nodes.processes import NodeProcess, node_argv, ros_env
env = ros_env({ros_domain("process_lifetime_2")})
for node in ("recorder_node", "frontend_node"):
    NodeProcess(node, node_argv(node, params={{"output": {marker!r} + "/rec.jsonl"}} if node == "recorder_node"
                                else {{"device": "cpu", "stats_path": {marker!r} + "/fe.json"}}), env,
                {marker!r} + f"/{{node}}.log")
print("started", flush=True)
time.sleep(600)
"""
        proc = subprocess.Popen([sys.executable, "-c", script], env=_env(), stdout=subprocess.PIPE, text=True)

        def nodes():   # (the fixture's own command line names the marker too)
            return [p for p in live_pids(marker, "--ros-args") if p != proc.pid]

        try:
            assert proc.stdout.readline().strip() == "started"
            logs = [Path(marker) / "recorder_node.log", Path(marker) / "frontend_node.log"]

            def up():   # both nodes are running (past their start-up), not merely forked
                return len(nodes()) == 2 and all(f.exists() and "[INFO]" in f.read_text() for f in logs)

            assert _wait(up, 90), [f.read_text() if f.exists() else "" for f in logs]
            _kill_9(proc)
            assert _wait(lambda: not nodes(), 15), f"nodes of the killed fixture still alive: {nodes()}"
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in nodes():
                os.kill(pid, signal.SIGKILL)
