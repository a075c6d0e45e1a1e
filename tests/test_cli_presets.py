"""--preset cpu: sizes for a short run as the command's defaults; options the user gives win."""

from __future__ import annotations

from roseood.cli import build_parser
from roseood.cli.common import PRESETS, apply_preset


def parsed(*argv: str):
    parser = build_parser()
    return apply_preset(parser, list(argv), parser.parse_args(list(argv)))


def test_a_preset_sets_the_commands_sizes_and_given_options_win() -> None:
    cpu = PRESETS["cpu"]
    args = parsed("evaluate", "--preset", "cpu", "--fit-samples", "30")
    assert args.fit_samples == 30 and args.stats_samples == cpu["stats_samples"]
    assert (args.test_samples, args.bootstrap) == (cpu["test_samples"], cpu["bootstrap"])
    args = parsed("train", "vae", "--out", "m.pt", "--preset", "cpu")
    assert (args.subset, args.epochs) == (cpu["subset"], cpu["epochs"])
    args = parsed("fit", "--out", "d.pt", "--preset", "cpu")
    assert args.fit_samples == cpu["fit_samples"] and not hasattr(args, "test_samples")
    assert parsed("evaluate").fit_samples == 10000  # no preset: the defaults
