"""Long runs say what they will take before they are far along: a ROSE's own stages, or one batch of
image passes, timed and extrapolated; the timing leaves the global RNG, the model's gradients and the
detector as they were."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roseood.detectors import ROSE, make_detector
from roseood.detectors.rose.cost import StageSeconds
from roseood.evaluation.evaluate import evaluate, fit_calibrated
from roseood.evaluation.forecast import forecast_fit, loss_seconds
from roseood.evaluation.splits import EvalSpec
from roseood.progress import forecast
from tests.detectors.fake_models import tiny_vae


def test_a_forecast_is_one_line_with_the_machine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    forecast("training 3 epochs", 250, "from 3 timed batches")
    assert capsys.readouterr().err == (
        "training 3 epochs: ≈ 4 min 10 s on this machine (2 threads; from 3 timed batches)\n"
    )
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    forecast("scoring", 5)
    assert capsys.readouterr().err == "scoring: ≈ 5 s on this machine (1 thread)\n"


def test_a_forecast_on_a_busy_machine_says_it_may_take_longer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run beside other work takes longer than its warm-up said (a first epoch timed beside a benchmark
    took 3 min 51 s for a forecast 2 min 18 s); the line says so rather than promising the time."""
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("os.getloadavg", lambda: (3.62, 2.75, 2.51), raising=False)
    forecast("training 1 epoch", 138, "from 3 timed batches")
    line = capsys.readouterr().err
    assert line.startswith("training 1 epoch: ≈ 2 min 18 s on this machine")
    busy = "the machine is busy (load average 3.6 on 2 cores): other work can make it longer"
    assert line.endswith(f"{busy})\n")


@pytest.mark.parametrize("method", ["nll", "rose-ekfac"])
def test_timing_leaves_rng_gradients_and_detector_alone(
    method: str, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny_vae()
    det = make_detector(method, model)
    images = np.random.default_rng(0).integers(0, 256, (8, 1, 32, 32), dtype=np.uint8)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    forecast_fit(det, 1, images, 1000, 200, "fitting on 1200 images")
    assert torch.equal(torch.get_rng_state(), before)
    assert all(p.grad is None for p in model.parameters())
    assert not det.fitted_ and getattr(det, "fishers_", None) is None
    *said, line = capsys.readouterr().err.splitlines()
    assert line.startswith("fitting on 1200 images: ≈ ")
    basis = "the Fisher" if method.startswith("rose") else "per image pass, timed on 8"
    assert basis in line
    # a ROSE's timing says itself first: on a class-conditional DDPM it takes minutes
    assert said == (
        [f"{det.name}: timing its stages on one batch for the forecast"] if method != "nll" else []
    )


def test_the_timed_batch_keeps_at_most_its_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose images keep much for the backward pass (a class-conditional marginal: C·K denoiser
    rows each; 64 images took 23 GB) is timed on as many images as the allowance holds, at least one."""
    images = np.random.default_rng(0).integers(0, 256, (8, 1, 32, 32), dtype=np.uint8)
    monkeypatch.setattr("roseood.evaluation.forecast.TIMED_BYTES", 1)
    timed = loss_seconds(tiny_vae(), images)
    assert timed is not None and timed[1] == 1 and timed[0] > 0


def test_a_rose_fit_is_forecast_from_its_stages() -> None:
    """Per image: each Fisher pass on the Fisher images (the first on as many as its factors take before
    they settle), the layer scores on the held-out ones; the passes' ends (eigendecompositions) once."""
    stages = StageSeconds(passes=(0.5, 0.125), first_pass=None, fixed=3.0, scoring=0.25, images=8)
    assert stages.fit(100, 40) == pytest.approx(100 * 0.5 + 100 * 0.125 + 3.0 + 40 * 0.25)
    settled = StageSeconds(passes=(0.5, 0.125), first_pass=60, fixed=3.0, scoring=0.25, images=8)
    assert settled.fit(100, 40) == pytest.approx(60 * 0.5 + 100 * 0.125 + 3.0 + 40 * 0.25)
    assert settled.fit(50, 40) == stages.fit(50, 40)
    line = settled.basis()
    assert (
        "timed on 8 images: the Fisher's passes 500 ms + 125 ms per image (the first on 60 at most)" in line
    )
    assert "+ 3 s, the layer scores 250 ms per image" in line


def test_the_first_pass_is_forecast_to_stop_where_ekfac_stops_it() -> None:
    """EKFAC's first pass stops once its factors have FACTOR_IMAGES images and FACTOR_ROWS rows per
    coordinate; extrapolated from one batch, the forecast says when (a VAE's first pass takes 256 of
    10 000 images; forecasting all of them overstated the fit several times)."""
    from roseood.curvature import EKFAC

    det = make_detector("rose-ekfac", tiny_vae(), progress=False)
    images = np.random.default_rng(0).integers(0, 256, (300, 1, 32, 32), dtype=np.uint8)
    fishers = det.fit_fisher(images)
    forecast = [f.first_pass_images() for f in fishers.values()]
    taken = [f.count for f in fishers.values()]  # images the first pass gave each layer
    step = det.stream.images_per_batch(det.batch_size)
    for said, took in zip(forecast, taken, strict=True):
        assert said is not None and said >= EKFAC.FACTOR_IMAGES
        assert min(300, said) <= took < min(300, said) + step  # it stops between batches


def test_evaluate_and_fit_forecast_only_with_progress(spec: EvalSpec, capsys) -> None:
    model = tiny_vae()
    quiet = evaluate(model, spec, progress=False)
    assert "≈" not in capsys.readouterr().err
    shown = evaluate(model, spec, progress=True)
    assert "evaluating 2 methods (fitted on 40 images, 48 scored): ≈ " in capsys.readouterr().err
    for m in spec.methods:  # the forecast changed nothing
        for s, scores in quiet.scores[m].items():
            np.testing.assert_array_equal(scores, shown.scores[m][s])
    fit_calibrated("nll", model, spec, progress=True)
    assert "fitting nll on 40 images: ≈ " in capsys.readouterr().err


def test_a_run_up_to_twice_its_timed_batch_is_not_forecast(capsys) -> None:
    """Timing a batch would cost about what such a run does: a fit of 16 images, timed on 8, says nothing;
    one of 17 is forecast."""
    det = ROSE(tiny_vae(), fisher="diag", batch_size=8)
    images = np.random.default_rng(0).integers(0, 256, (8, 1, 32, 32), dtype=np.uint8)
    forecast_fit(det, 1, images, 12, 4, "fitting")
    assert capsys.readouterr().err == ""
    forecast_fit(det, 1, images, 13, 4, "fitting")
    assert "fitting: ≈ " in capsys.readouterr().err


def test_a_method_weighs_as_many_passes_as_its_unet_evaluations() -> None:
    """The forecast's unit is one forward + backward of the K-row loss (about 3·K UNet passes): DDPM-OOD's
    1250 UNet passes per image weigh 1250 / (3·K), the forward-only denoising loss 1/3, ROSE 1."""
    from roseood.detectors import make_detector
    from roseood.evaluation.forecast import pass_weight
    from roseood.models.diffusion import DiffusionModel

    model = DiffusionModel(in_channels=1, image_size=8, widths=(8, 16), denoising={"k": 3}).eval()
    reconstruction = make_detector("reconstruction", model)
    assert reconstruction.nfe_per_image == 1250
    assert pass_weight(reconstruction, model) == pytest.approx(1250 / 9)
    assert pass_weight(make_detector("denoising", model), model) == pytest.approx(1 / 3)
    assert pass_weight(make_detector("rose-diag", model), model) == 1.0
    assert pass_weight(make_detector("nll", tiny_vae()), tiny_vae()) == 1.0


def test_a_variant_reading_an_earlier_ones_layer_scores_is_forecast_as_free(
    spec: EvalSpec, monkeypatch
) -> None:
    """rose-gmm takes rose-ekfac's Fishers and layer scores: no stage of its own; rose-diag's Fishers are
    fitted beside rose-ekfac's (in the timed passes), so it adds only its layer scores: its statistics
    and the scored images."""
    import importlib
    from dataclasses import replace

    from roseood.evaluation.evaluate import check_request
    from roseood.evaluation.splits import load_fit_images

    forecasts = importlib.import_module("roseood.evaluation.forecast")
    said: list[float] = []
    monkeypatch.setattr(
        ROSE, "stage_seconds", lambda self, x, beside: StageSeconds((1.0,), None, 10.0, 0.5, 8)
    )
    monkeypatch.setattr(forecasts, "forecast", lambda what, seconds, basis="": said.append(seconds))
    model = tiny_vae()
    fit = load_fit_images(spec, model)
    tested = [fit.whole]
    for methods in (["rose-ekfac"], ["rose-ekfac", "rose-gmm"], ["rose-ekfac", "rose-diag"]):
        asked = replace(spec, methods=methods, stats_samples=max(spec.stats_samples, 20))  # rose-gmm's least
        built = {m: members[0] for m, members in check_request(asked, [model], None, False).items()}
        forecasts.forecast_evaluation(asked, [model], built, fit, tested)
    scored = 0.5 * (len(fit.held_out) + len(tested[0]))
    assert said[1] == said[0] and said[2] == said[0] + scored
