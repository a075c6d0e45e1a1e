"""The command line's torch-free catalogue names exactly the built-in plug-ins of each registry, so the
names `rose --help` lists and an argument is checked against are those the library runs."""

from __future__ import annotations

from roseood import catalogue
from roseood.detectors import METHODS
from roseood.detectors.aggregation import AGGREGATIONS


def test_the_catalogue_lists_every_built_in_method_in_order():
    assert list(catalogue.METHODS) == list(METHODS)


def test_the_catalogue_lists_every_aggregation_with_its_parameters():
    assert {name: tuple(AGGREGATIONS[name]().params()) for name in AGGREGATIONS} == catalogue.AGGREGATIONS
    assert catalogue.DEFAULT_AGGREGATION in AGGREGATIONS
