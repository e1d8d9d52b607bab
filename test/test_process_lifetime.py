"""No process outlives its parent: ``kill -9`` the parent of a running ``vilib-ros run`` and of a
node test's fixture (nodes started through ``vilib_ros.nodes.processes``), and no child of
either is left running a few seconds later.

Every child asks the kernel for SIGTERM when its parent dies (guards: a test process killed on a
timeout leaving its nodes running on their own, parent 1, still in their ROS domain).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

from conftest import live_pids, ros_domain, wait_until  # noqa: E402
from test_interrupts import SWALLOW  # noqa: E402

DOMAIN = ros_domain("process_lifetime")
REPO = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


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
            assert wait_until(lambda: len(live_pids(params, "vilib_ros.nodes.")) == 4, 120, step=0.2), \
                "the run did not start its four nodes"
            children = live_pids(params, "vilib_ros.nodes.")
            _kill_9(proc)
            assert wait_until(lambda: not live_pids(params, "vilib_ros.nodes."), 15, step=0.2), \
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

            assert wait_until(up, 90, step=0.2), [f.read_text() if f.exists() else "" for f in logs]
            _kill_9(proc)
            assert wait_until(lambda: not nodes(), 15, step=0.2), f"nodes of the killed fixture still alive: {nodes()}"
        finally:
            if proc.poll() is None:
                proc.kill()
            for pid in nodes():
                os.kill(pid, signal.SIGKILL)


_HANGING_CLOSE = r"""
import sys, time
from rclpy.node import Node
from vilib_ros.nodes._common import run_node

class HangsWhileClosing(Node):
    def __init__(self):
        super().__init__("hangs_while_closing")
        self.create_timer(0.05, lambda: None)
        print("built", file=sys.stderr, flush=True)

    def close(self):
        print("closing", file=sys.stderr, flush=True)
        time.sleep(3600)

sys.exit(run_node(HangsWhileClosing))
"""


_SLOW_TO_BUILD = r"""
import sys, time
from rclpy.node import Node
from vilib_ros.nodes._common import run_node

class SlowToBuild(Node):
    def __init__(self):
        super().__init__("slow_to_build")
        print("building", file=sys.stderr, flush=True)
        time.sleep(3600)

sys.exit(run_node(SlowToBuild))
"""


class TestSigtermBeforeTheSpin:
    """A SIGTERM that comes while the node is still being built ends the process.

    Guards: rclpy's SIGTERM handler wakes only executors that already exist and chains to the
    default handler, which it skips; a parent-death SIGTERM that comes during the node's
    construction, or between it and the first spin, lost, and the node spinning on, an orphan,
    until SIGKILL."""

    def test_sigterm_during_construction(self):
        proc, err = _start_script(_SLOW_TO_BUILD, wait_for="building")
        try:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(30)
            except subprocess.TimeoutExpired:
                pytest.fail("SIGTERM during the node's construction was lost: the process is still running")
            assert rc == 0, err + _read_available(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


def _read_available(proc: subprocess.Popen) -> str:
    """What the child has written to its (non-blocking) stderr so far."""
    chunks = []
    while True:
        try:
            chunk = os.read(proc.stderr.fileno(), 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _start_script(script: str, *argv: str, wait_for: str, **env_extra: str) -> tuple[subprocess.Popen, str]:
    """A node script in a process of its own (stderr non-blocking), once it has printed
    ``wait_for``: (the process, its stderr so far). Waits for the mark, never a fixed time (on a
    loaded machine a signal sent after a fixed delay can come while the node is still being
    constructed)."""
    env = _env()
    env.update(ROS_DOMAIN_ID=str(DOMAIN), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", **env_extra)
    proc = subprocess.Popen([sys.executable, "-c", script, *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.set_blocking(proc.stderr.fileno(), False)
    err, end = "", time.monotonic() + 120
    while time.monotonic() < end and wait_for not in err and proc.poll() is None:
        time.sleep(0.1)
        err += _read_available(proc)
    if wait_for not in err:
        rc = proc.poll()
        proc.kill()
        pytest.fail(f"the node did not start (exit {rc}): {err}")
    return proc, err


def _interrupt_until(proc: subprocess.Popen, err: str, mark: str) -> str:
    """SIGINT, repeated (the first may come before the spin), until the child prints ``mark``."""
    end = time.monotonic() + 60
    while time.monotonic() < end and mark not in err and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        err += _read_available(proc)
    assert mark in err, err
    return err


class TestRunNodeClose:
    """run_node's close phase is bounded. Regression: a recorder_node whose parent died got its
    one SIGTERM, blocked while closing, and then ignored every further SIGTERM (the handler set
    SIGTERM to SIG_IGN for the close): an orphan that only SIGKILL ended."""

    def _start(self, limit_s: str) -> subprocess.Popen:
        # built before the first SIGINT, else run_node ends with no node to close (see _start_script)
        proc, self._err = _start_script(_HANGING_CLOSE, wait_for="built", VILIB_ROS_CLOSE_LIMIT_S=limit_s)
        return proc

    def _interrupt_until_closing(self, proc) -> str:
        return _interrupt_until(proc, self._err, "closing")

    def test_sigterm_while_closing_ends_the_process(self):
        proc = self._start("3600")
        try:
            self._interrupt_until_closing(proc)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 124
        finally:
            if proc.poll() is None:
                proc.kill()

    def test_close_past_the_limit_ends_the_process(self):
        proc = self._start("2")
        try:
            self._interrupt_until_closing(proc)
            assert proc.wait(60) == 124
            assert "closing took more than" in _read_available(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


_HANGS_IN_TEARDOWN = r"""
import sys, time
from rclpy.node import Node
from vilib_ros.nodes._common import run_node

class HangsInTeardown(Node):
    def __init__(self):
        super().__init__("hangs_in_teardown")
        self.create_timer(0.05, lambda: None)
        print("built", file=sys.stderr, flush=True)

    def close(self):
        print("closed", file=sys.stderr, flush=True)

    def destroy_node(self):
        if sys.argv[1] == "holding_the_gil":
            sum(range(10 ** 15))    # one C call that never lets another Python thread run
        else:
            time.sleep(3600)
        super().destroy_node()

sys.exit(run_node(HangsInTeardown))
"""


class TestTeardownLimit:
    """After close() the DDS teardown (destroy_node, context shutdown) has a short limit of its own.

    Regression: a recorder_node whose parent had died closed (its file written), then spun in
    rclpy's destroy_node, inside Fast DDS, while the 120 s close limit ran: 2 in 383 parent kills
    at random moments (test_node_fixture allows 15 s). A hang that holds the GIL starves the
    Python timer's thread; the GIL-free backstop (faulthandler) ends that one, tracebacks first."""

    def _run(self, how: str) -> tuple[int, str]:
        proc, err = _start_script(_HANGS_IN_TEARDOWN, how, wait_for="built", VILIB_ROS_TEARDOWN_LIMIT_S="1")
        try:
            err = _interrupt_until(proc, err, "closed")
            try:
                rc = proc.wait(30)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the process hung in its teardown past the limit: {err}")
            os.set_blocking(proc.stderr.fileno(), True)
            return rc, err + proc.stderr.read().decode(errors="replace")
        finally:
            if proc.poll() is None:
                proc.kill()

    def test_a_hang_that_lets_python_run_exits_with_the_nodes_status(self):
        rc, err = self._run("sleeping")
        assert rc == 0, err
        assert "the DDS teardown took more than 1 s" in err

    def test_a_hang_holding_the_gil_ends_by_the_backstop(self):
        rc, err = self._run("holding_the_gil")
        assert rc == 1, err
        assert "Timeout (0:00:04)!" in err and "destroy_node" in err, err


class TestStopWhileStarting:
    """A stop during start-up is a stop: exit 0. A node started as a shell's background job has
    SIGINT ignored from its start, so Python raises no KeyboardInterrupt (guards: a SIGINT while a
    CPU frontend starts for the first time, numba compiling its kernels in the warm-up, letting
    rclpy's handler shut the context down while the node goes on being built, until its next
    publisher fails on the dead context with a traceback, exit 1).

    The gc-pause hook is on here (``VILIB_ROS_GC_PAUSES=1``, its opt-in; guards: the SIGINT's
    handler running inside it, in ``gc.callbacks``, where Python swallows the KeyboardInterrupt):
    wherever the signal lands, the stop holds (the landing itself is exercised deterministically by
    :class:`TestSwallowedStop`)."""

    def test_sigint_during_the_first_warm_up(self, ros_graph, tmp_path):
        env = _env()
        # a numba cache of its own, empty: the warm-up compiles (it is long where the cache is warm too)
        env.update(ROS_DOMAIN_ID=str(DOMAIN), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                   NUMBA_CACHE_DIR=str(tmp_path / "numba_cache"), VILIB_ROS_GC_PAUSES="1")
        client = ros_graph.client
        p = subprocess.Popen([sys.executable, "-m", "vilib_ros.nodes.frontend_node", "--ros-args", "-p", "device:=cpu",
                              "-p", "stereo:=false"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))   # as `node &` in a script
        try:
            # the node exists in the graph from its first line on; its tracker is built after
            assert client.spin_until(lambda: "frontend_node" in client.node.get_node_names(), 120), "never appeared"
            # into the warm-up's compilation, as a user who gives up waiting does (where the node is
            # further on or already up the stop is as clean: the assertions hold at any moment)
            client.spin_for(3.0)
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
            ros_graph.reset()
        assert p.returncode == 0, out
        assert "Traceback" not in out and "Exception ignored" not in out, out
        if "tracker warmed up" in out:
            # the clean stop above holds, but the regression lives in the warm-up: say it was not reached
            pytest.skip("the warm-up had finished before the SIGINT (a fast machine): the stop during it was not "
                        "exercised")


_SWALLOWS_WHILE_STARTING = SWALLOW + r"""
from rclpy.node import Node
from vilib_ros.nodes._common import run_node

WHERE, PHASE = sys.argv[1], sys.argv[3]


class SwallowsTheStop(Node):
    # its stop signal's exception is swallowed (WHERE) while it is built (a long warm-up follows) or
    # in a timer callback while it spins

    def __init__(self):
        super().__init__("swallows_the_stop")
        print("building", file=sys.stderr, flush=True)
        if PHASE == "start":
            swallow(WHERE)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 120:      # a warm-up that does not look at the request
                time.sleep(0.05)
            print("built", file=sys.stderr, flush=True)
        else:
            self.create_timer(0.5, self._once)
            self._fired = False
            print("built", file=sys.stderr, flush=True)

    def _once(self):
        if not self._fired:
            self._fired = True
            swallow(WHERE)

    def close(self):
        print("closed", file=sys.stderr, flush=True)


rc = run_node(SwallowsTheStop)
from vilib_ros.interrupts import redeliveries

print(f"re-delivered {redeliveries()}", file=sys.stderr, flush=True)
sys.exit(rc)
"""

_LIBRARY_CATCHES_THE_STOP = r"""
import os, signal, sys, time
from rclpy.node import Node
from vilib_ros.nodes._common import run_node


class LibraryCatchesTheStop(Node):
    # a library in its construction catches the stop's exception (except BaseException); run()
    # loops without looking at the ROS context

    def __init__(self):
        super().__init__("library_catches_the_stop")
        try:
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
            for _ in range(10000):
                pass
        except BaseException:
            print("caught", file=sys.stderr, flush=True)

    def run(self):
        print("running", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            time.sleep(0.05)
        return 3

    def close(self):
        print("closed", file=sys.stderr, flush=True)


sys.exit(run_node(LibraryCatchesTheStop))
"""


class TestSwallowedStop:
    """Regression: a SIGINT during a node's start-up whose handler ran inside a ``gc.callbacks`` hook
    (the frontend's gc-pause hook) had its KeyboardInterrupt swallowed by Python ("Exception ignored
    in"); the node went on starting and then failed on the dead context. Here the signal is sent from
    inside the swallowing context itself, so it lands there every time: the node must still stop,
    promptly, through the clean exit path."""

    def _run(self, script: str, *argv: str) -> tuple[int, str, float]:
        env = _env()
        env.update(ROS_DOMAIN_ID=str(DOMAIN), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, "-c", script, *argv], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=100)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the stop was lost: still running after 100 s: {exc.stderr}")
        return r.returncode, r.stderr, time.monotonic() - t0

    @pytest.mark.parametrize("where, signame", [("gc_callback", "SIGINT"), ("del", "SIGTERM"),
                                                ("weakref", "SIGINT")])
    def test_while_starting(self, where, signame):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err, wall = self._run(_SWALLOWS_WHILE_STARTING, where, signame, "start")
        assert rc == 0, err
        # swallowed (else the case proves nothing) and raised again
        assert "re-delivered" in err and "re-delivered 0" not in err, err
        assert "built" not in err, f"the node went on starting after the stop ({wall:.0f} s): {err}"
        assert "Traceback" not in err and "Exception ignored" not in err, err

    @pytest.mark.parametrize("where, signame", [("gc_callback", "SIGTERM"), ("del", "SIGINT")])
    def test_while_spinning(self, where, signame):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err, _ = self._run(_SWALLOWS_WHILE_STARTING, where, signame, "spin")
        assert rc == 0, err
        assert "built" in err and "closed" in err, err
        assert "Traceback" not in err and "Exception ignored" not in err, err

    @pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
    def test_caught_by_a_library_while_starting(self, signame):
        """The stop request is recorded and looked at once the node is built: ``run()`` never starts."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err, _ = self._run(_LIBRARY_CATCHES_THE_STOP, signame)
        assert "caught" in err, err
        assert rc == 0 and "running" not in err, err
        assert "closed" in err and "Traceback" not in err, err


class TestConfigurationErrorAtStart:
    """A node that cannot start with its parameters says why in one line and exits 2.

    Regression: a value inside a parameter's declared range that the node still cannot use (a
    1024 px detector cell in a 752 px image; a shortest keyframe interval above the longest)
    ended the node with a Python traceback, exit 1, the reason in its last line. The calibration
    files are the generated sequence's (752x480): the tests run where the real EuRoC frames are
    absent too."""

    def _start(self, node: str, *params: str) -> tuple[int, str]:
        env = _env()
        env.update(ROS_DOMAIN_ID=str(DOMAIN), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        argv = [sys.executable, "-m", f"vilib_ros.nodes.{node}", "--ros-args"]
        for p in params:
            argv += ["-p", p]
        r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        return r.returncode, r.stderr

    def test_frontend_cell_larger_than_the_image(self, generated_sequence):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err = self._start("frontend_node", f"camera_yaml:={generated_sequence / 'mav0' / 'cam0' / 'sensor.yaml'}",
                              "device:=cpu", "stereo:=false", "detector.cell_width:=1024")
        assert rc == 2, err
        assert "FrontendNode: cannot start: image 752x480 is smaller than one cell (1024x32)" in err, err
        assert "Traceback" not in err, err

    def test_frontend_stereo_with_a_left_camera_size_alone(self):
        """A stereo frontend given a new ``image_width`` but not ``right.image_width`` names both (the
        node start sweep: it said the library's ``camera_right must have the same size as camera``,
        names the node's parameters do not have)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err = self._start("frontend_node", "device:=cpu", "stereo:=true", "image_width:=640")
        assert rc == 2, err
        assert ("FrontendNode: cannot start: right.image_width x right.image_height (752x480) differ from "
                "image_width x image_height (640x480)") in err, err
        assert "set right.* too, or stereo:=false" in err and "Traceback" not in err, err

    def test_frontend_cuda_requested_where_it_cannot_run(self, generated_sequence):
        """Regression (bench/node_start_sweep.py): ``device:=cuda`` on a machine without a usable CUDA
        device (no CuPy, no GPU) ended the frontend node with a traceback of CudaUnavailable."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        from vilib_ros._cuda import cuda_available

        if cuda_available():
            pytest.skip("a CUDA device is usable here: device:=cuda starts")
        rc, err = self._start("frontend_node", f"camera_yaml:={generated_sequence / 'mav0' / 'cam0' / 'sensor.yaml'}",
                              "device:=cuda", "stereo:=false")
        assert rc == 2, err
        assert "FrontendNode: cannot start: device='cuda' requested but" in err, err
        assert "Traceback" not in err, err

    def test_backend_keyframe_intervals(self, generated_sequence):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        rc, err = self._start("backend_node", f"camera_yaml:={generated_sequence / 'mav0' / 'cam0' / 'sensor.yaml'}",
                              f"imu_yaml:={generated_sequence / 'mav0' / 'imu0' / 'sensor.yaml'}", "kf_min_interval_s:=5.0")
        assert rc == 2, err
        assert "cannot start: need 0 < kf_min_interval_s <= kf_max_interval_s" in err, err
        assert "Traceback" not in err, err

    def test_backend_stereo_mode_without_the_right_camera(self, generated_sequence):
        """mode:=stereo without stereo:=true names the parameter to set (bench/node_start_sweep.py: it said
        the library's ``mode='stereo' needs cam1``, a name the node's parameters do not have)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        rc, err = self._start("backend_node", f"camera_yaml:={generated_sequence / 'mav0' / 'cam0' / 'sensor.yaml'}",
                              "mode:=stereo")
        assert rc == 2, err
        assert "BackendNode: cannot start: mode:=stereo needs stereo:=true" in err, err
        assert "Traceback" not in err, err

    @pytest.mark.parametrize("content, says", [
        ("garbage: [\n", "cannot read the IMU noise (while parsing a flow node)"),
        (None, "not an IMU's sensor.yaml"),                           # a camera's sensor.yaml
        ("gyr_n: 1.0e-4\nacc_n: abc\n", "could not convert string to float")])
    def test_backend_imu_yaml_that_is_not_one(self, generated_sequence, tmp_path, content, says):
        """Regression: an imu_yaml that did not parse ended the backend node with a YAML traceback; a
        camera's sensor.yaml given as imu_yaml started silently with EuRoC's IMU noise."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        pytest.importorskip("gtsam", reason="gtsam (backend extra) not installed")
        path = generated_sequence / "mav0" / "cam0" / "sensor.yaml"
        if content is not None:
            path = tmp_path / "imu.yaml"
            path.write_text(content)
        rc, err = self._start("backend_node", f"imu_yaml:={path}")
        assert rc == 2, err
        assert f"BackendNode: cannot start: imu_yaml {path}: " in err and says in err, err
        assert "Traceback" not in err, err

    @pytest.mark.parametrize("type_name, says", [
        ("foo_msgs/msg/Bar", "'foo_msgs/msg/Bar': foo_msgs.msg does not import here"),
        ("std_msgs/msg/NoSuch", "'std_msgs/msg/NoSuch': std_msgs.msg has no message 'NoSuch'"),
        ("std_msgs//Bool", "must look like package/msg/Type")])
    def test_recorder_topic_type_that_does_not_exist(self, tmp_path, type_name, says):
        """Regression: a recorder topic whose package is not installed or whose type does not exist
        ended the node with a ModuleNotFoundError / AttributeError traceback (and an empty output file)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        out = tmp_path / "rec.jsonl"
        rc, err = self._start("recorder_node", f"topics:=['x:{type_name}']", f"output:={out}")
        assert rc == 2, err
        assert "RecorderNode: cannot start: " in err and says in err, err
        assert "cannot start:" in err and "Traceback" not in err, err
        assert not out.exists()

    def test_the_runner_names_the_reason(self, ros_graph, generated_sequence, tmp_path):
        """``vilib-ros run`` reports a node that exited during start-up with the reason from its
        log, not only its exit code."""
        from vilib_ros.pipeline import _death

        c = ros_graph.start("frontend_node", params={
            "camera_yaml": str(generated_sequence / "mav0" / "cam0" / "sensor.yaml"), "device": "cpu", "stereo": False,
            "detector.border": 256}, log=tmp_path / "frontend_node.log")
        try:
            assert wait_until(lambda: c.poll() is not None, 120, step=0.2), c.tail()
        finally:
            ros_graph.reset()
        assert _death(c) == ("frontend_node (rc 2): image 752x480 is smaller than one cell (32x32) plus the border "
                             "(256 px each side)"), c.tail()


_RECORDER_STOPPED_BEFORE_ITS_CALLBACKS = r"""
import sys
import rclpy
from rclpy.duration import Duration
from std_msgs.msg import Bool
from vilib_ros.nodes._common import reliable_qos
from vilib_ros.nodes.recorder_node import RecorderNode

rclpy.init(args=["--ros-args", "-p", f"output:={sys.argv[1]}", "-p", "topics:=['flag:std_msgs/msg/Bool']"])
rec = RecorderNode()
pub_node = rclpy.create_node("flag_publisher")
pub = pub_node.create_publisher(Bool, "flag", reliable_qos(10))
t = rclpy.clock.Clock()
end = t.now() + Duration(seconds=60)
while pub.get_subscription_count() < 1 and t.now() < end:
    rclpy.spin_once(pub_node, timeout_sec=0.1)
for k in range(5):
    pub.publish(Bool(data=bool(k % 2)))
print("acked" if pub.wait_for_all_acked(Duration(seconds=30)) else "not acked", flush=True)
rec.close()                     # never spun: the five messages wait in its subscription
rclpy.try_shutdown()
"""


class TestRecorderStop:
    def test_messages_received_before_the_stop_are_written(self, tmp_path):
        """Regression: a recorder stopped while messages it had received still waited for its
        executor (the run stops it right after the backend's last odometry) lost them."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        env = _env()
        env.update(ROS_DOMAIN_ID=str(DOMAIN), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        out = tmp_path / "rec.jsonl"
        r = subprocess.run([sys.executable, "-c", _RECORDER_STOPPED_BEFORE_ITS_CALLBACKS, str(out)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.strip() == "acked", (r.stdout, r.stderr)
        lines = [json.loads(ln) for ln in out.read_text().splitlines()]
        assert [d["data"] for d in lines] == [False, True, False, True, False], lines
