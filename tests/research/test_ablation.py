"""`python -m research ablation` under the smoke profile: the paper's row equals `rose evaluate`, ties are
counted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from research.ablation import VARIANTS, ablation_models, variant_label
from research.rescoring import LayerScores

from research import EXPERIMENTS
from roseood.bench import run_experiment
from roseood.data import load_images
from roseood.detectors.aggregation import make_aggregation
from roseood.evaluation.splits import load_fit_images
from tests.conftest import needs_shared_data
from tests.research.smoke import smoke_workspace

pytestmark = pytest.mark.research  # not in the default run: see pyproject.toml's markers


@needs_shared_data
@pytest.mark.slow
def test_ablation_on_the_authors_vae(tmp_path):
    ws = smoke_workspace(tmp_path, models=("vae",), datasets=("fashion_mnist",))
    report = run_experiment("ablation", ws, EXPERIMENTS)
    assert report.parent.name == "ablation-fashion_mnist-vae"  # a selection: its own folder
    [label] = [m[0] for m in ablation_models(ws)]
    rows = json.loads((report.parent / "results.json").read_text())["results"][label]
    assert {(r["aggregate"], r["adjust"]) for r in rows} == set(VARIANTS)
    assert {(r["fisher"], r["layers"]) for r in rows} == {
        ("diag", "encoder"),
        ("diag", "decoder"),
        ("diag", "all"),
        ("ekfac", "encoder"),  # the smoke profile runs EKFAC on the paper's layer set only
    }
    by = {(r["fisher"], r["layers"], r["aggregate"]): r for r in rows if r["adjust"] == "none"}
    assert all(r["ties_in"] == 0.0 for r in rows if r["aggregate"] == "max-z")

    # the paper's row is what `rose evaluate --methods rose-diag` gives on the same images
    model = ablation_models(ws)[0][1]
    spec = ws.spec(model, "fashion_mnist", ["mnist", "noise"], ["rose-diag"])
    ours = ws.evaluate(model, spec).metrics()["rose-diag"]
    for ood in ("mnist", "noise"):
        assert by[("diag", "encoder", "relu-norm")]["auroc"][ood] == pytest.approx(ours[ood]["auroc"])

    # the tie share is the share of in-distribution test images ReLU puts at exactly 0 (scores are
    # continuous otherwise), recomputed from encoder-only layer scores (the ablation used the columns of
    # the union of all layer sets: a layer's score must not depend on the other layers)
    fit = load_fit_images(spec, model)
    layers = model.rose_layers("encoder")
    scorer = LayerScores(ws.cache, model, "diag", layers, fit.fisher, spec.batch_size)
    agg = make_aggregation("relu-norm")
    agg.fit(scorer(fit.held_out).raw)
    test = load_images("fashion_mnist", n=spec.test_samples, seed=spec.seed, channels=1).images
    zeros = float(np.mean(agg(scorer(test).raw) == 0.0))
    assert zeros > 0 and by[("diag", "encoder", "relu-norm")]["ties_in"] == pytest.approx(zeros)
    text = report.read_text()
    assert "Default rule" in text and "ties in-dist" in text
    # each degenerate-fit warning names the rows (Fisher, layers, variant) that raised it (ties warn only
    # where the decision threshold falls on them, so a smoke run may have none)
    for r in (r for r in rows if r["warnings"]):
        line = next(x for x in text.splitlines() if x.startswith(f"- {r['warnings'][0]} ("))
        assert f"{r['fisher']} {r['layers']} {variant_label(r['aggregate'], r['adjust'])}" in line
