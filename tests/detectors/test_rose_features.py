"""ROSE's vector judged whole (issue 47): the model's statistics and the image's complexity beside the layer
scores, a Gaussian mixture whose size is chosen by held-out likelihood, and the two-sided aggregation.
Each method fits, scores, saves and loads; its density is fitted on in-distribution images only; too few
held-out images are refused in one line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, Detector, make_detector
from roseood.detectors.aggregation import GMM
from roseood.detectors.rose import detector as detector_module
from roseood.detectors.rose import fit_together
from roseood.detectors.rose.stream import LayerStream
from roseood.errors import DataError, RoseError
from roseood.evaluation import fishers as fishers_module
from roseood.evaluation.evaluate import evaluate
from roseood.evaluation.splits import EvalSpec
from roseood.models import VAE, wrap

NEAR_OOD = ["rose-gmm", "rose-gmm-stats", "rose-gmm-all", "rose-two-sided"]


@pytest.fixture
def many() -> torch.Tensor:
    """60 images: 30 for the Fisher, 30 held out (GMM k=auto needs 20)."""
    g = torch.Generator().manual_seed(2)
    return (torch.rand(60, 1, 32, 32, generator=g) * torch.rand(60, 1, 1, 1, generator=g)).clamp(0, 1)


@pytest.mark.parametrize("method", NEAR_OOD)
def test_each_near_ood_method_fits_scores_saves_and_loads(method, tiny_vae, many, tmp_path):
    det = make_detector(method, tiny_vae, progress=False, stats_fraction=0.5).fit(many)
    scores = det.score(many[:8])
    assert scores.shape == (8,) and np.isfinite(scores).all()
    expected = {"rose-gmm": [], "rose-two-sided": [], "rose-gmm-stats": ["reconstruction", "kl"]}
    expected["rose-gmm-all"] = ["reconstruction", "kl", "png_bits_per_dim"]
    assert det.extra_columns_ == expected[method]
    det.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", tiny_vae)
    # a saved Fisher is float32 (docs/design.md): within 1e-5 of the largest score
    np.testing.assert_allclose(loaded.score(many[:8]), scores, rtol=0, atol=1e-5 * np.abs(scores).max())


@pytest.mark.parametrize("family", ["glow", "pixelcnn"])
def test_a_familys_density_default_fits_scores_saves_and_loads(family, many, tmp_path):
    """rose-gmm-all, the Glow and PixelCNN families' default: its columns are the layer scores, the
    model's NLL and the images' PNG complexity."""
    from roseood.models import Glow, PixelCNN
    from roseood.models.families import default_method

    torch.manual_seed(0)
    model = (
        Glow(in_channels=1, levels=1, steps=1, hidden=4)
        if family == "glow"
        else PixelCNN(in_channels=1, width=4, blocks=1)
    ).eval()
    det = make_detector(default_method(model), model, progress=False, stats_fraction=0.5).fit(many)
    scores = det.score(many[:8])
    assert scores.shape == (8,) and np.isfinite(scores).all()
    assert det.extra_columns_ == ["loss", "png_bits_per_dim"]
    det.save(tmp_path / "d.pt")
    loaded = Detector.load(tmp_path / "d.pt", model)
    # the saved Fisher is float32, and a random one-step Glow's Fisher of 30 images is ill-conditioned: the
    # loaded scores moved by up to 1.5e-5 of the largest score here and 1.7e-4 under MKL_CBWR=COMPATIBLE
    # ATEN_CPU_CAPABILITY=default (the PixelCNN: 4.4e-6 and 1.9e-6); 1e-3 leaves room, and the order of the
    # images must not change
    again = loaded.score(many[:8])
    np.testing.assert_allclose(again, scores, rtol=0, atol=1e-3 * np.abs(scores).max())
    assert (np.argsort(again) == np.argsort(scores)).all()


def test_the_vae_statistics_are_the_terms_of_the_loss_rose_differentiates(tiny_vae, images):
    stats = tiny_vae.image_statistics(images)
    torch.testing.assert_close(stats["reconstruction"] + stats["kl"], tiny_vae.rose_loss(images).detach())
    assert all((s >= 0).all() for s in stats.values())


def test_a_model_without_statistics_offers_its_loss(many):
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 8))
    model = wrap(net, lambda x: net(x).pow(2).sum(1) + 1.0, input_shape=(1, 32, 32))
    det = ROSE(model, features="layers,stats", aggregate="gmm:k=auto", stats_fraction=0.5, progress=False)
    det.fit(many)
    assert det.extra_columns_ == ["loss"]


@pytest.mark.parametrize("method", ["rose-gmm-all", "rose-two-sided"])
def test_the_aggregation_is_fitted_on_in_distribution_images_only(method, tiny_vae):
    """The same spec with different OOD sets gives the same fitted detector, to the bit."""
    states = []
    for ood in (["mnist"], ["noise", "constant"]):
        spec = EvalSpec(
            "fashion_mnist",
            ood=ood,
            methods=[method],
            fit_samples=30,
            stats_samples=24,
            test_samples=10,
        )
        result = evaluate(tiny_vae, spec, progress=False, tpr=0.95)
        states.append(result.detectors[method].state())
    first, second = states
    for key in ("mean", "std"):
        assert torch.equal(first[key], second[key])
    for key, value in first["aggregation"].items():
        assert torch.equal(value, second["aggregation"][key])


def test_too_few_held_out_images_are_refused_in_one_line(tiny_vae, many):
    det = make_detector("rose-gmm", tiny_vae, progress=False)
    with pytest.raises(RoseError, match=r"^gmm:k=auto needs at least 20 statistics images .* got 12$"):
        det.fit(many[:20], held_out=many[20:32])


def test_k_auto_prefers_the_mixture_the_data_has():
    """Two well-separated clusters of log scores: the held-out likelihood picks more than one component;
    a single Gaussian cloud: one."""
    rng = np.random.default_rng(0)
    two = np.exp(np.concatenate([rng.normal(0, 0.3, (100, 3)), rng.normal(4, 0.3, (100, 3))]))
    one = np.exp(rng.normal(0, 0.3, (200, 3)))
    for data, want in ((two, lambda k: k >= 2), (one, lambda k: k == 1)):
        agg = GMM(k="auto")
        agg.fit(data)
        assert agg.choice_ is not None and want(agg.choice_[0]), agg.choice_


def test_bad_features_are_refused(tiny_vae):
    for bad in ("stats", "layers,colour", "layers,stats,stats"):
        with pytest.raises(RoseError, match="features must be 'layers' followed by"):
            ROSE(tiny_vae, features=bad)
    emb = torch.nn.Embedding(5, 2)
    tokens = wrap(emb, lambda x: emb(x).sum((1, 2)), input_kind="tokens")
    with pytest.raises(RoseError, match="needs an image model"):
        ROSE(tokens, features="layers,complexity")


def test_non_positive_statistics_are_refused_in_one_line(many):
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1024, 8))
    model = wrap(net, lambda x: net(x).sum(1), input_shape=(1, 32, 32))  # a loss of either sign
    det = ROSE(model, features="layers,stats", aggregate="gmm:k=auto", stats_fraction=0.5, progress=False)
    with pytest.raises(DataError, match=r"^the statistic loss is not positive and finite"):
        det.fit(many)


def test_vae_families_offer_statistics():
    assert set(VAE(ngf=4, nz=4).image_statistics(torch.rand(2, 1, 32, 32))) == {"reconstruction", "kl"}


def test_two_sided_refuses_a_single_held_out_image_in_one_line(tiny_vae, many):
    det = make_detector("rose-two-sided", tiny_vae, progress=False)
    with pytest.raises(DataError, match=r"^rose needs at least 2 held-out in-distribution inputs, got 1$"):
        det.fit(many[:20], held_out=many[20:21])


def test_a_rose_takes_the_fishers_of_another_fitted_on_the_same_images(tiny_vae, many):
    """``fit(fishers=...)``: the same Fisher objects, and the scores of a fit of its own; refused in one
    line for other images, other Fisher settings or other weights."""
    fit, held = many[:30], many[30:]
    first = ROSE(tiny_vae, progress=False).fit(fit, held_out=held)
    assert first.fishers_ is not None and first.fishers_.arguments == first.fisher_arguments
    shared = ROSE(tiny_vae, aggregate="two-sided", progress=False)
    shared.fit(fit, held_out=held, fishers=first.fishers_)
    assert shared.fishers_ is first.fishers_
    own = ROSE(tiny_vae, aggregate="two-sided", progress=False).fit(fit, held_out=held)
    np.testing.assert_allclose(shared.score(many[:8]), own.score(many[:8]), rtol=1e-6, atol=1e-9)
    with pytest.raises(RoseError, match=r"^these Fishers were fitted on other images"):
        ROSE(tiny_vae, progress=False).fit(many[5:35], held_out=held, fishers=first.fishers_)
    with pytest.raises(RoseError, match=r"other Fisher settings than this ROSE's: fisher 'ekfac' ≠ 'kfac'$"):
        ROSE(tiny_vae, fisher="kfac", progress=False).fit(fit, held_out=held, fishers=first.fishers_)
    with torch.no_grad():
        next(tiny_vae.parameters()).mul_(1.01)
    with pytest.raises(RoseError, match=r"^these Fishers were fitted on model \w+, this ROSE's is \w+$"):
        ROSE(tiny_vae, progress=False).fit(fit, held_out=held, fishers=first.fishers_)


def test_the_roses_that_took_fishers_read_the_layer_scores_they_gave(tiny_vae, many, monkeypatch):
    """The variants sharing a Fisher run the model once per image set: the ROSEs given shared Fishers
    (``FittedFishers.share``, as ``FisherPool`` hands them out) read the raw layer scores they gave of the
    same images (their scores as from a fit of their own); a ROSE that fitted its own runs the model at
    each scoring (its timings stay honest), and weights changed in place since are run again."""
    runs: list[int] = []
    real = LayerStream.scores

    def counting(self, x, fishers, **kw):
        runs.append(id(self))
        return real(self, x, fishers, **kw)

    monkeypatch.setattr(LayerStream, "scores", counting)
    fit, held, test = many[:30], many[30:], many[:8]
    alone = ROSE(tiny_vae, progress=False).fit(fit, held_out=held)
    alone.score(test)
    alone.score(test)
    assert runs == [id(alone.stream)] * 3  # the statistics images, then the test images twice
    runs.clear()
    fishers = ROSE(tiny_vae, progress=False).fit_fisher(fit).share()
    first = ROSE(tiny_vae, progress=False).fit(fit, held_out=held, fishers=fishers)
    first.score(test)
    assert runs == [id(first.stream)] * 2  # the statistics images, the test images
    shared = ROSE(tiny_vae, aggregate="two-sided", progress=False).fit(fit, held_out=held, fishers=fishers)
    scores = shared.score(test)
    assert runs == [id(first.stream)] * 2
    own = ROSE(tiny_vae, aggregate="two-sided", progress=False).fit(fit, held_out=held)
    np.testing.assert_allclose(scores, own.score(test), rtol=1e-6, atol=1e-9)
    runs.clear()
    with torch.no_grad():
        next(tiny_vae.parameters()).mul_(1.01)
    shared.score(test)
    assert runs == [id(shared.stream)]  # other weights: run again


def test_evaluate_fits_the_rose_variants_fishers_in_one_set_of_passes(tiny_vae, monkeypatch):
    """rose-ekfac, rose-gmm and rose-two-sided read one EKFAC Fisher; rose-diag's is fitted beside it, in
    the same passes, and scores as its own evaluation does."""
    fits = []

    def counting(lead, images, beside=()):
        fits.append([lead.fisher, *(a.fisher for a in beside)])
        return fit_together(lead, images, beside)

    monkeypatch.setattr(fishers_module, "fit_together", counting)
    monkeypatch.setattr(detector_module, "fit_together", counting)
    methods = ["rose-ekfac", "rose-diag", "rose-gmm", "rose-two-sided"]
    spec = EvalSpec(
        "fashion_mnist", ood=["mnist"], methods=methods, fit_samples=30, stats_samples=24, test_samples=10
    )
    result = evaluate(tiny_vae, spec, progress=False, tpr=0.95)
    assert fits == [["ekfac", "diag"]]
    dets = result.detectors
    assert dets["rose-gmm"].fishers_ == dets["rose-ekfac"].fishers_ == dets["rose-two-sided"].fishers_
    for method in ("rose-two-sided", "rose-diag"):
        alone = evaluate(tiny_vae, replace(spec, methods=[method]), progress=False)
        assert result.metrics()[method]["mnist"]["auroc"] == alone.metrics()[method]["mnist"]["auroc"]


@pytest.mark.parametrize(
    "settings", [{"adjust": "both"}, {"aggregate": "gmm:k=auto", "features": "layers,stats"}]
)
def test_fit_columns_is_fit_stats_on_columns_already_computed(tiny_vae, many, settings):
    """A ROSE fitted on the statistics images' columns (raw layer scores, loss, extra columns: what the
    bench compares settings on) scores as the ROSE fitted on the images, with the same fit warnings;
    scoring an unfitted one, or columns that give non-finite scores, is refused in one line."""
    fit, held, test = many[:30], many[30:], many[:8]
    det = ROSE(tiny_vae, progress=False, **settings).fit(fit, held_out=held)
    raw, loss = det.layer_scores_and_loss(held)
    extra, names = det.extra_features(held, loss)
    other = ROSE(tiny_vae, progress=False, **settings)
    with pytest.raises(RoseError, match="not fitted"):
        other.score_columns(raw.numpy(), loss.numpy())
    other.fit_columns(raw.numpy(), loss.numpy(), extra, names)
    assert other.fit_warnings_ == det.fit_warnings_ and other.extra_columns_ == det.extra_columns_
    np.testing.assert_array_equal(other.held_out_scores_, det.held_out_scores_)
    t_raw, t_loss = det.layer_scores_and_loss(test)
    t_extra = det.extra_features(test, t_loss)[0]
    np.testing.assert_array_equal(
        other.score_columns(t_raw.numpy(), t_loss.numpy(), t_extra), det.score(test)
    )
    t_raw[0, 0] = float("nan")
    with pytest.raises(RoseError, match="non-finite scores"):
        other.score_columns(t_raw.numpy(), t_loss.numpy(), t_extra)
