"""--preset cpu: sizes for a short run as the command's defaults; options the user gives win."""

from __future__ import annotations

from roseood.cli import build_parser
from roseood.cli.common import PRESETS, apply_preset, sample_counts


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
    assert parsed("evaluate").fit_samples is None  # no preset: the model family's (sample_counts)


def test_unset_counts_are_the_model_familys_and_given_ones_win(capsys) -> None:
    """A DDPM takes its family's fit and statistics images (said on one line), a VAE the paper's 10 000 +
    2 000; a count given (or a preset's) is kept, the other still the family's."""
    from roseood.catalogue import FIT_COUNTS, TRAIN_OPTIONS
    from roseood.models import VAE
    from roseood.models.diffusion import DiffusionModel

    ddpm = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 2})
    own = TRAIN_OPTIONS["diffusion"].fit_counts
    assert own != FIT_COUNTS
    assert sample_counts(parsed("fit", "--out", "d.pt"), ddpm) == own
    said = f"--fit-samples {own[0]} --stats-samples {own[1]}: this model family's default"
    assert said in capsys.readouterr().err
    assert sample_counts(parsed("fit", "--out", "d.pt", "--fit-samples", "30"), ddpm) == (30, own[1])
    assert sample_counts(parsed("fit", "--out", "d.pt", "--preset", "cpu"), ddpm) == (
        PRESETS["cpu"]["fit_samples"],
        PRESETS["cpu"]["stats_samples"],
    )
    capsys.readouterr()
    assert sample_counts(parsed("fit", "--out", "d.pt"), VAE(in_channels=1, ngf=4, nz=4)) == FIT_COUNTS
    assert "family's default" not in capsys.readouterr().err
