"""Static checks of launch/*.launch.py, config/euroc.yaml and config/vio.rviz.

The launch files run for real in test_launch_run.py (executables found, arguments, calibration,
clean shutdown) and test_launch_install.py (colcon's and pip's install layouts). What a run does
not show is checked here: each vilib_ros node a launch file starts is named as its section of
config/euroc.yaml (a different name would leave the file's parameters unapplied, silently), the
files a launch file names exist (vio.rviz: rviz2 is not run in the tests), every node section
of config/euroc.yaml only holds parameters that node declares (read from the node module's
parameter table, without starting ROS), with the declared type, and inside the declared range /
choices; docs/parameters.md is what the declarations generate, and the configuration fields carry
the parameter metadata the declarations are made from.
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
        """Each node module says what it subscribes, publishes and where its parameters are
        documented: the generated reference (docs/parameters.md, ``--print-parameters``), or a
        Parameters section naming every parameter."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        import importlib

        mod = importlib.import_module(f"vilib_ros.nodes.{node_name}")
        doc = mod.__doc__
        for section in ("Subscribed", "Published", "Parameters"):
            assert f"\n{section}\n" in doc, f"{node_name}: no {section} section"
        params_doc = doc[doc.index("\nParameters\n"):]
        pointer = f"python -m vilib_ros.nodes.{node_name} --print-parameters"
        if not ("docs/parameters.md" in params_doc and pointer in params_doc):
            # as a whole name (a short name such as ``rate`` is also a word of the prose)
            for s in mod.parameter_table():
                assert re.search(rf"(?<![\w.]){re.escape(s.name)}(?![\w])", params_doc), \
                    f"{node_name}: parameter {s.name} is neither in its Parameters section nor does it point at " \
                    f"docs/parameters.md and `{pointer}`"
        assert callable(mod.main)
        src = Path(mod.__file__).read_text()
        assert 'if __name__ == "__main__":\n    main()' in src

    def test_parameters_md_is_generated_from_the_declarations(self):
        """docs/parameters.md is what the nodes' parameter tables generate (names, types, defaults,
        ranges, choices, read-only / live, descriptions)."""
        pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
        import importlib.util

        spec = importlib.util.spec_from_file_location("parameters_doc", REPO / "tools" / "parameters_doc.py")
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        expected = tool.render()
        actual = (REPO / "docs" / "parameters.md").read_text()
        assert actual == expected, f"docs/parameters.md differs from the declarations: run {tool.COMMAND}"
        for node in NODE_MODULES:       # every node, every parameter, in the generated file
            assert f"## {node}\n" in actual
            for s in declared(node).values():
                assert f"| `{s.name}` |" in actual, f"{node}.{s.name}"


def _leaf_fields(obj, prefix=""):
    """(dotted name, dataclass field) of every non-dataclass field of ``obj``."""
    import dataclasses

    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            yield from _leaf_fields(v, prefix + f.name + ".")
        else:
            yield prefix + f.name, f


class TestOneSourceOfTruth:
    """Each algorithm parameter's help, range, choices and liveness are written once, on its
    dataclass field (vilib_ros.params_meta.param); the ROS parameters, --print-parameters and
    docs/parameters.md are derived from them, and validate() agrees with them."""

    @pytest.mark.parametrize("which", ["frontend", "backend"])
    def test_every_field_carries_its_parameter_metadata(self, which):
        from vilib_ros.backend.config import BackendConfig
        from vilib_ros.frontend import FrontendConfig
        from vilib_ros.params_meta import param_meta

        obj = FrontendConfig() if which == "frontend" else BackendConfig()
        for name, f in _leaf_fields(obj):
            meta = param_meta(f)
            assert meta is not None and meta.help.strip(), f"{name}: no param() metadata with a help text"
            assert meta.range is None or meta.choices is None, f"{name}: both a range and choices"

    def test_live_marking_is_declared_and_used(self):
        """The frontend's live fields (FeatureTracker.apply_config keeps the tracker for them) are the
        fields whose metadata says live, and only frontend fields say it."""
        from vilib_ros.backend.config import BackendConfig
        from vilib_ros.frontend.config import FrontendConfig, live_fields
        from vilib_ros.params_meta import param_meta

        live = live_fields(FrontendConfig())
        assert {"detector.threshold", "tracker.max_iterations", "fb_threshold"} <= live
        assert not live & {"detector.levels", "tracker.mode", "stereo", "use_graph"}
        assert not any(param_meta(f).live for _, f in _leaf_fields(BackendConfig()))

    @pytest.mark.parametrize("which", ["frontend", "backend"])
    def test_validate_accepts_the_whole_declared_range(self, which):
        """Every value ROS lets through (range ends, choices) must pass the dataclass's validate():
        otherwise a parameter set succeeds in ROS and then fails in the node."""
        from vilib_ros.nodes.params import build_dataclass, specs_from_dataclass

        if which == "frontend":
            from vilib_ros.frontend import FrontendConfig as cls
        else:
            from vilib_ros.backend.config import BackendConfig as cls
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
        specs = specs_from_dataclass(cls())
        assert len(specs) == len(list(_leaf_fields(cls())))
        for spec in specs:
            values = list(spec.choices or ())
            if spec.range is not None:
                values += [spec.range[0], spec.range[1]]
            for v in values:
                cfg = build_dataclass(cls, {spec.name: v, **partners.get(spec.name, {})})
                try:
                    cfg.validate()
                except ValueError as exc:
                    bad.append(f"{spec.name} = {v!r}: {exc}")
        assert not bad, "inside the declared range/choices but refused by validate():\n" + "\n".join(bad)
