"""What a configuration field says about itself as a parameter, written once on the field.

A field of :class:`vilib_ros.frontend.config.FrontendConfig` (and its nested configurations) or of
:class:`vilib_ros.backend.config.BackendConfig` carries its help, range, choices and whether it may
change on a running tracker in its metadata::

    threshold: float = field(default=10.0, metadata=param("FAST threshold eps", range=(1.0, 254.0), live=True))

The nodes declare their ROS parameters from it (:func:`vilib_ros.nodes.params.specs_from_dataclass`:
description, ``IntegerRange`` / ``FloatingPointRange``, allowed values), ``--print-parameters`` and
``docs/parameters.md`` print it, and the frontend reads ``live`` to tell a change it applies to a
running tracker from one that needs a new tracker. This module imports nothing of the package, so
every configuration can import it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: the metadata key under which a field's :class:`ParamMeta` is kept
KEY = "param"


@dataclass(frozen=True)
class ParamMeta:
    """Help, range, choices and liveness of one configuration field.

    ``range`` is (from, to[, step]) as ROS ``IntegerRange`` / ``FloatingPointRange`` take it; the
    configuration's ``validate()`` accepts every value inside it (test_launch_files checks).
    ``live``: the field can change on a running tracker (kernel scalars and host-side thresholds,
    read at every frame); a change of any other field is structural.
    """

    help: str
    range: tuple | None = None
    choices: tuple | None = None
    live: bool = False


def param(help: str, *, range: tuple | None = None, choices: tuple | None = None,  # noqa: A002 - ROS's words
          live: bool = False) -> dict:
    """The ``metadata`` of a configuration field: its :class:`ParamMeta`."""
    return {KEY: ParamMeta(help, range, tuple(choices) if choices is not None else None, live)}


def param_meta(f: dataclasses.Field) -> ParamMeta | None:
    """The :class:`ParamMeta` of a dataclass field, or None where it has none."""
    return f.metadata.get(KEY)
