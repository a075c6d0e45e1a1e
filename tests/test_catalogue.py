"""The command line's torch-free catalogue names exactly the built-in plug-ins of each registry, so the
names `rose --help` lists and an argument is checked against are those the library runs."""

from __future__ import annotations

import pytest

from roseood import catalogue
from roseood.detectors import METHODS
from roseood.detectors.aggregation import AGGREGATIONS


def test_the_catalogue_lists_every_built_in_method_in_order():
    assert list(catalogue.METHODS) == list(METHODS)


def test_the_catalogue_lists_every_aggregation_with_its_parameters():
    assert {name: tuple(AGGREGATIONS[name]().params()) for name in AGGREGATIONS} == catalogue.AGGREGATIONS
    assert catalogue.DEFAULT_AGGREGATION in AGGREGATIONS


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
        "rose-gmm-all for glow and pixelcnn, rose-bands-stats for diffusion, else rose-ekfac"
    )


def test_the_diffusion_loss_and_resizing_constants_are_the_ones_the_library_checks_against():
    from roseood.data.preprocess import Preprocessing
    from roseood.errors import DataError
    from roseood.models.diffusion.config import check_denoising

    assert check_denoising({}) == catalogue.DIFFUSION_LOSS_DEFAULTS
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
