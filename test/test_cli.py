"""``vilib-ros``: which modules a command loads, how user errors read, what the console shows.

Each check runs the command in a fresh interpreter (``python -m vilib_ros ...``) and reads
``sys.modules`` / stderr there, so nothing imported by the test process itself counts.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "vilib_ros", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


LOADED = """
import sys
from vilib_ros.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
mods = sorted(m for m in sys.modules if m.split('.')[0] in ('vilib_ros', 'cv2', 'rclpy', 'gtsam', 'evo', 'matplotlib'))
print('MODULES', ' '.join(mods))
"""


def _loaded(argv: list[str]) -> set[str]:
    r = _python(LOADED.format(argv=argv))
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("MODULES")]
    assert line, r.stderr
    return set(line[0].split()[1:])


class TestLazyCommands:
    def test_help_loads_no_command_module(self):
        """Regression: ``build_parser`` imported all seven command modules (and cv2) although the
        docstring said they load only when their command runs."""
        mods = _loaded(["--help"])
        assert "vilib_ros.cli" in mods
        assert not mods & {"cv2", "vilib_ros.pipeline", "vilib_ros.evaluation", "vilib_ros.benchmark",
                           "vilib_ros.synthetic.cli", "rclpy", "gtsam", "matplotlib"}, mods

    def test_a_command_loads_only_its_module(self):
        mods = _loaded(["eval", "--help"])
        assert "vilib_ros.evaluation" in mods
        assert not mods & {"vilib_ros.pipeline", "vilib_ros.benchmark", "vilib_ros.synthetic.cli", "rclpy"}, mods

    def test_the_laboratory_is_not_installed(self):
        """The benchmarks of the checkout's ``bench/`` are no ``vilib-ros`` command and no module of the package."""
        import vilib_ros
        from vilib_ros.cli import COMMANDS

        assert not [c for c in COMMANDS if c.startswith("bench-")], COMMANDS
        assert not (Path(vilib_ros.__file__).parent / "bench").exists()


class TestUserErrors:
    @pytest.mark.parametrize("argv,needle", [
        (["run", "/no/such/dataset"], "dataset not found: /no/such/dataset"),
        (["run", "--duration", "-1"], "duration_s"),
        (["run", "--domain-id", "250"], "--domain-id must be in 0..232"),
        (["run", "--calibration", "/tmp/x/camchain.yaml"], "--calibration applies to a DATASET"),
        (["run", "--offline", "--image-topic", "/cam"], "--image-topic applies to a DATASET"),
        (["run", "/tmp/x/none.bag", "--calibration", "/tmp/x/camchain.yaml"], "dataset not found"),
        (["eval", "/no/such/est.txt", "/no/such/gt.txt"], "no such trajectory file"),
        (["generate", "/tmp/x", "--duration", "0"], "duration"),
        (["bench", "--device", "cpu", "--frames", "5", "--data", "/tmp/x"], "--frames must be >= 100"),
    ])
    def test_message_and_exit_2_without_traceback(self, argv, needle, tmp_path):
        """Regression: every user error printed a Python traceback before its message."""
        cmd = argv[0]
        # in an empty folder: not next to a vilib_ros_output/ of the user's own runs
        (tmp_path / "cwd").mkdir()
        r = _cli(*[a.replace("/tmp/x", str(tmp_path / "x")) for a in argv], cwd=tmp_path / "cwd")
        assert r.returncode == 2, r.stderr
        assert f"vilib-ros {cmd}: error: " in r.stderr and needle in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not (tmp_path / "x").exists()

    def test_bad_duration_beside_an_earlier_generated_sequence(self, tmp_path):
        """Regression: with the default run's sequence in ./vilib_ros_output (the README's first
        command), `vilib-ros run --duration -1` replayed that sequence instead of saying the
        duration is wrong (and `--duration 30` replayed the 10 s one)."""
        import yaml

        from vilib_ros.pipeline import _config_dict
        from vilib_ros.synthetic import SequenceConfig

        ds = tmp_path / "vilib_ros_output" / "generated" / "synthetic_10s"
        (ds / "mav0").mkdir(parents=True)
        (ds / "synthetic.yaml").write_text(yaml.safe_dump(_config_dict(SequenceConfig())))
        r = _cli("run", "--duration", "-1", cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert "vilib-ros run: error: " in r.stderr and "duration_s" in r.stderr, r.stderr

    def test_verbose_adds_the_traceback(self):
        r = _cli("-v", "run", "/no/such/dataset")
        assert r.returncode == 2
        assert "Traceback" in r.stderr and "vilib-ros run: error: dataset not found" in r.stderr

    def test_run_creates_no_output_folder_for_a_dataset_it_cannot_open(self, tmp_path):
        """Guards: the output folder created before the dataset is opened."""
        (tmp_path / "empty").mkdir()
        r = _cli("run", str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
        assert r.returncode == 2 and "not an EuRoC ASL folder" in r.stderr
        assert not (tmp_path / "out").exists()

    @pytest.mark.parametrize("offline", [False, True])
    def test_run_device_cuda_where_there_is_none_says_so_first(self, tmp_path, offline):
        """``vilib-ros run --device cuda`` without a usable CUDA device refuses at once: nothing
        started, no output folder (guards: the dataset read and three nodes started before the
        frontend node, or the offline runner's first frame, failed on it)."""
        from vilib_ros._cuda import cuda_available

        if cuda_available():
            pytest.skip("CUDA is usable here")
        r = _cli("run", *(["--offline"] if offline else []), "/no/such/dataset", "--device", "cuda",
                 "--out", str(tmp_path / "out"))
        assert r.returncode == 2, r.stderr
        assert "vilib-ros run: error: --device cuda: device='cuda' requested but" in r.stderr, r.stderr
        assert not (tmp_path / "out").exists()


class TestLogging:
    def test_only_the_projects_loggers_are_configured(self):
        """Regression: the CLI set the root logger to INFO, so third-party INFO lines (matplotlib's
        "generated new fontManager") reached the console."""
        r = _python("""
import logging
from vilib_ros.cli import configure_logging
configure_logging(False)
logging.getLogger('matplotlib.font_manager').info('third party info')
logging.getLogger('vilib_ros.datasets').info('our info')
logging.getLogger('vilib_ros.datasets').debug('our debug')
""")
        assert "our info" in r.stderr
        assert "third party info" not in r.stderr and "our debug" not in r.stderr


class TestLaboratory:
    """``python -m bench COMMAND`` from the checkout: the same error conventions as ``vilib-ros``."""

    @pytest.mark.parametrize("argv,needle", [
        (["vio", "--device", "cpu", "--variant", "no_such_key=1"], "not KEY=VALUE with a backend parameter"),
        (["vio", "--device", "cpu", "--variant", "window_s=abc"], "window_s takes a float, got 'abc'"),
        (["vio", "--device", "cpu", "--variant", "mono_solver=foo"], "mono_solver must be 'isam2' or 'schur'"),
    ])
    def test_message_and_exit_2_without_traceback(self, argv, needle, tmp_path):
        r = subprocess.run([sys.executable, "-m", "bench", *argv, "--out", str(tmp_path / "out")], capture_output=True,
                           text=True, timeout=300, cwd=REPO)
        assert r.returncode == 2, r.stderr
        assert f"bench {argv[0]}: error: " in r.stderr and needle in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
