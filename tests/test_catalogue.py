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


def test_roses_defaults_are_declared_once_in_the_catalogue() -> None:
    """ROSE's keywords and both typed views of its settings default to the catalogue's ROSE_DEFAULTS (what
    `rose --help` states), each setting of the views being one of ROSE's keywords."""
    import inspect
    from dataclasses import fields

    from roseood.catalogue import ROSE_DEFAULTS
    from roseood.detectors import ROSE
    from roseood.detectors.rose import FisherArguments, ScoreArguments

    keywords = inspect.signature(ROSE).parameters
    for name, default in ROSE_DEFAULTS.items():
        assert keywords[name].default == default, name
    for view in (FisherArguments, ScoreArguments):
        for f in fields(view):
            assert f.name in keywords, f.name
            if f.name in ROSE_DEFAULTS:
                assert f.default == ROSE_DEFAULTS[f.name], (view.__name__, f.name)
    assert set(ROSE_DEFAULTS) == {f.name for v in (FisherArguments, ScoreArguments) for f in fields(v)} - {
        "layers"
    }
