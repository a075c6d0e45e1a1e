"""The result cache: evaluations resume without refitting, per-method test limits, the "overall" set."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.errors import DegenerateFitWarning
from roseood.evaluation.cache import CacheWarning, ResultCache, array_digest, cache_key
from roseood.evaluation.evaluate import evaluate
from roseood.evaluation.splits import OVERALL, EvalSpec, overall_scores
from roseood.integrity import seal
from roseood.models import VAE

# The module, not the function ``roseood.evaluation.evaluate`` that the package exports.
evaluate_module = importlib.import_module("roseood.evaluation.evaluate")


def test_scores_are_computed_once_and_a_corrupt_file_is_recomputed(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    calls = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(3.0)

    key = cache_key({"a": 1, "images": array_digest(np.zeros((2, 2), np.uint8))})
    assert cache.scores(key, compute).tolist() == [0, 1, 2]
    assert cache.scores(key, compute).tolist() == [0, 1, 2] and len(calls) == 1
    (tmp_path / "scores" / f"{key}.pt").write_bytes(b"garbage")
    with pytest.warns(CacheWarning, match=f"{key}.pt: cache entry not used"):
        assert cache.scores(key, compute).tolist() == [0, 1, 2] and len(calls) == 2
    assert cache_key({"a": 1}) != cache_key({"a": 2})
    assert array_digest(np.zeros(3, np.uint8)) != array_digest(np.ones(3, np.uint8))


def test_evaluate_resumes_from_the_cache_without_refitting(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ResultCache(tmp_path / "cache")
    first = evaluate(tiny_vae, spec, progress=False, cache=cache)
    fits = []
    original = evaluate_module.fit_detector
    monkeypatch.setattr(evaluate_module, "fit_detector", lambda *a, **k: fits.append(1) or original(*a, **k))
    again = evaluate(tiny_vae, spec, progress=False, cache=cache)
    assert fits == []
    for method in spec.methods:
        for name, values in first.scores[method].items():
            np.testing.assert_array_equal(again.scores[method][name], values)  # read back, not recomputed
    # A lost score file is recomputed from the stored detector, still without refitting.
    next((tmp_path / "cache" / "scores").glob("*.pt")).unlink()
    evaluate(tiny_vae, spec, progress=False, cache=cache)
    assert fits == []


def test_the_forecast_counts_only_what_the_cache_does_not_hold(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run whose scores are all stored forecasts nothing (before: the whole run again, after timing a
    batch); a method added to it is the only one forecast."""
    from dataclasses import replace

    cache, forecast = ResultCache(tmp_path / "cache"), []
    monkeypatch.setattr(evaluate_module, "forecast_evaluation", lambda s, m, d, *a: forecast.append(list(d)))
    evaluate(tiny_vae, spec, progress=True, cache=cache)
    assert forecast == [spec.methods]
    evaluate(tiny_vae, spec, progress=True, cache=cache)
    assert forecast == [spec.methods]  # nothing left to compute: no forecast
    evaluate(tiny_vae, replace(spec, methods=[*spec.methods, "rose-kfac"]), progress=True, cache=cache)
    assert forecast == [spec.methods, ["rose-kfac"]]
    evaluate(tiny_vae, spec, progress=True, cache=cache, tpr=0.95)  # the held-out scores are not stored yet
    assert forecast[-1] == spec.methods


def test_a_rose_variant_added_to_a_cached_evaluation_takes_the_stored_fishers(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding ``rose-two-sided`` to an evaluation whose ``rose-ekfac`` is cached fits no Fisher: it takes the
    Fishers the first run's pool stored in the cache (checked against the same settings, weights and
    images), and scores as it would have with Fishers of its own."""
    from dataclasses import replace

    from roseood.detectors import ROSE

    cache = ResultCache(tmp_path / "cache")
    evaluate(tiny_vae, replace(spec, methods=["rose-ekfac"]), progress=False, cache=cache)
    fitted = []
    real = ROSE.fit_fisher

    def counted(self: ROSE, x: Any, fishers: Any = None) -> Any:
        if fishers is None:  # a fit, not Fishers taken
            fitted.append(1)
        return real(self, x, fishers)

    monkeypatch.setattr(ROSE, "fit_fisher", counted)
    both = replace(spec, methods=["rose-ekfac", "rose-two-sided"])
    added = evaluate(tiny_vae, both, progress=False, cache=cache)
    assert fitted == []
    fresh = evaluate(tiny_vae, both, progress=False)  # no cache: the variant's own fit
    assert fitted == [1]
    # equal up to the stored eigenbases' compact form (Householder vectors): rounding at 1e-6 relative, as
    # tests/detectors/test_rose_fitted.py measures for Fishers saved and loaded
    for name, values in fresh.scores["rose-two-sided"].items():
        np.testing.assert_allclose(added.scores["rose-two-sided"][name], values, rtol=1e-5)
    # without the stored Fishers (a cache from before the pool kept them), the variant fits its own
    for entry in (tmp_path / "cache" / "scores").glob("*.pt"):
        entry.unlink()
    for entry in (tmp_path / "cache" / "states").glob("*.pt"):
        entry.unlink()
    for path in (tmp_path / "cache" / "detectors").glob("*.pt"):
        if torch.load(path, weights_only=True)["params"]["aggregate"] != "relu-norm":
            path.unlink()  # the variant's own entry: it must be fitted again
    evaluate(tiny_vae, both, progress=False, cache=cache)
    assert fitted == [1, 1]


def test_a_detector_loaded_from_the_cache_reports_progress_as_asked(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scores missing beside a cached detector are computed by the loaded detector, which reports its
    progress as the run asks (a saved detector keeps no progress setting)."""
    cache = ResultCache(tmp_path / "cache")
    evaluate(tiny_vae, spec, progress=False, cache=cache)
    for path in (tmp_path / "cache" / "scores").glob("*.pt"):
        path.unlink()
    capsys.readouterr()
    evaluate(tiny_vae, spec, progress=True, cache=cache)
    lines = capsys.readouterr().err.splitlines()
    assert not any("fit:" in line and "pass" in line for line in lines)  # nothing refitted
    assert any(re.search(r"scoring: \d+/\d+", line) for line in lines), lines


def test_overall_mixes_every_loaded_set_and_limits_cut_slow_methods(tiny_vae: VAE, spec: EvalSpec) -> None:
    spec.test_limits = {"nll": 5}
    result = evaluate(tiny_vae, spec, progress=False)
    a, b = spec.ood[0], spec.ood[1]
    rose = result.scores["rose-diag"]
    assert len(rose[a]) == 16 and len(rose[b]) == 12 and len(rose[OVERALL]) == 20  # 10 of each
    assert set(rose[OVERALL]) <= set(rose[a]) | set(rose[b])
    assert all(len(v) == 5 for v in result.scores["nll"].values() if v is not result.scores["nll"][OVERALL])
    assert len(result.scores["nll"][OVERALL]) == 10
    assert "10 random images of each of" in result.settings["ood_sets"][OVERALL]
    assert "nll" in result.settings["test_limits"]


def test_overall_scores_takes_per_set_from_each_member() -> None:
    scores = {"a": np.arange(5.0), "b": np.arange(100.0, 103.0)}
    mixed = overall_scores(scores, ["a", "b"], per_set=4, seed=0)
    assert len(mixed) == 7 and set(mixed[:4]) <= set(scores["a"]) and set(mixed[4:]) == set(scores["b"])


def test_degenerate_fit_warnings_reach_the_settings_also_from_the_cache(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path
) -> None:
    spec.methods = ["rose-diag"]
    spec.detector_kwargs = {"rose-diag": {"beta": -1e6}}  # ReLU puts every image at 0: all tied
    cache = ResultCache(tmp_path / "cache")
    with pytest.warns(DegenerateFitWarning, match="tied ROSE scores"):
        first = evaluate(tiny_vae, spec, progress=False, cache=cache)
    messages = first.settings["fit_warnings"]["rose-diag"]  # (and the few statistics images' bound)
    assert any(m.startswith("100% of the statistics images get tied") for m in messages)
    again = evaluate(tiny_vae, spec, progress=False, cache=cache)  # every score cached
    assert again.settings["fit_warnings"] == first.settings["fit_warnings"]


def _damage_cases(path: Path) -> dict[str, Callable[[], None]]:
    """Ways a cache entry at ``path`` goes bad (each leaves something at ``path``)."""

    def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        def apply() -> None:
            obj = torch.load(path, weights_only=True)
            change(obj)
            torch.save(seal(obj), path)  # a consistent checksum: only the content check can catch it

        return apply

    def to_folder() -> None:
        path.unlink()
        path.mkdir()

    return {
        "empty": lambda: path.write_bytes(b""),
        "folder": to_folder,
        "flipped byte": lambda: path.write_bytes(_flip(path.read_bytes())),
        "wrong length": edit(lambda o: o["arrays"].update(scores=o["arrays"]["scores"][:-3])),
        "NaN-filled": edit(lambda o: o["arrays"]["scores"].fill_(float("nan"))),
        "another key": edit(lambda o: o.update(key="0" * 24)),
    }


def _flip(data: bytes) -> bytes:
    """One bit flipped inside the stored scores (0, 1, 2, ... as float64)."""
    at = data.index(np.arange(5.0).tobytes()) + 12
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize(
    "case", ["empty", "folder", "flipped byte", "wrong length", "NaN-filled", "another key"]
)
def test_a_bad_score_entry_is_recomputed_with_a_warning_naming_it(tmp_path: Path, case: str) -> None:
    cache = ResultCache(tmp_path)
    values = np.arange(5.0)
    key = cache_key({"case": case})
    cache.scores(key, lambda: values, 5)
    path = tmp_path / "scores" / f"{key}.pt"
    _damage_cases(path)[case]()
    with pytest.warns(CacheWarning, match=rf"{re.escape(str(path))}: cache entry not used"):
        np.testing.assert_array_equal(cache.scores(key, lambda: values, 5), values)
    np.testing.assert_array_equal(cache.scores(key, lambda: values * 0, 5), values)  # rewritten: used


def test_non_finite_scores_are_never_stored(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path)
    nan = np.array([1.0, np.nan])
    assert np.isnan(cache.scores("k", lambda: nan, 2)[1]) and not cache.has_scores("k")


@pytest.mark.float_sensitive
def test_swapped_and_damaged_detector_entries_are_refitted_never_used(
    tiny_vae: VAE, spec: EvalSpec, tmp_path: Path
) -> None:
    spec.methods = ["rose-diag", "rose-kfac"]
    cache = ResultCache(tmp_path / "cache")
    first = evaluate(tiny_vae, spec, progress=False, cache=cache)
    for scores in (tmp_path / "cache" / "scores").glob("*.pt"):
        scores.unlink()  # scores come from the detectors again
    a, b = sorted((tmp_path / "cache" / "detectors").glob("*.pt"))
    a_bytes = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(a_bytes)
    with pytest.warns(CacheWarning, match="holds another entry's detector"):
        again = evaluate(tiny_vae, spec, progress=False, cache=cache)
    for method in spec.methods:
        for name, values in first.scores[method].items():
            # refitted on the Fishers the evaluation's pool stored in the cache: equal up to the stored
            # eigenbases' compact form (Householder vectors), rounding at 1e-6 relative, as
            # tests/detectors/test_rose_fitted.py measures for Fishers saved and loaded (3.4e-6 measured);
            # relative to the set's scale, since a score near 0 carries the others' absolute rounding
            # (MKL_CBWR=COMPATIBLE: 3.9e-6 absolute on a score of 0.25 in a set whose largest is 3.5)
            scale = float(np.abs(values).max())
            np.testing.assert_allclose(again.scores[method][name], values, rtol=1e-5, atol=1e-5 * scale)
    for scores in (tmp_path / "cache" / "scores").glob("*.pt"):
        scores.unlink()
    a.write_bytes(b"")
    b.unlink()
    b.mkdir()
    with pytest.warns(CacheWarning) as caught:
        evaluate(tiny_vae, spec, progress=False, cache=cache)
    assert {str(a), str(b)} == {str(w.message).split(": ")[0] for w in caught if w.category is CacheWarning}


def test_scores_are_stored_beside_named_measurements_and_checked_by_name(tmp_path: Path) -> None:
    """Scores and what was measured with them (the seconds they took: one value; the loss: a row each)
    are separate named arrays, each read back as stored; an entry with other names, or a named array
    of the wrong rows, is recomputed with a warning, never read as something else."""
    cache = ResultCache(tmp_path)
    stored = {"scores": np.arange(8.0).reshape(4, 2), "seconds": np.array(1.5), "loss": np.arange(4.0)}
    got = cache.arrays("k", ("scores", "seconds", "loss"), lambda: stored, 4)
    again = cache.arrays("k", ("scores", "seconds", "loss"), lambda: {}, 4)  # read: compute not called
    for found in (got, again):
        assert set(found) == set(stored) and all(np.array_equal(found[n], stored[n]) for n in stored)
    with pytest.warns(CacheWarning, match=r"holds \['loss', 'scores', 'seconds'\], expected \['scores'\]"):
        assert cache.scores("k", lambda: np.zeros(4), 4).tolist() == [0.0] * 4
    cache.arrays("m", ("scores", "loss"), lambda: {"scores": np.zeros(3), "loss": np.zeros(2)})
    with pytest.warns(CacheWarning, match="its loss hold"):
        cache.arrays("m", ("scores", "loss"), lambda: {"scores": np.ones(3), "loss": np.ones(3)}, 3)
