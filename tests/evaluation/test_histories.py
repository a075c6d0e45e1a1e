"""Compression histories in an evaluation: matching OOD sets to the in-distribution set's JPEG history and
the warning when they differ."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.data import load_images
from roseood.data.jpeg import JpegHistory
from roseood.errors import DataError
from roseood.evaluation.evaluate import evaluate
from roseood.evaluation.histories import compression_report, matched_sources, parse_match
from roseood.evaluation.splits import OVERALL, EvalSpec
from roseood.models import VAE
from tests.data.test_data_jpeg import photos


def _npz(path: Path, images: np.ndarray) -> str:
    np.savez(path, images=images)
    return str(path)


@pytest.fixture
def sets(tmp_path: Path) -> dict[str, str]:
    """A JPEG'd (quality 75) in-distribution set, the same kind of photos stored losslessly as OOD."""
    q75 = JpegHistory(75)
    return {
        "in": _npz(tmp_path / "in.npz", q75.apply(photos(40, seed=0))),
        "fit": _npz(tmp_path / "fit.npz", q75.apply(photos(40, seed=1))),
        "ood": _npz(tmp_path / "ood.npz", photos(24, seed=2)),
    }


def test_parse_match_takes_auto_or_a_history() -> None:
    assert parse_match(None) is None and parse_match("auto") == "auto" and parse_match("75:4:4:4")
    with pytest.raises(DataError, match="match_jpeg is auto or QUALITY"):
        parse_match("best")
    with pytest.raises(DataError, match="match_jpeg"):
        EvalSpec(in_data="x", ood=["y"], methods=["nll"], match_jpeg="101")


def test_matched_sources_leave_generated_and_matched_sets_alone(sets: dict[str, str]) -> None:
    in_set = load_images(sets["in"], channels=3, size=32)
    sources = [sets["ood"], "noise", "celeba+jpeg90"]
    assert matched_sources(sources, None, in_set) == sources
    assert matched_sources(sources, "auto", in_set) == [sets["ood"] + "+jpeg75", "noise", "celeba+jpeg90"]
    assert matched_sources(sources, "60:4:4:4", in_set)[0] == sets["ood"] + "+jpeg60-444"
    lossless = load_images(sets["ood"], channels=3, size=32)
    assert matched_sources(sources, "auto", lossless) == sources  # no history found: nothing to match


def test_a_set_stored_unlike_the_in_distribution_set_is_warned_about(sets: dict[str, str]) -> None:
    in_set = load_images(sets["in"], channels=3, size=32)
    ood = {
        "ood": load_images(sets["ood"], channels=3, size=32),
        "ood+jpeg75": load_images(sets["ood"] + "+jpeg75", channels=3, size=32),
        "noise": load_images("noise", n=8, channels=3, size=32),
    }
    found, lines = compression_report(in_set, ood)
    assert len(lines) == 1 and lines[0].startswith("ood: not stored like")
    assert "--match-jpeg 75:4:2:0" in lines[0] and "--ood ood+jpeg75" in lines[0]
    assert found["ood+jpeg75"] == found[in_set.name] == "decoded JPEG (quality 75, 4:2:0)"
    assert "noise" not in found


def test_a_jpeg_ood_folder_beside_lossless_training_images_is_warned_about(sets: dict[str, str]) -> None:
    lossless = load_images(sets["ood"], channels=3, size=32)
    jpeg = load_images(sets["fit"], channels=3, size=32)
    found, lines = compression_report(lossless, {"photos": jpeg, "mnist": jpeg})
    assert found["photos"].startswith("decoded JPEG (quality 75") and len(lines) == 1
    assert lines[0].startswith("photos: decoded JPEG") and "mnist" not in found  # named sets: not searched


def test_evaluate_matches_the_ood_images_it_was_asked_to(
    sets: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``match_jpeg="auto"``: the OOD set is named with the history, holds the same images as stored put
    through it, and the settings say each set's history; unmatched, the mismatch is stated in one line."""
    vae = VAE(in_channels=3, ngf=4, nz=4)
    spec = EvalSpec(
        in_data=sets["in"],
        fit_data=sets["fit"],
        ood=[sets["ood"], OVERALL],
        methods=["nll"],
        fit_samples=20,
        stats_samples=10,
        test_samples=16,
        batch_size=8,
        overall_per_set=8,
    )
    plain = evaluate(vae, spec, progress=False)
    assert "not stored like" in capsys.readouterr().err
    matched = evaluate(vae, replace(spec, match_jpeg="auto"), progress=False)
    assert "not stored like" not in capsys.readouterr().err
    name = sets["ood"] + "+jpeg75"
    assert set(matched.scores["nll"]) == {sets["in"], name, OVERALL}
    assert matched.settings["compression"][name] == "decoded JPEG (quality 75, 4:2:0)"
    assert plain.settings["compression"][sets["ood"]] == "not the in-distribution set's"
    np.testing.assert_array_equal(matched.scores["nll"][sets["in"]], plain.scores["nll"][sets["in"]])
    assert not np.array_equal(matched.scores["nll"][name], plain.scores["nll"][sets["ood"]])


def test_no_ood_image_reaches_a_fitted_quantity(sets: dict[str, str], tmp_path: Path) -> None:
    """The density variants fit their mixture, and every detector its threshold, on in-distribution images
    only: evaluated against other OOD sets (matched or not), the in-distribution scores and the thresholds
    are the same to the bit."""
    torch.manual_seed(0)
    vae = VAE(in_channels=3, ngf=4, nz=4)
    other = _npz(tmp_path / "other.npz", photos(24, seed=9)[:, ::-1].copy())
    spec = EvalSpec(
        in_data=sets["in"],
        fit_data=sets["fit"],
        ood=[sets["ood"]],
        methods=["rose-gmm-stats", "rose-ekfac"],
        fit_samples=20,
        stats_samples=20,
        test_samples=16,
        batch_size=8,
    )
    first = evaluate(vae, spec, progress=False, tpr=0.95)
    second = evaluate(vae, replace(spec, ood=[other, "noise"], match_jpeg="auto"), progress=False, tpr=0.95)
    for method in spec.methods:
        np.testing.assert_array_equal(first.scores[method][sets["in"]], second.scores[method][sets["in"]])
        assert first.thresholds[method] == second.thresholds[method]
