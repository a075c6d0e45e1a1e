"""The public evaluation API: what ``roseood.evaluation`` exports works on a user's wrapped model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import roseood
import roseood.evaluation as ev
from roseood.errors import DataError


def test_every_exported_name_is_a_documented_object_of_the_package():
    """Each name of ``__all__`` once, and each exported function or class defined in roseood.evaluation
    (not a re-exported third-party one) with a docstring: the API page is generated from them."""
    assert len(set(ev.__all__)) == len(ev.__all__)
    for name in ev.__all__:
        obj = getattr(ev, name)  # AttributeError: exported but not there
        if callable(obj):
            assert obj.__module__.startswith("roseood.evaluation."), (name, obj.__module__)
            assert (obj.__doc__ or "").strip(), name


def test_evaluate_a_wrapped_model_and_write_its_report(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 120, (40, 28, 28), dtype=np.uint8)
    np.savez(tmp_path / "in.npz", images=imgs)
    np.savez(tmp_path / "out.npz", images=(255 - imgs[:12]))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 4, 4), nn.Flatten(), nn.Linear(128, 2))
    model = roseood.wrap(net, lambda x: net(x).pow(2).sum(1) + x.flatten(1).sum(1), layers=["0", "2"])
    spec = ev.EvalSpec(
        str(tmp_path / "in.npz"),
        ood=[str(tmp_path / "out.npz")],
        methods=["rose-diag", "nll"],
        fit_data=str(tmp_path / "in.npz"),
        fit_samples=20,
        stats_samples=8,
        test_samples=12,
    )
    result = ev.evaluate(model, spec, progress=False)
    assert isinstance(result, ev.EvaluationResult) and result.settings["model"] == "wrapped"
    assert result.settings["model_config"]["name"] == "Sequential"
    auroc = result.metrics()["nll"][str(tmp_path / "out.npz")]["auroc"]
    assert (
        auroc == ev.ood_metrics(*result.scores["nll"].values())["auroc"] and auroc > 0.9
    )  # brighter = less likely
    assert ev.write_report(result, tmp_path / "report").exists()


def test_models_without_image_inputs_are_refused_by_the_image_loader():
    net = nn.Linear(3, 1)
    model = roseood.wrap(net, lambda x: net(x)[:, 0], layers=[], input_kind="tensor")
    with pytest.raises(DataError, match="takes tensor inputs, not images"):
        ev.evaluate(model, ev.EvalSpec("fashion_mnist", ood=["mnist"], methods=["nll"]), progress=False)
