"""ROSE aggregations on synthetic layer scores, their save/load through ROSE, and degenerate-fit warnings."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from sklearn.covariance import LedoitWolf
from sklearn.mixture import GaussianMixture

from roseood.detectors import ROSE, Detector
from roseood.detectors.aggregation import (
    AGGREGATIONS,
    ReluNorm,
    density_problem,
    make_aggregation,
    threshold_at,
    tie_problem,
    tie_share,
)
from roseood.detectors.rose.problems import layer_problems
from roseood.errors import DataError, DegenerateFitWarning, RoseError

LAYERS = ["a", "b", "c"]


@pytest.fixture
def raw() -> np.ndarray:
    """Heavy-tailed, positive, well-behaved layer scores of 200 'statistics images' (3 layers)."""
    return np.random.default_rng(0).lognormal(mean=[3.0, 5.0, 1.0], sigma=0.5, size=(200, 3))


def test_relu_norm_is_the_papers_formula_and_max_z_has_no_relu(raw):
    agg, plain = make_aggregation("relu-norm:beta=0.5,p=2"), make_aggregation("max-z")
    agg.fit(raw[:100])
    plain.fit(raw[:100])
    z = (raw - raw[:100].mean(0)) / raw[:100].std(0, ddof=1)
    np.testing.assert_allclose(agg(raw), np.sqrt((np.maximum(z + 0.5, 0) ** 2).sum(1)))
    np.testing.assert_allclose(plain(raw), z.max(1))
    assert (plain(raw) < 0).any() and tie_share(plain(raw)) == 0.0


@pytest.mark.parametrize("p", [2.0, math.inf])
def test_ties_max_orders_the_images_at_zero_and_keeps_the_rest(raw, p):
    paper, ordered = make_aggregation("relu-norm", p=p), make_aggregation("relu-norm", p=p, ties="max")
    paper.fit(raw)
    ordered.fit(raw)
    kept, new = paper(raw), ordered(raw)
    zero = kept == 0
    assert zero.sum() > 10  # most images lie below every mean somewhere: the paper's score ties them
    np.testing.assert_array_equal(new[~zero], kept[~zero])  # every positive score is unchanged (same code)
    z = (raw - raw.mean(0)) / raw.std(0, ddof=1)
    np.testing.assert_allclose(new[zero], z[zero].max(1))
    assert (new[zero] <= 0).all() and tie_share(new) == 0.0
    # the paper's ties lie below its 95 %-TPR threshold, so they change no decision and are not reported
    assert tie_problem(raw, LAYERS, ordered) == [] == tie_problem(raw, LAYERS, paper)


def test_an_unknown_tie_rule_is_refused():
    with pytest.raises(RoseError, match="ties must be one of keep, max"):
        make_aggregation("relu-norm:ties=random")


def test_log_z_normalises_log_scores(raw):
    agg = make_aggregation("log-z")
    agg.fit(raw)
    logs = np.log(raw)
    np.testing.assert_allclose(agg(raw), ((logs - logs.mean(0)) / logs.std(0, ddof=1)).max(1))


def test_two_sided_counts_a_layer_far_below_as_much_as_one_far_above(raw):
    agg = make_aggregation("two-sided")
    agg.fit(raw)
    logs = np.log(raw)
    z = (logs - logs.mean(0)) / logs.std(0, ddof=1)
    np.testing.assert_allclose(agg(raw), np.abs(z).max(1))
    up, down = raw[:5] * np.array([50.0, 1.0, 1.0]), raw[:5] * np.array([1 / 50, 1.0, 1.0])
    one_sided = make_aggregation("log-z")
    one_sided.fit(raw)
    assert agg(down).min() > np.quantile(agg(raw), 0.99) and agg(up).min() > np.quantile(agg(raw), 0.99)
    assert one_sided(down).max() < np.quantile(one_sided(raw), 0.99)  # what one side misses
    two = make_aggregation("two-sided:p=2")
    two.fit(raw)
    np.testing.assert_allclose(two(raw), np.sqrt((z**2).sum(1)))
    with pytest.raises(RoseError, match="does not take beta"):
        make_aggregation("two-sided:beta=1")


def test_gaussian_is_negative_log_density_under_ledoit_wolf(raw):
    agg = make_aggregation("gaussian")
    agg.fit(raw)
    lw = LedoitWolf().fit(np.log(raw))
    expected = -multivariate_normal(lw.location_, lw.covariance_).logpdf(np.log(raw))
    np.testing.assert_allclose(agg(raw), expected)


def test_densities_score_outliers_higher(raw):
    outlier = raw[:5] * np.array([50.0, 1.0, 1 / 50])  # one layer far up, one far down
    for name in ("gaussian", "gmm:k=2"):
        agg = make_aggregation(name)
        agg.fit(raw)
        assert agg(outlier).min() > np.quantile(agg(raw), 0.99), name


def test_spec_parsing_and_errors():
    gmm = make_aggregation("gmm:k=4, reg=0.01")
    assert gmm.params() == {"k": 4, "reg": 0.01, "seed": 0} and gmm.spec == "gmm:k=4,reg=0.01,seed=0"
    with pytest.raises(RoseError, match="unknown aggregation 'mean'"):
        make_aggregation("mean")
    with pytest.raises(RoseError, match="does not take beta"):
        make_aggregation("max-z:beta=3")
    with pytest.raises(RoseError, match="bad parameter for aggregation 'gmm'"):
        make_aggregation("gmm:k=two")
    with pytest.raises(RoseError, match="not key=value"):
        make_aggregation("gmm:4")
    with pytest.raises(RoseError, match="p must be"):
        make_aggregation("log-z:p=0.5")


@pytest.mark.parametrize("name", list(AGGREGATIONS))
def test_rose_round_trips_each_aggregation_fitted_on_the_statistics_images(name, tiny_vae, images, tmp_path):
    spec = "gmm:k=1" if name == "gmm" else name  # 8 statistics images: one component
    det = ROSE(tiny_vae, fisher="diag", aggregate=spec).fit(images[:16], held_out=images[16:])
    reference = make_aggregation(spec)
    reference.fit(det.layer_scores(images[16:]).numpy())  # the statistics images, not the Fisher's
    np.testing.assert_allclose(det.score(images), reference(det.layer_scores(images).numpy()))
    det.save(tmp_path / "rose.pt")
    loaded = Detector.load(tmp_path / "rose.pt", tiny_vae)
    assert isinstance(loaded, ROSE) and loaded.aggregate == spec
    np.testing.assert_allclose(loaded.score(images), det.score(images))


def test_statistics_images_must_not_be_the_fishers(tiny_vae, images):
    with pytest.raises(DataError, match="statistics need other ones"):
        ROSE(tiny_vae, fisher="diag").fit(images[:8], held_out=images[:8].clone())


def test_beta_and_p_reach_only_aggregations_that_take_them(tiny_vae):
    assert ROSE(tiny_vae, aggregate="log-z", p=2.0).score_arguments.aggregation().params() == {
        "beta": 0.0,
        "p": 2.0,
        "ties": "keep",
    }
    with pytest.raises(RoseError, match="does not take beta"):
        ROSE(tiny_vae, aggregate="gaussian", beta=3.0)


# -- degenerate fits ---------------------------------------------------------------------------------
def test_well_behaved_scores_raise_no_warning(raw):
    agg = make_aggregation("max-z")
    agg.fit(raw)
    assert layer_problems(raw, LAYERS) == [] and tie_problem(raw, LAYERS, agg) == []


def test_ties_below_the_threshold_change_no_decision_and_are_not_reported(raw):
    agg = make_aggregation("relu-norm")
    agg.fit(raw[:, :1])  # one skewed layer: most images lie below its mean, so ReLU makes them 0
    scores = agg(raw[:, :1])
    assert 0.5 < tie_share(scores) < 0.95 and threshold_at(scores) > 0  # every tied image is called in
    assert tie_problem(raw[:, :1], LAYERS[:1], agg) == []


def test_ties_at_the_threshold_are_reported_with_the_fix(raw):
    agg = make_aggregation("relu-norm:beta=-2.5")  # only images 2.5 σ above the mean stay above 0
    agg.fit(raw[:, :1])
    share = float((agg(raw[:, :1]) == 0).mean())
    assert share >= 0.95  # so the 95 %-TPR threshold is 0, and a decision cannot order the images at 0
    [message] = tie_problem(raw[:, :1], LAYERS[:1], agg)
    assert f"{share:.0%} of the statistics images get tied" in message and "layer a" in message
    assert "95%-TPR decision threshold falls on them" in message
    assert "max-z or log-z" in message and "beta=3" in message
    assert tie_problem(raw[:, :1], LAYERS[:1], agg, tpr=0.99) == []  # 99 %: above the 98 % at 0
    fixed = make_aggregation("relu-norm:beta=3")
    fixed.fit(raw[:, :1])
    assert tie_problem(raw[:, :1], LAYERS[:1], fixed) == []


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (lambda n: np.r_[np.inf, np.ones(n - 1)], "non-finite layer scores"),
        (lambda n: np.logspace(10, 20, n), "dynamic range"),
        (lambda n: np.full(n, 7.0) + np.arange(n) * 1e-12, "barely vary"),
        (lambda n: np.r_[np.zeros(n // 4), np.arange(1, n - n // 4 + 1.0)], "tied scores"),
    ],
)
def test_each_layer_problem_names_the_layer(raw, column, expected):
    bad = raw.copy()
    bad[:, 1] = column(len(raw))
    [message] = layer_problems(bad, LAYERS)
    assert message.startswith("layer b:") and expected in message
    # a column that is no layer (a model statistic, the images' complexity): --layers cannot drop it, and
    # ties are its nature (a PNG size in whole bytes), not a degenerate fit
    found = layer_problems(bad, LAYERS, extras=["b"])
    if expected == "tied scores":
        assert found == []
    else:
        [message] = found
        assert message.startswith("column b:") and expected in message and "--layers" not in message


def test_rose_warns_at_fit_time_and_keeps_the_warning(tiny_vae, images, tmp_path):
    with pytest.warns(DegenerateFitWarning, match="tied ROSE scores"):
        det = ROSE(tiny_vae, fisher="diag", beta=-1e6).fit(images[:16], held_out=images[16:])
    det.save(tmp_path / "rose.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading does not warn again
        loaded = Detector.load(tmp_path / "rose.pt", tiny_vae)
    assert isinstance(loaded, ROSE) and loaded.fit_warnings_ == det.fit_warnings_ != []


def test_files_without_an_aggregation_state_load_as_the_papers_score(tiny_vae, images):
    det = ROSE(tiny_vae, fisher="diag").fit(images[:16], held_out=images[16:])
    state = det.state()
    del state["aggregation"], state["fit_warnings"]
    old = ROSE(tiny_vae, fisher="diag")
    old.load_state(state)
    old.fitted_ = True
    z = (det.layer_scores(images) - det.mean_) / det.std_
    np.testing.assert_allclose(old.score(images), torch.relu(z).amax(1).numpy())
    assert math.isinf(old.p)


def test_a_list_of_betas_holds_one_per_column_when_fitted_and_loaded():
    """Found by the resealed-file property test: a list β of another length reached numpy's broadcasting
    when scoring; now fitting and loading refuse it in one line."""
    from roseood.errors import CheckpointError

    with pytest.raises(RoseError, match="empty list"):
        ReluNorm(beta=[])
    raw = np.random.default_rng(0).random((20, 3)) + 0.5
    with pytest.raises(RoseError, match="2 values for 3 layer-score columns"):
        ReluNorm(beta=[0.0, 1.0]).fit(raw)
    fitted = ReluNorm(beta=[0.0, 1.0, 2.0])
    fitted.fit(raw)
    with pytest.raises(CheckpointError, match="3 values for 4 layer-score columns"):
        fitted.load_state({k: torch.cat([v, v[:1]]) for k, v in fitted.state().items()}, 4)


def test_z_scores_from_a_handful_of_images_say_their_bound():
    """On n images no z-score exceeds (n − 1)/√n: rose-two-sided from 2 statistics images gave the
    threshold 1/√2 whatever the data. Fewer than 20 images: one line saying so; 20 or more: none."""
    from roseood.detectors.aggregation import zscore_problem

    rng = np.random.default_rng(0)
    two = rng.lognormal(size=(2, 5))
    agg = make_aggregation("two-sided")
    agg.fit(two)
    assert np.allclose(np.abs(agg.normalize(two)), 1 / np.sqrt(2))  # the bound, whatever the data
    (message,) = zscore_problem(two, agg)
    assert "from 2 statistics images" in message and "(n − 1)/√n = 0.707" in message
    assert zscore_problem(rng.lognormal(size=(20, 5)), make_aggregation("relu-norm")) == []
    assert zscore_problem(two, make_aggregation("gaussian")) == []  # a density says its own


def test_a_density_with_more_columns_than_images_says_so_in_one_line():
    """A full covariance of L columns needs more than L images (GMM's k=auto: more than 2L, it fits on
    halves); below that the density rests on shrinkage or the diagonal, and the fit says how many."""
    rng = np.random.default_rng(0)
    wide, narrow = rng.lognormal(size=(30, 20)), rng.lognormal(size=(60, 5))
    (message,) = density_problem(wide, make_aggregation("gmm:k=auto"))
    assert "models 20 columns from 30 statistics images" in message and "at least 42 (200" in message
    assert density_problem(narrow, make_aggregation("gmm:k=auto")) == []
    assert density_problem(wide, make_aggregation("gaussian")) == []  # 30 > 20 + 1
    assert density_problem(wide[:15], make_aggregation("gaussian"))[0].count("at least 21") == 1
    assert density_problem(wide, make_aggregation("relu-norm")) == []


@pytest.mark.parametrize(
    "spec", ["two-sided:p=nan", "relu-norm:p=nan", "relu-norm:beta=nan", "relu-norm:beta=inf"]
)
def test_nan_or_infinite_parameters_are_refused(spec):
    """A NaN p or β would fit a detector whose threshold is NaN (refused only later, by rose score)."""
    with pytest.raises(RoseError, match="must be"):
        make_aggregation(spec)


def test_every_constructor_parameter_is_accepted_in_a_spec():
    """``gmm:k=auto,max_k=7`` (documented in detectors.md) was refused: the accepted names came from a
    default instance's params(), which leave out max_k; now from the constructor, as for detectors."""
    assert make_aggregation("gmm:k=auto,max_k=7").max_k == 7
    with pytest.raises(RoseError, match="does not take bogus; its parameters: k, reg, seed, max_k"):
        make_aggregation("gmm:bogus=1")


@pytest.mark.parametrize("spec", ["gmm:k=auto", "gaussian", "diffpath"])
def test_the_densities_fit_and_score_with_blas_on_one_thread(spec: str) -> None:
    """Even where the caller allows BLAS more threads (two here), the mixtures' small matrices are fitted
    and scored on one: more threads only waited on each other (20× slower beside other jobs)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from roseood.detectors import aggregation
    from roseood.detectors.diffusion import MixtureDensity

    seen: dict[str, list[set[int]]] = {"fit": [], "score": []}

    def recording(what: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen[what].append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
            return real(*args, **kwargs)

        return call

    agg = MixtureDensity(components=(1, 2), folds=2) if spec == "diffpath" else make_aggregation(spec)
    v = np.random.default_rng(0).lognormal(size=(60, 3))
    with threadpool_limits(2, user_api="blas"), pytest.MonkeyPatch.context() as m:
        for cls in (GaussianMixture, LedoitWolf):
            m.setattr(cls, "fit", recording("fit", cls.fit))
        m.setattr(aggregation, "logsumexp", recording("score", aggregation.logsumexp))
        agg.fit(v)
        assert np.isfinite(agg(v)).all()
    assert seen["fit"] and seen["score"]
    assert all(s == {1} for s in seen["fit"] + seen["score"]), seen
