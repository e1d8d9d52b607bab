"""The nodes ``vilib-ros run`` starts import the vilib_ros package the command imported.

The run starts its nodes (``python -m vilib_ros.nodes.<node>``) in its output folder: ``-m`` puts
the working folder first on ``sys.path``, and a node started in a checkout while the command runs the
installed package would import the checkout (and compile a second numba cache). Checked with a decoy
``vilib_ros`` package in the working folder and the child's own import trace (``PYTHONVERBOSE``).
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = [pytest.mark.ros]


def test_run_nodes_import_the_callers_package(ros_graph, tmp_path, monkeypatch):
    import vilib_ros
    from vilib_ros.pipeline import _Run

    decoy = tmp_path / "checkout"
    (decoy / "vilib_ros" / "nodes").mkdir(parents=True)
    (decoy / "vilib_ros" / "__init__.py").write_text("print('DECOY vilib_ros imported')\n")
    (decoy / "vilib_ros" / "nodes" / "__init__.py").write_text("")
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    (out / "params.yaml").write_text("player_node:\n  ros__parameters:\n    dataset: ''\n")
    monkeypatch.chdir(decoy)                # the caller works in a checkout that is not its package
    env = dict(ros_graph.env)
    env["PYTHONVERBOSE"] = "1"
    run = _Run(SimpleNamespace(namespace=""), out, env, ros_graph.domain, False, 0)
    run.start("player_node")
    child = run.children["player_node"]
    assert child.wait(120) == 2              # the real player: "cannot start" without a dataset
    log = child.output()
    assert "DECOY" not in log
    assert "PlayerNode: cannot start: player_node: parameter 'dataset' is required" in log, child.tail()
    ours = str(Path(vilib_ros.__file__).resolve())
    # "# <cache> matches <source>" or "# code object from <source>": the package's __init__ it loaded
    imported = {tok.strip("'") for ln in log.splitlines() if ln.startswith("# ")
                for tok in ln.split() if tok.strip("'").endswith("vilib_ros/__init__.py")}
    assert imported == {ours}, imported
