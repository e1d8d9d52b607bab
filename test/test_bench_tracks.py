"""``python -m bench accuracy``'s tracks variants (bench.tracks): each a distinct valid frontend
configuration, and the command's refusals."""
from __future__ import annotations

import pytest


class TestVariants:
    def test_every_variant_is_a_distinct_valid_config(self):
        """Each row of bench/results/tracks_quality.md is one valid FrontendConfig, and no two share
        one (their tracks are cached by the config's repr)."""
        from bench.tracks import VARIANTS, frontend_config, parse_variants

        cfgs = [frontend_config(n) for n in parse_variants("all")]
        assert len(cfgs) == len(VARIANTS) and len({repr(c) for c in cfgs}) == len(cfgs)
        assert frontend_config("f2f").tracker.template == "previous" and not frontend_config("f2f").ransac
        with pytest.raises(ValueError, match="unknown tracks variant"):
            parse_variants("f2f,nonsense")

    def test_cli_refuses_tracks_only_without_variants(self, capsys):
        import argparse

        from bench.accuracy import configure_parser, run_command

        p = argparse.ArgumentParser()
        configure_parser(p)
        assert run_command(p.parse_args(["--tracks-only", "--device", "cpu"])) == 2
        assert run_command(p.parse_args(["--tracks-variants", "bogus", "--device", "cpu"])) == 2
        err = capsys.readouterr().err
        assert "--tracks-only needs --tracks-variants" in err and "unknown tracks variant" in err
