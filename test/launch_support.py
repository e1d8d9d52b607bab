"""Running the launch files for real in tests (imported by the launch test modules).

* :func:`launch_missing` - why the launch tests cannot run here (``launch`` / ``launch_ros`` are not
  on PyPI: ``tools/install_launch.py`` installs the vendored Jazzy sources from ``../shared/vendor``);
* :func:`colcon_install` - the package installed as colcon's ament_python build does it (the same
  ``setup.py`` command line, ``setup.cfg``'s ``install_scripts``): ``share/vilib_ros/{launch,config,
  package.xml}``, the ament index entry and ``lib/vilib_ros/<executables>``, into a folder;
* :class:`LaunchRun` - one launch file run by ``test/helpers/run_launch.py`` (a ``LaunchService``
  as ``ros2 launch`` builds it) in its own process, its output in a file, on this machine's DDS only.
  Where the launch's output says which processes it started and how each one ended.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENDOR = REPO.parent / "shared" / "vendor"
RUN_LAUNCH = REPO / "test" / "helpers" / "run_launch.py"

_STARTED = re.compile(r"\[INFO\] \[([\w.-]+)\]: process started with pid \[(\d+)\]")
_CLEAN = re.compile(r"\[INFO\] \[([\w.-]+)\]: process has finished cleanly \[pid (\d+)\]")
_DIED = re.compile(r"\[ERROR\] \[([\w.-]+)\]: process has died \[pid (\d+), exit code (-?\d+)")


def launch_missing() -> str | None:
    """None where ``launch``, ``launch_ros`` and ``composition_interfaces`` import; else why not."""
    try:
        import composition_interfaces.srv  # noqa: F401
        import launch  # noqa: F401
        import launch_ros.actions  # noqa: F401
    except ImportError as exc:
        if not VENDOR.is_dir():
            return (f"launch / launch_ros are not installed ({exc}) and {VENDOR} is absent: their vendored sources "
                    "are not here (they are not on PyPI)")
        return (f"launch / launch_ros are not installed ({exc}): run `python tools/install_launch.py` "
                "(.ci/run does)")
    return None


def colcon_install(prefix: Path, build: Path, rebuild: bool = False) -> Path:
    """Install the package into ``prefix`` with the command colcon's ament_python build runs
    (colcon_core.task.python.build: ``setup.py egg_info build install --record ...
    --single-version-externally-managed --install-scripts <setup.cfg's> install_data``, with
    ``--force`` on a rebuild). The Python copy it installs is not used: the launch env puts this
    checkout first on PYTHONPATH."""
    build.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "setup.py", "egg_info", "--egg-base", str(build),
           "build", "--build-base", str(build / "build"),
           "install", "--prefix", str(prefix), "--record", str(build / "install.log"),
           "--single-version-externally-managed", "--install-scripts", str(prefix / "lib" / "vilib_ros"),
           "install_data"] + (["--force"] if rebuild else [])
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"colcon-style install failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return prefix


def launch_env(prefix: Path, domain_id: int, log_dir: Path) -> dict:
    """The environment of a launch: ``prefix`` first on AMENT_PREFIX_PATH (then this Python's, which
    holds launch, launch_ros and the message packages), this checkout first on PYTHONPATH, this
    Python first on PATH (colcon's node scripts run ``python3``), localhost-only DDS on ``domain_id``."""
    from vilib_ros.nodes.processes import ros_env

    env = ros_env(domain_id)
    env["AMENT_PREFIX_PATH"] = os.pathsep.join([str(prefix), sys.prefix])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["ROS_LOG_DIR"] = str(log_dir)
    env["RCUTILS_COLORIZED_OUTPUT"] = "0"
    return env


class LaunchRun:
    """``run_launch.py <launch_file> <args>`` in its own process group, output in ``log_path``."""

    def __init__(self, launch_file: Path, args: dict, env: dict, log_path: Path):
        from vilib_ros.nodes.processes import popen

        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        argv = [sys.executable, str(RUN_LAUNCH), str(launch_file)] + [f"{k}:={v}" for k, v in args.items()]
        self.proc = popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          start_new_session=True)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for(self, predicate, timeout: float, what: str) -> str:
        """Wait until ``predicate(output)`` holds; fails (with the output's tail) on timeout or when
        the launch ends first. Returns the output."""
        end = time.monotonic() + timeout
        while True:
            out = self.output()
            if predicate(out):
                return out
            if self.proc.poll() is not None:
                raise AssertionError(f"the launch ended (rc {self.proc.returncode}) before {what}:\n{self.tail()}")
            if time.monotonic() > end:
                raise AssertionError(f"no {what} within {timeout:.0f} s:\n{self.tail()}")
            time.sleep(0.2)

    def wait_for_text(self, text: str, timeout: float) -> str:
        return self.wait_for(lambda out: text in out, timeout, repr(text))

    def started(self) -> dict[str, int]:
        """{process name (e.g. ``frontend_node-1``): pid} of every process the launch started."""
        return {name: int(pid) for name, pid in _STARTED.findall(self.output())}

    def ended(self) -> dict[str, int]:
        """{process name: exit code} of every process the launch saw end (0 = "finished cleanly")."""
        out = self.output()
        codes = {name: 0 for name, _ in _CLEAN.findall(out)}
        codes.update({name: int(rc) for name, _, rc in _DIED.findall(out)})
        return codes

    def interrupt(self, timeout: float = 60.0) -> int:
        """SIGINT to the launch process (Ctrl-C), then wait for it to end; its return code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launch did not end within {timeout:.0f} s of SIGINT:\n{self.tail()}") from None
        finally:
            self._log.close()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is not None:
                self._log.close()

    def kill(self) -> None:
        """SIGKILL the launch's process group and every process it started (test clean-up)."""
        pids = list(self.started().values())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(10)
        if not self._log.closed:
            self._log.close()

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-n:])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
