"""Parameter tables for the nodes: one :class:`ParamSpec` per ROS parameter.

A node module exposes ``parameter_table() -> list[ParamSpec]``; :func:`declare_all`
turns the table into ``declare_parameter`` calls with a full
``rcl_interfaces/ParameterDescriptor`` (description, ``IntegerRange`` /
``FloatingPointRange``, allowed values in ``additional_constraints``, ``read_only``).
Tables built from the algorithm dataclasses (:func:`specs_from_dataclass`) use the field
names as parameter names, nested dataclasses as dotted prefixes (``detector.threshold``,
``tracker.mode``), so one name means one thing in the kernel, the dataclass and ROS; their
help, range and choices are the fields' metadata (:mod:`vilib_ros.params_meta`). A table prints
as text (:func:`format_table`, ``--print-parameters``) or Markdown (:func:`markdown_table`,
``docs/parameters.md``).

This module imports rclpy only inside the functions that talk to a node, so the launch
file tests can read the tables without starting ROS.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vilib_ros.camera import CameraModel, euroc_cam0
from vilib_ros.params_meta import ParamMeta, param_meta


@dataclass
class ParamSpec:
    name: str
    default: Any
    description: str
    range: tuple | None = None          # (from, to[, step]); int or float by the default's type
    choices: tuple[str, ...] | None = None
    read_only: bool = False
    type_hint: str | None = None        # 'double_array', 'string_array', ... for empty lists
    live: bool = False                  # applied to the running tracker (a frontend field marked live)

    def ros_type_name(self) -> str:
        v = self.default
        if self.type_hint:
            return self.type_hint
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "integer"
        if isinstance(v, float):
            return "double"
        if isinstance(v, str):
            return "string"
        if isinstance(v, (list, tuple)):
            if all(isinstance(x, bool) for x in v) and v:
                return "bool_array"
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v) and v:
                return "integer_array"
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) and v:
                return "double_array"
            if all(isinstance(x, str) for x in v) and v:
                return "string_array"
        raise TypeError(f"parameter {self.name!r}: cannot map default {v!r} to a ROS parameter type")

    def ros_default(self):
        t = self.ros_type_name()
        v = self.default
        if t == "double_array":
            return [float(x) for x in v]
        if t.endswith("_array"):
            return list(v)
        if t == "double":
            return float(v)
        return v

    def check(self, value) -> str | None:
        """Why ``value`` is not acceptable (None when it is); ranges are checked by rclpy too."""
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got {value!r}"
        if self.range is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
            lo, hi = self.range[0], self.range[1]
            if not (lo <= value <= hi):
                return f"{self.name} must be in [{lo}, {hi}], got {value!r}"
            if len(self.range) > 2 and self.range[2] and isinstance(value, int):
                if (value - lo) % self.range[2]:
                    return f"{self.name} must be {lo} + a multiple of {self.range[2]}, got {value!r}"
        return None


def edge_values(default, range_: tuple | None, choices: tuple | None) -> list:
    """The values a parameter is checked at away from ``default``: the other choices, the flipped
    bool, or both ends of a numeric range (as the default's type); [] where it has none of these
    (the parameter sweeps and the run-time parameter test)."""
    if choices:
        return [c for c in choices if c != default]
    if isinstance(default, bool):
        return [not default]
    if range_ and isinstance(default, (int, float)):
        return [type(default)(range_[0]), type(default)(range_[1])]
    return []


def specs_from_dataclass(obj, prefix: str = "", read_only: Sequence[str] = (),
                         skip: Sequence[str] = ()) -> list[ParamSpec]:
    """One ParamSpec per (nested) dataclass field of the instance ``obj``, in field order.

    Help, range, choices and liveness come from the field's metadata
    (:func:`vilib_ros.params_meta.param`); a field without it is declared without a range and says
    so in its description (and test_launch_files fails until the field has it). Fields whose
    default is None or not a ROS-representable value are skipped.
    """
    out: list[ParamSpec] = []
    for f in dataclasses.fields(obj):
        if f.name.startswith("_"):
            continue
        name = prefix + f.name
        if name in skip:
            continue
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out += specs_from_dataclass(value, name + ".", read_only, skip)
            continue
        if value is None:
            continue
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, tuple):
            value = list(value)
        meta = param_meta(f)
        if meta is None:     # declared all the same (a node must start), but test_launch_files fails
            meta = ParamMeta(f"{type(obj).__name__}.{f.name} (no param() metadata on the field)")
        spec = ParamSpec(name, value, meta.help, meta.range, meta.choices, name in read_only, live=meta.live)
        try:
            spec.ros_type_name()
        except TypeError:
            continue
        out.append(spec)
    return out


def build_dataclass(cls, values: dict, prefix: str = ""):
    """Instantiate dataclass ``cls`` from dotted ``values`` (missing keys keep defaults)."""
    kwargs = {}
    default_obj = cls()
    for f in dataclasses.fields(cls):
        name = prefix + f.name
        cur = getattr(default_obj, f.name)
        if dataclasses.is_dataclass(cur):
            kwargs[f.name] = build_dataclass(type(cur), values, name + ".")
        elif name in values:
            v = values[name]
            if isinstance(cur, tuple) and isinstance(v, list):
                v = tuple(v)
            elif hasattr(cur, "tolist") and isinstance(v, list):
                v = np.asarray(v, dtype=getattr(cur, "dtype", None))
            elif isinstance(cur, float) and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            kwargs[f.name] = v
    return cls(**kwargs)


def descriptor_for(spec: ParamSpec):
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

    types = {
        "bool": ParameterType.PARAMETER_BOOL, "integer": ParameterType.PARAMETER_INTEGER,
        "double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING,
        "bool_array": ParameterType.PARAMETER_BOOL_ARRAY,
        "integer_array": ParameterType.PARAMETER_INTEGER_ARRAY,
        "double_array": ParameterType.PARAMETER_DOUBLE_ARRAY,
        "string_array": ParameterType.PARAMETER_STRING_ARRAY,
    }
    d = ParameterDescriptor(name=spec.name, type=types[spec.ros_type_name()], description=spec.description,
                            read_only=spec.read_only)
    if spec.choices:
        d.additional_constraints = "one of: " + ", ".join(spec.choices)
    if spec.range is not None:
        lo, hi = spec.range[0], spec.range[1]
        step = spec.range[2] if len(spec.range) > 2 else 0
        if spec.ros_type_name() == "integer":
            d.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=int(step))]
        elif spec.ros_type_name() == "double":
            d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi),
                                                         step=float(step))]
        if not d.additional_constraints:
            d.additional_constraints = f"range [{lo}, {hi}]" + (f", step {step}" if step else "")
    return d


def declare_all(node, specs: list[ParamSpec]) -> dict:
    """Declare every parameter of ``specs`` on ``node``; return {name: value} after overrides.

    Values outside a choice list raise ValueError naming the parameter (ranges and
    read-only are enforced by rclpy through the descriptor).
    """
    values = {}
    for spec in specs:
        p = node.declare_parameter(spec.name, spec.ros_default(), descriptor_for(spec))
        v = p.value
        if isinstance(v, tuple):
            v = list(v)
        if hasattr(v, "tolist"):
            v = v.tolist()
        why = spec.check(v)
        if why:
            raise ValueError(why)
        values[spec.name] = v
    return values


def add_parameter_callbacks(node, validate, apply) -> None:
    """``validate`` (on-set: may refuse, returns a ``SetParametersResult``) and ``apply`` (post-set: the
    values are in) on ``node``. rclpy has post-set callbacks from Iron on; Humble's (JetPack 6's system
    ROS 2) has on-set callbacks alone: there ``apply`` runs at the end of ``validate`` where it accepted
    (rclpy has checked ranges and read-only before and stores the values right after). Humble calls the
    newest on-set callback first: register these before any other."""
    if hasattr(node, "add_post_set_parameters_callback"):
        node.add_on_set_parameters_callback(validate)
        node.add_post_set_parameters_callback(apply)
        return

    def validate_then_apply(params):
        result = validate(params)
        if result.successful:
            apply(params)
        return result

    node.add_on_set_parameters_callback(validate_then_apply)


def check_on_set(specs: list[ParamSpec]):
    """An on-set-parameters callback that rejects values outside ``choices``."""
    by_name = {s.name: s for s in specs}

    def callback(params):
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            spec = by_name.get(p.name)
            if spec is None:
                continue
            why = spec.check(p.value)
            if why:
                return SetParametersResult(successful=False, reason=why)
        return SetParametersResult(successful=True)

    return callback


def format_table(specs: list[ParamSpec], width: int = 110) -> str:
    """The Parameters section of a node docstring (name, type, default, range, description),
    wrapped at ``width`` columns; the node docstrings hold this text (test_launch_files checks)."""
    import textwrap

    lines = []
    for s in specs:
        extra = []
        if s.range is not None:
            step = f" step {s.range[2]}" if len(s.range) > 2 and s.range[2] else ""
            extra.append(f"range [{s.range[0]}, {s.range[1]}]{step}")
        if s.choices:
            extra.append("one of " + "|".join(s.choices))
        if s.read_only:
            extra.append("read-only")
        text = (f"{s.name} ({s.ros_type_name()}, default {s.ros_default()!r}"
                + (", " + ", ".join(extra) if extra else "") + f"): {s.description}")
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="      ",
                               break_on_hyphens=False)
    return "\n".join(lines)


def markdown_table(specs: list[ParamSpec]) -> str:
    """The table of ``specs`` in Markdown (``docs/parameters.md``): name, type, default, range or
    choices, whether and how it can change at run time (read-only; writable; live: applied to the
    running tracker), description."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    rows = ["| parameter | type | default | range / choices | at run time | description |",
            "|---|---|---|---|---|---|"]
    for s in specs:
        bounds = ""
        if s.range is not None:
            step = f" step {s.range[2]}" if len(s.range) > 2 and s.range[2] else ""
            bounds = f"[{s.range[0]}, {s.range[1]}]{step}"
        if s.choices:
            bounds = "one of " + ", ".join(f"`{c}`" for c in s.choices)
        change = "read-only" if s.read_only else ("live" if s.live else "writable")
        rows.append(f"| `{s.name}` | {s.ros_type_name()} | `{cell(repr(s.ros_default()))}` | {cell(bounds)} | "
                    f"{change} | {cell(s.description)} |")
    return "\n".join(rows)


# --- camera calibration parameters (shared by frontend_node and backend_node) ---
def default_right() -> CameraModel:
    try:
        from vilib_ros.camera import euroc_cam1

        return euroc_cam1()
    except Exception:  # noqa: BLE001 - dataset module missing: mirror cam0
        return euroc_cam0()


def camera_specs(prefix: str, cam: CameraModel, what: str) -> list[ParamSpec]:
    return [
        ParamSpec(prefix + "camera_yaml", "", f"EuRoC sensor.yaml of the {what} (overrides the parameters below)",
                  read_only=True),
        ParamSpec(prefix + "image_width", int(cam.width), f"{what} image width", range=(1, 16384), read_only=True),
        ParamSpec(prefix + "image_height", int(cam.height), f"{what} image height", range=(1, 16384),
                  read_only=True),
        ParamSpec(prefix + "intrinsics", [cam.fx, cam.fy, cam.cx, cam.cy], f"{what} fx fy cx cy (pixels)",
                  read_only=True),
        ParamSpec(prefix + "distortion_model", cam.distortion_model, f"{what} distortion model",
                  choices=("radial-tangential", "equidistant", "none"), read_only=True),
        ParamSpec(prefix + "distortion_coefficients", [float(v) for v in cam.distortion],
                  f"{what} distortion coefficients (k1 k2 p1 p2, or k1..k4 equidistant)", read_only=True),
        ParamSpec(prefix + "T_BS", [float(v) for v in cam.T_BS.ravel()],
                  f"{what} camera-to-body transform, row-major 4x4", read_only=True),
    ]


def camera_from_params(values: dict, prefix: str = "") -> CameraModel:
    path = values.get(prefix + "camera_yaml", "")
    if path:
        return CameraModel.from_euroc_yaml(path)
    fx, fy, cx, cy = (float(v) for v in values[prefix + "intrinsics"])
    return CameraModel(int(values[prefix + "image_width"]), int(values[prefix + "image_height"]), fx, fy, cx, cy,
                       values[prefix + "distortion_model"],
                       np.asarray(values[prefix + "distortion_coefficients"], dtype=np.float64),
                       np.asarray(values[prefix + "T_BS"], dtype=np.float64).reshape(4, 4))
