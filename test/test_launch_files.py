"""Static checks of launch/*.launch.py, config/euroc.yaml and config/vio.rviz.

The launch files run for real in test_launch_run.py (executables found, arguments, calibration,
clean shutdown) and test_launch_install.py (colcon's and pip's install layouts). What a run does
not show is checked here: each vilib_ros node a launch file starts is named as its section of
config/euroc.yaml (a different name would leave the file's parameters unapplied, silently), the
files a launch file names exist (vio.rviz: rviz2 is not run in the tests), every node section
of config/euroc.yaml only holds parameters that node declares (read from the node module's
parameter table, without starting ROS), with the declared type, and inside the declared range /
choices.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((REPO / "launch").glob("*.launch.py"))
NODE_MODULES = {"frontend_node", "backend_node", "player_node", "recorder_node"}


def launch_nodes(path: Path) -> list[dict]:
    """Keyword constants of every ``Node(...)`` call in a launch file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Node":
            kw = {k.arg: k.value for k in node.keywords}
            out.append({k: (v.value if isinstance(v, ast.Constant) else v) for k, v in kw.items()})
    return out


def string_constants(path: Path) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def load_params_yaml() -> dict:
    import yaml

    return yaml.safe_load((REPO / "config" / "euroc.yaml").read_text())


def declared(node_name: str):
    pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
    import importlib

    mod = importlib.import_module(f"vilib_ros.nodes.{node_name}")
    return {s.name: s for s in mod.parameter_table()}


class TestLaunchFiles:
    @pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
    def test_node_names_are_config_sections(self, path):
        sections = set(load_params_yaml())
        for n in launch_nodes(path):
            if n.get("package") != "vilib_ros":
                continue
            assert n.get("name") == n.get("executable"), f"{path.name}: {n.get('executable')} runs as {n.get('name')}"
            assert n.get("name") in sections, f"{path.name}: no section {n.get('name')} in config/euroc.yaml"

    @pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
    def test_named_files_exist(self, path):
        for s in string_constants(path):
            if re.search(r"\.(yaml|rviz|launch\.py)$", s):
                folder = "launch" if s.endswith(".launch.py") else "config"
                assert (REPO / folder / s).is_file(), f"{path.name} names {s} which is not in {folder}/"

    def test_euroc_launch_has_rviz_with_config(self):
        nodes = launch_nodes(REPO / "launch" / "euroc.launch.py")
        assert any(n.get("package") == "rviz2" and n.get("executable") == "rviz2" for n in nodes)
        assert "vio.rviz" in string_constants(REPO / "launch" / "euroc.launch.py")
        assert "player_node" in [n.get("executable") for n in nodes]


class TestParameterFile:
    def test_sections_are_nodes(self):
        d = load_params_yaml()
        assert set(d) <= NODE_MODULES
        assert {"frontend_node", "backend_node", "player_node"} <= set(d)
        for section in d.values():
            assert set(section) == {"ros__parameters"}

    @pytest.mark.parametrize("node_name", ["frontend_node", "backend_node", "player_node"])
    def test_every_key_is_declared_with_type_and_range(self, node_name):
        specs = declared(node_name)
        params = load_params_yaml()[node_name]["ros__parameters"]
        unknown = sorted(set(params) - set(specs))
        assert not unknown, f"{node_name}: keys not declared by the node: {unknown}"
        for key, value in params.items():
            spec = specs[key]
            t = spec.ros_type_name()
            py = {"bool": bool, "integer": int, "double": float, "string": str}
            if t in py:
                assert type(value) is py[t], f"{node_name}.{key}: {value!r} is not a {t} (ROS rejects it)"
            else:
                assert isinstance(value, list), f"{node_name}.{key} must be a list"
            assert spec.check(value) is None, spec.check(value)

    def test_frontend_algorithm_parameters_present(self):
        params = load_params_yaml()["frontend_node"]["ros__parameters"]
        specs = declared("frontend_node")
        for key in ("detector.threshold", "detector.arc_length", "detector.score", "detector.levels",
                    "detector.cell_width", "detector.nms_radius", "tracker.mode", "tracker.levels",
                    "min_track_fraction", "device"):
            assert key in specs, key
            assert key in params, key
        # names are the dataclass fields
        from vilib_ros.frontend.config import DetectorConfig, TrackerConfig
        import dataclasses

        for f in dataclasses.fields(DetectorConfig):
            assert f"detector.{f.name}" in specs
        for f in dataclasses.fields(TrackerConfig):
            if isinstance(getattr(TrackerConfig(), f.name), (bool, int, float, str, tuple)):
                assert f"tracker.{f.name}" in specs

    def test_ranges_and_descriptions(self):
        specs = declared("frontend_node")
        assert specs["detector.arc_length"].range[:2] == (9, 12)
        assert specs["detector.nms_radius"].range[:2] == (1, 4)
        assert specs["detector.score"].choices == ("sad_circle", "sad_arc", "max_threshold")
        assert specs["device"].read_only and specs["device"].choices == ("auto", "cuda", "cpu")
        for s in specs.values():
            assert s.description, s.name

    def test_descriptor_carries_range(self):
        pytest.importorskip("rcl_interfaces.msg")
        from vilib_ros.nodes.params import descriptor_for

        specs = declared("frontend_node")
        d = descriptor_for(specs["detector.arc_length"])
        assert (d.integer_range[0].from_value, d.integer_range[0].to_value) == (9, 12)
        d = descriptor_for(specs["detector.threshold"])
        assert d.floating_point_range[0].from_value == 1.0
        assert descriptor_for(specs["device"]).read_only


class TestRviz:
    def test_displays_and_topics(self):
        import yaml

        d = yaml.safe_load((REPO / "config" / "vio.rviz").read_text())
        displays = d["Visualization Manager"]["Displays"]
        by_class = {x["Class"]: x for x in displays}
        assert by_class["rviz_default_plugins/Image"]["Topic"]["Value"] == "/tracks_image"
        assert by_class["rviz_default_plugins/Path"]["Topic"]["Value"] == "/path"
        assert by_class["rviz_default_plugins/Odometry"]["Topic"]["Value"] == "/odometry"
        assert by_class["rviz_default_plugins/MarkerArray"]["Topic"]["Value"] == "/landmarks"
        # REP 105: the estimate lives in odom; the tf tree odom -> base_link -> cam0/cam1/imu0 is shown
        assert d["Visualization Manager"]["Global Options"]["Fixed Frame"] == "odom"
        tree = by_class["rviz_default_plugins/TF"]["Tree"]
        assert set(tree["odom"]["base_link"]) == {"cam0", "cam1", "imu0"}
        # the image is published best effort: the display must not ask for reliable
        assert by_class["rviz_default_plugins/Image"]["Topic"]["Reliability Policy"] == "Best Effort"


class TestNodeDocumentation:
    @pytest.mark.parametrize("node_name", sorted(NODE_MODULES))
    def test_docstring_documents_interface(self, node_name):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        import importlib

        mod = importlib.import_module(f"vilib_ros.nodes.{node_name}")
        doc = mod.__doc__
        for section in ("Subscribed", "Published", "Parameters"):
            assert f"\n{section}\n" in doc, f"{node_name}: no {section} section"
        if node_name == "frontend_node":
            own = mod.node_specs(True)        # node-level parameters (algorithm ones: printed table)
        elif node_name == "backend_node":
            own = mod.node_specs()
        else:
            own = mod.parameter_table()
        # in the Parameters section, as a whole name (a short name such as ``rate`` or ``device`` is also
        # a word of the prose above it: found anywhere, a parameter missing from the section passed)
        params_doc = doc[doc.index("\nParameters\n"):]
        for s in own:
            documented = re.search(rf"(?<![\w.]){re.escape(s.name)}(?![\w])", params_doc) is not None or (
                s.name.startswith("right.") and "right.*" in params_doc)
            assert documented, f"{node_name}: parameter {s.name} is not documented in its Parameters section"
        assert callable(mod.main)
        src = Path(mod.__file__).read_text()
        assert 'if __name__ == "__main__":\n    main()' in src


class TestOneSourceOfTruth:
    """Issue 16: each parameter's range, choices and help live once (vilib_ros.nodes.params
    FRONTEND_PARAMS / BACKEND_PARAMS); everything else is derived from them or checked here.
    Before, detector.threshold's range was written three times and disagreed."""

    @staticmethod
    def _norm(text: str) -> str:
        return " ".join(text.split())

    @pytest.mark.parametrize("node_name,fn", [("frontend_node", "frontend_specs"), ("backend_node", "backend_specs")])
    def test_docstring_table_is_the_code_table(self, node_name, fn):
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        import importlib

        from vilib_ros.nodes.params import format_table

        mod = importlib.import_module(f"vilib_ros.nodes.{node_name}")
        table = format_table(getattr(mod, fn)())
        assert self._norm(table) in self._norm(mod.__doc__), \
            f"{node_name}'s docstring table differs from --print-parameters; paste:\n{table}"

    def test_every_field_has_one_entry(self):
        import dataclasses

        from vilib_ros.backend.config import BackendConfig
        from vilib_ros.frontend import FrontendConfig
        from vilib_ros.nodes.params import BACKEND_PARAMS, FRONTEND_PARAMS

        def names(obj, prefix=""):
            out = set()
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                out |= names(v, prefix + f.name + ".") if dataclasses.is_dataclass(v) else {prefix + f.name}
            return out

        assert names(FrontendConfig()) == set(FRONTEND_PARAMS)
        assert names(BackendConfig()) == set(BACKEND_PARAMS)

    @pytest.mark.parametrize("which", ["frontend", "backend"])
    def test_validate_accepts_the_whole_declared_range(self, which):
        """Every value ROS lets through (range ends, choices) must pass the dataclass's validate():
        otherwise a parameter set succeeds in ROS and then fails in the node."""
        import dataclasses

        from vilib_ros.nodes.params import BACKEND_PARAMS, FRONTEND_PARAMS, build_dataclass

        if which == "frontend":
            from vilib_ros.frontend import FrontendConfig as cls
            table = FRONTEND_PARAMS
        else:
            from vilib_ros.backend.config import BackendConfig as cls
            table = BACKEND_PARAMS
        base = cls()
        # values that only make sense together are checked with their partner at a valid value
        partners = {"kf_max_interval_s": {"window_s": 600.0, "kf_min_interval_s": 0.001},
                    "kf_min_interval_s": {"kf_max_interval_s": 10.0, "window_s": 600.0},
                    "tracker.cpu_backend": {"tracker.mode": "translation", "tracker.template": "previous",
                                          "tracker.warp": "translation"},
                    "window_s": {"kf_max_interval_s": 0.05, "kf_min_interval_s": 0.01},
                    "detector.cell_height": {"detector.levels": 1}, "detector.levels": {"detector.cell_height": 64},
                    "tracker.levels": {"tracker.patch_sizes": [8] * 8},
                    "fb_levels": {"tracker.levels": 8, "tracker.patch_sizes": [8] * 8}}
        bad = []
        for name, meta in table.items():
            values = list(meta.choices or ())
            if meta.range is not None:
                lo, hi = meta.range[0], meta.range[1]
                values += [lo, hi]
            for v in values:
                cfg = build_dataclass(cls, {name: v, **partners.get(name, {})})
                try:
                    cfg.validate()
                except ValueError as exc:
                    bad.append(f"{name} = {v!r}: {exc}")
        assert not bad, "inside the declared range/choices but refused by validate():\n" + "\n".join(bad)
        assert dataclasses.is_dataclass(base)
