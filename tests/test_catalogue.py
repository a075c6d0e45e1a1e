"""The command line's torch-free catalogue names exactly the built-in plug-ins of each registry, so the
names `rose --help` lists and an argument is checked against are those the library runs."""

from __future__ import annotations

import argparse

import pytest

from roseood import catalogue, settings
from roseood.detectors import METHODS
from roseood.detectors.aggregation import AGGREGATIONS


def test_the_catalogue_lists_every_built_in_method_in_order():
    assert list(catalogue.METHODS) == list(METHODS)


def test_the_settings_list_every_aggregation_with_its_parameters():
    assert {name: tuple(AGGREGATIONS[name]().params()) for name in AGGREGATIONS} == settings.AGGREGATIONS
    assert settings.DEFAULT_AGGREGATION in AGGREGATIONS


def test_the_catalogue_gives_every_trainable_family_its_registered_options():
    from roseood.cli.models import trainable_families
    from roseood.models.families import FAMILIES

    registered = {
        f.name: (f.help, f.add_cli_arguments, f.from_cli_arguments, f.method) for f in FAMILIES.values()
    }
    for name, options in catalogue.TRAIN_OPTIONS.items():
        assert registered[name] == (options.help, options.add_arguments, options.to_config, options.method)
    assert list(trainable_families()) == [f.name for f in FAMILIES.values() if f.trainable]


def test_the_help_names_each_familys_method_when_none_is_named():
    assert catalogue.family_methods() == (
        "rose-gmm-all for glow and pixelcnn, rose-bands-stats-compact for diffusion ddpm, fm, ldm and cddpm "
        "models, rose-bands-stats for other diffusion models, else rose-ekfac"
    )


def test_the_resizing_methods_are_the_ones_the_library_checks_against():
    from roseood.data.preprocess import Preprocessing
    from roseood.errors import DataError

    for resize in catalogue.RESIZE_METHODS:
        assert Preprocessing(resize=resize).resize == resize
    with pytest.raises(DataError):
        Preprocessing(resize="bogus")


def test_roses_settings_are_its_keywords_its_views_fields_and_its_params() -> None:
    """Every keyword of ROSE but the model's is a declared setting, defaulting to the declaration (so do
    both typed views, whose fields are exactly the declared settings); ``get_params`` (the detector
    file's record) holds them all but the runtime ones."""
    import inspect
    from dataclasses import fields

    from roseood.detectors import ROSE
    from roseood.detectors.rose import FisherArguments, ScoreArguments
    from roseood.settings import ROSE_DEFAULTS, ROSE_SETTING

    keywords = inspect.signature(ROSE).parameters
    assert set(keywords) - set(ROSE_SETTING) == {"model", "loss_fn", "progress"}
    for name, setting in ROSE_SETTING.items():
        assert keywords[name].default == setting.default == ROSE_DEFAULTS[name], name
    views = (FisherArguments, ScoreArguments)
    for f in (f for view in views for f in fields(view) if f.name != "layers"):  # layers: resolved names
        assert f.default == ROSE_SETTING[f.name].default, f.name
    assert {f.name for view in views for f in fields(view)} == set(ROSE_SETTING)
    assert set(ROSE.param_names()) == set(ROSE_SETTING) - set(ROSE.runtime_params)


@pytest.mark.parametrize(
    ("name", "bad", "message"),
    [
        ("damping", -1.0, r"^damping must be in \[0, inf\]"),
        ("rcond", 2.0, r"^rcond must be in \[0, 1\]"),
        ("rows", "pairs", r"^rows must be one of sum, each, bands, got 'pairs'$"),
        ("seed", -1, r"^seed must be a non-negative integer"),
        ("max_size", "lots", r"^max_size must be a size such as 4G"),
        ("memory", "0", r"^memory must be positive"),
        ("beta", float("nan"), r"^beta must be a finite number"),
        ("p", 0.5, r"^p must be in \[1, inf\]"),
        ("adjust", "sideways", r"^unknown ROSE adjustment 'sideways'"),
        ("features", "stats", r"^features must be 'layers' followed by"),
        ("stats_fraction", 1.0, r"^stats_fraction must lie in \(0, 1\)"),
    ],
)
def test_each_declared_check_is_the_one_its_view_runs(name: str, bad: object, message: str) -> None:
    """A setting's declared check refuses a bad value in one line, and the typed view that holds the
    setting refuses it with that line (the views run the declared checks, not checks of their own)."""
    from dataclasses import fields

    from roseood.detectors.rose import FisherArguments, ScoreArguments
    from roseood.errors import RoseError
    from roseood.settings import ROSE_SETTING

    check = ROSE_SETTING[name].check
    assert check is not None
    with pytest.raises(RoseError, match=message):
        check(bad)
    view = next(v for v in (ScoreArguments, FisherArguments) if name in {f.name for f in fields(v)})
    with pytest.raises(RoseError, match=message):
        view(**{name: bad})


def test_the_detecting_commands_offer_each_flagged_setting_with_its_declared_help() -> None:
    """``rose fit`` and ``rose evaluate`` add one option per setting declared with a flag: its name, its
    choices, unset by default (each method's own), the declared help and default in its help; those
    options are the ones handed to each method's detector."""
    from roseood.cli import build_parser
    from roseood.cli.common import DETECTOR_OPTIONS
    from roseood.settings import ROSE_SETTINGS

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    flagged = [s for s in ROSE_SETTINGS if s.flag]
    assert (
        set(DETECTOR_OPTIONS)
        == {s.name for s in flagged}
        == {"layers", "aggregate", "adjust", "max_size", "rows"}
    )
    for command in ("fit", "evaluate"):
        actions = {a.dest: a for a in commands[command]._actions}
        for s in flagged:
            action = actions[s.name]
            assert action.option_strings == [s.option] and action.default is None, (command, s.name)
            assert action.choices == s.choices and action.help.startswith(s.help), (command, s.name)
            assert s.default is None or action.help.endswith(f"(default: {s.default})"), (command, s.name)


def test_every_rose_method_presets_declared_settings_to_values_their_checks_accept() -> None:
    """A ROSE method (``rose-bands``, ``rose-gmm-stats``, ...) is ROSE with some declared settings
    preset: each preset names one and passes its check, so a new preset cannot name a setting that
    does not exist."""
    from roseood.detectors import METHODS, ROSE
    from roseood.settings import ROSE_SETTING

    presets = {name: m.kwargs for name, m in METHODS.items() if m.cls is ROSE}
    assert {"rose-ekfac", "rose-bands-stats", "rose-gmm-all"} <= set(presets)
    for name, kwargs in presets.items():
        for key, value in kwargs.items():
            check = ROSE_SETTING[key].check
            assert check is None or check(value) == value, (name, key)


def _train_diffusion_parser() -> argparse.ArgumentParser:
    from roseood.cli.common import Parser

    p = Parser(prog="rose train diffusion")
    catalogue.TRAIN_OPTIONS["diffusion"].add_arguments(p)
    return p


def test_the_diffusion_loss_settings_are_the_options_the_config_and_the_checked_defaults() -> None:
    """Each declared loss setting is one ``rose train diffusion`` option, its default shown once as the
    option takes it and parsed to the declared default; the options of ``rose fit`` and ``rose evaluate``
    are the declared ``detecting`` ones, unset (the model's own); the config a default ``rose train
    diffusion`` builds and ``check_denoising`` of nothing (a new model's ``denoising``) hold the declared
    defaults, so a default restated anywhere on that path fails here."""
    from roseood.cli import build_parser
    from roseood.models.diffusion.config import check_denoising
    from roseood.settings import DIFFUSION_LOSS_DEFAULTS, LOSS_SETTINGS

    train = _train_diffusion_parser()
    actions = {a.dest: a for a in train._actions}
    parsed = train.parse_args([])
    usage = " ".join(train.format_help().split())
    for s in LOSS_SETTINGS:
        assert actions[s.dest].option_strings == [s.option] and actions[s.dest].help == s.help, s.name
        assert getattr(parsed, s.dest) == s.default, s.name
        assert usage.count(f"(default: {s.text(s.default)})") == 1, s.name
    assert DIFFUSION_LOSS_DEFAULTS == {"k": 8, "t_min": 0.0, "t_max": 1.0, "weighting": "simple", "seed": 0}
    assert catalogue.TRAIN_OPTIONS["diffusion"].to_config(parsed)["denoising"] == DIFFUSION_LOSS_DEFAULTS
    assert check_denoising({}) == DIFFUSION_LOSS_DEFAULTS
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for command in ("fit", "evaluate"):
        offered = {a.dest: a for a in commands[command]._actions if a.dest.startswith("rose_")}
        assert set(offered) == {s.dest for s in LOSS_SETTINGS if s.detecting} == {"rose_k", "rose_t_range"}
        assert all(a.default is None and "unset: the model's own" in (a.help or "") for a in offered.values())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, r"^denoising\.k must be a positive integer, got 0$"),
        ({"t_min": -0.5}, r"^denoising\.t_min must be in \[0, 1\], got -0\.5$"),
        ({"t_max": 2}, r"^denoising\.t_max must be in \[0, 1\], got 2$"),
        ({"t_min": 0.5, "t_max": 0.5}, r"^denoising needs t_min < t_max, got 0\.5 and 0\.5$"),
        ({"weighting": "vlb"}, r"^denoising\.weighting must be one of simple, elbo, got 'vlb'$"),
        ({"seed": 2**32}, r"^denoising\.seed must be < 2\*\*32"),
    ],
)
def test_check_denoising_runs_each_declared_check(options: dict, message: str) -> None:
    """``check_denoising`` refuses each bad value in the declared check's one line, named by its key."""
    from roseood.errors import RoseError
    from roseood.models.diffusion.config import check_denoising

    with pytest.raises(RoseError, match=message):
        check_denoising(options)
