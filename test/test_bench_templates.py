"""``python -m bench tracker --templates-only`` (bench.templates): the report of the committed GPU
result, and the refusal on the CPU."""
from __future__ import annotations


class TestTemplatesReport:
    def test_markdown_of_the_committed_gpu_run(self):
        """bench/results/frontend_templates.json renders: every variant, mono and stereo, and the cost
        line of the default against frame-to-frame tracking."""
        import json
        from pathlib import Path

        from bench.templates import VARIANTS, markdown

        res = json.loads((Path(__file__).resolve().parents[1] / "bench/results/frontend_templates.json").read_text())
        md = markdown(res)
        for v in VARIANTS:
            assert f"| {v} | mono |" in md and f"| {v} | stereo |" in md
        assert "mono: the new default costs" in md and "stereo: the new default costs" in md

    def test_cli_refuses_without_cuda(self, capsys):
        """--templates-only measures the GPU path only: a message and exit status 2 on the CPU."""
        import argparse

        from bench.tracker import configure_parser, run_command

        p = argparse.ArgumentParser()
        configure_parser(p)
        assert run_command(p.parse_args(["--templates-only", "--device", "cpu", "--out", "/tmp/vilib_ros_tpl"])) == 2
        assert "frontend_templates is measured on a CUDA device" in capsys.readouterr().out
