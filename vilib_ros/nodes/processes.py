"""Start node processes the way the launch files do, without ``launch``.

Used by ``vilib-ros run`` and the ROS tests: each node is ``python -m vilib_ros.nodes.<node>
--ros-args ...`` in its own process group, output to a log file, stopped with SIGINT, then
SIGTERM, then SIGKILL. No rclpy here.

A node imports the vilib_ros package its starter imported: :func:`ros_env` puts that package's
folder first on ``PYTHONPATH``, but ``python -m`` puts the working folder before it, so a node
started in a checkout while the starter runs the installed package would import the checkout (and
compile its own numba cache). ``NodeProcess(cwd=...)`` starts it elsewhere; ``vilib-ros run``
starts its nodes in the run's output folder.

A node never outlives the process that started it: on Linux each child asks the kernel for
SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, set between fork and exec), so even a
parent killed with SIGKILL (a test run on a timeout, a crashed ``vilib-ros run``) leaves no
node running in its ROS domain. The kernel sends it when the *thread* that started the child
exits: start nodes from the main thread (or a thread that lives as long as they should).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1   # linux/prctl.h


def _die_with_parent(parent_pid: int):
    """A ``preexec_fn``: SIGTERM this child when its parent dies (Linux; elsewhere a no-op).

    Runs in the forked child before exec; if the parent is already gone by then (the signal
    would never come), the child exits at once."""
    def preexec() -> None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec if sys.platform.startswith("linux") else None


def popen(argv: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` of a child that dies with this process (for tests and helpers that
    start ``vilib-ros run`` or other long-running commands)."""
    return subprocess.Popen(argv, preexec_fn=_die_with_parent(os.getpid()), **kwargs)


def package_root() -> str:
    """The folder that holds the vilib_ros package (put on the children's PYTHONPATH)."""
    return str(Path(__file__).resolve().parents[2])


#: Fast DDS profile with a shared-memory segment that holds stereo pairs (see the file's comment)
FASTDDS_PROFILE = Path(__file__).resolve().with_name("fastdds_profile.xml")
_FASTDDS_CHOICES = ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE", "FASTDDS_BUILTIN_TRANSPORTS")


def with_fastdds_profile(env: dict) -> dict:
    """``env`` with FASTRTPS_DEFAULT_PROFILES_FILE set to :data:`FASTDDS_PROFILE`, unless the user
    chose a Fast DDS profile or transports, or another RMW implementation. Returns ``env``."""
    rmw = env.get("RMW_IMPLEMENTATION", "")
    if (rmw in ("", "rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp") and not any(env.get(k) for k in _FASTDDS_CHOICES)
            and FASTDDS_PROFILE.is_file()):
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(FASTDDS_PROFILE)
    return env


def ros_env(domain_id: int, base: dict | None = None) -> dict:
    """Environment for a node process: localhost-only discovery on ``domain_id``, the project's
    Fast DDS profile (:func:`with_fastdds_profile`)."""
    env = with_fastdds_profile(dict(os.environ if base is None else base))
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["ROS_DOMAIN_ID"] = str(int(domain_id))
    env.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    env["PYTHONUNBUFFERED"] = "1"
    root = package_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _ros_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_ros_value(x) if not isinstance(x, str) else f"'{x}'" for x in v) + "]"
    return str(v)


def node_argv(node: str, params: dict | None = None, remaps: dict | None = None,
              params_file: str | Path | None = None, name: str | None = None) -> list[str]:
    """Command line of a node: ``python -m vilib_ros.nodes.<node> --ros-args ...``."""
    argv = [sys.executable, "-m", f"vilib_ros.nodes.{node}", "--ros-args"]
    if name:
        argv += ["-r", f"__node:={name}"]
    if params_file:
        argv += ["--params-file", str(params_file)]
    for k, v in (params or {}).items():
        argv += ["-p", f"{k}:={_ros_value(v)}"]
    for a, b in (remaps or {}).items():
        argv += ["-r", f"{a}:={b}"]
    return argv


class NodeProcess:
    """One node in its own process (and process group), its output in ``log_path``; ``cwd``: the
    working folder (default this process's: see the module's note on which package a node imports)."""

    def __init__(self, name: str, argv: list[str], env: dict, log_path: str | Path, cwd: str | Path | None = None):
        self.name = name
        self.argv = argv
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent(os.getpid()))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self):
        return self.proc.poll()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None):
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL (a crash, as far as the rest of the graph can tell)."""
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL; returns the exit code."""
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        if not self._log.closed:
            self._log.close()
        return self.proc.poll()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, n: int = 25) -> str:
        return "\n".join(self.output().splitlines()[-n:])


class GraphClient:
    """An rclpy node in its own context on ``domain_id`` (for tests and ``vilib-ros run``):
    discovery checks, spinning until a condition holds. rclpy is imported here only."""

    def __init__(self, domain_id: int, name: str = "vilib_ros_client"):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        self.context = Context()
        rclpy.init(context=self.context, domain_id=int(domain_id), signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def spin_for(self, seconds: float) -> None:
        import time

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.05, max(0.0, end - time.monotonic())))

    def spin_until(self, predicate, timeout: float, step: float = 0.05) -> bool:
        import time

        end = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() > end:
                return False
            self.executor.spin_once(timeout_sec=step)

    def wait_for_subscribers(self, need: dict, timeout: float, processes=()) -> bool:
        """True once every topic in ``need`` has at least that many subscribers; False on
        timeout or as soon as one of ``processes`` has exited."""
        def ok():
            if any(p.poll() is not None for p in processes):
                raise RuntimeError("a node exited while waiting for discovery: " + ", ".join(
                    f"{p.name} (rc {p.poll()})" for p in processes if p.poll() is not None))
            return all(self.node.count_subscribers(t) >= n for t, n in need.items())

        return self.spin_until(ok, timeout, 0.1)

    def close(self) -> None:
        import rclpy

        try:
            self.executor.shutdown(timeout_sec=1.0)
            self.node.destroy_node()
        finally:
            rclpy.try_shutdown(context=self.context)
