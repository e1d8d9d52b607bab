"""The nodes on ROS 2 Humble's rclpy (JetPack 6's system ROS 2) as on Jazzy's: the one API they use that
Humble lacks, post-set parameter callbacks (rclpy >= Iron), goes through
``vilib_ros.nodes.params.add_parameter_callbacks``, which chains them into the on-set callback there.

The Humble path is taken on this rclpy by a node whose ``add_post_set_parameters_callback`` is absent;
it must behave as the post-set path does: the same values applied, the same refusals, nothing applied
that rclpy or the validation refuses.
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.ros


def _run(humble: bool) -> tuple[list, list, int]:
    rclpy = pytest.importorskip("rclpy", reason="rclpy (ros extra) not installed")
    from rcl_interfaces.msg import IntegerRange, ParameterDescriptor, SetParametersResult
    from rclpy.context import Context
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from vilib_ros.nodes.params import add_parameter_callbacks

    class HumbleLike(Node):
        @property
        def add_post_set_parameters_callback(self):
            raise AttributeError("rclpy before Iron has no post-set parameter callbacks")

    ctx = Context()
    rclpy.init(context=ctx)
    node = (HumbleLike if humble else Node)("compat_probe", context=ctx)
    try:
        node.declare_parameter("x", 1, ParameterDescriptor(integer_range=[IntegerRange(from_value=0, to_value=10,
                                                                                         step=1)]))
        applied = []

        def validate(params):
            bad = [p for p in params if p.value == 7]
            return SetParametersResult(successful=not bad, reason="7 is refused" if bad else "")

        def apply(params):
            applied.append([(p.name, p.value, node.get_parameter(p.name).value) for p in params])

        add_parameter_callbacks(node, validate, apply)
        results = [node.set_parameters([Parameter("x", value=v)])[0].successful for v in (3, 7, 11, 5)]
        return applied, results, node.get_parameter("x").value
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def test_humble_path_behaves_as_post_set():
    applied_j, results_j, final_j = _run(humble=False)
    applied_h, results_h, final_h = _run(humble=True)
    assert results_j == results_h == [True, False, False, True]      # 7: the validation; 11: rclpy's range
    assert final_j == final_h == 5
    # the values applied are the accepted ones, in order (what get_parameter says at that moment may
    # differ: post-set runs after rclpy stored them, the Humble path just before)
    assert [[(n, v) for n, v, _ in a] for a in applied_j] == [[("x", 3)], [("x", 5)]]
    assert [[(n, v) for n, v, _ in a] for a in applied_h] == [[("x", 3)], [("x", 5)]]
    assert [a[0][2] for a in applied_j] == [3, 5]
