"""Class-conditional UNets (diffusers' ``num_class_embeds``): p(x) judged as the marginal over the classes
(checked against the per-class losses diffusers' own ``add_noise`` and UNet give), or at one label; exact
per-sample gradients of the marginal; what each detector does with them; refusals in one line."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.errors import RoseError
from roseood.models import load_model, model_fingerprint, save_model
from roseood.models.diffusion import diffusers_module, export_diffusers
from tests.curvature.test_grads import assert_batched_grads_exact

CLASSES = 3


def pipeline(folder: Path, condition: str | None = None) -> Path:
    """A tiny DDPMPipeline folder of a UNet2DModel over 3 class labels, written by diffusers itself."""
    d = diffusers_module()
    torch.manual_seed(0)
    unet = d.UNet2DModel(
        sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), norm_num_groups=4,
        layers_per_block=1, down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2,
        num_class_embeds=CLASSES,
    )  # fmt: skip
    with torch.no_grad():  # class embeddings that differ enough to give each class its own loss
        unet.class_embedding.weight.mul_(20)
    d.DDPMPipeline(unet=unet, scheduler=d.DDPMScheduler()).save_pretrained(folder)
    settings = {"denoising": {"k": 2}} | ({"condition": condition} if condition else {})
    (folder / "roseood.json").write_text(json.dumps(settings))
    return folder


def class_losses(folder: Path, model, x: torch.Tensor) -> torch.Tensor:
    """(N, C): each class's K-pair ε-MSE, from diffusers' own UNet and ``add_noise``."""
    d = diffusers_module()
    unet = d.UNet2DModel.from_pretrained(folder / "unet")
    sched = d.DDPMScheduler.from_pretrained(folder / "scheduler")
    x0, out = x * 2 - 1, torch.zeros(len(x), CLASSES)
    with torch.no_grad():
        for c in range(CLASSES):
            for t, e in zip(model.loss_timesteps, model.loss_noise, strict=True):
                tt, ee = t.expand(len(x)), e.expand_as(x0)
                pred = unet(sched.add_noise(x0, ee, tt), tt, class_labels=torch.full((len(x),), c)).sample
                out[:, c] += (pred - ee).pow(2).flatten(1).sum(1)
    return out


def test_the_default_judges_the_marginal_over_the_classes(tmp_path: Path) -> None:
    folder = pipeline(tmp_path / "p")
    model = load_model(folder)
    x = torch.rand(4, 1, 8, 8)
    losses = class_losses(folder, model, x)
    assert (losses.max(1).values - losses.min(1).values).min() > 1  # the classes do differ
    expected = -(torch.logsumexp(-losses, 1) - math.log(CLASSES))
    torch.testing.assert_close(model.nll(x), expected, rtol=1e-5, atol=1e-3)
    assert model.rows_per_input == 2  # the loss's rows (one per pair); the classes run inside each
    assert "class-conditional (3 classes): the loss judges p(x) as the marginal" in model.describe()


def test_one_label_judges_p_x_given_it_and_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    marginal = load_model(pipeline(tmp_path / "m"))
    folder = pipeline(tmp_path / "p", condition="label:1")
    model = load_model(folder)
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(model.nll(x), class_losses(folder, model, x)[:, 1], rtol=1e-5, atol=1e-3)
    assert "p(x | y = 1)" in model.describe() and model.rows_per_input == 2
    assert model_fingerprint(model) != model_fingerprint(marginal)
    save_model(model, tmp_path / "m.pt")
    torch.testing.assert_close(load_model(tmp_path / "m.pt").nll(x), model.nll(x))
    exported = load_model(export_diffusers(model, tmp_path / "out"))  # the condition travels with it
    assert exported.condition.spec == "label:1"
    torch.testing.assert_close(exported.nll(x), model.nll(x))


def test_per_sample_gradients_of_the_marginal_are_exact(tmp_path: Path) -> None:
    """The marginal is not a sum over an image's rows (a log-sum-exp over its classes); its gradient is
    still read exactly from one backward pass, each row's output gradient carrying its class's weight."""
    model = load_model(pipeline(tmp_path / "p"))
    names = model.rose_layers("all")
    assert any("class_embedding" in n for n in names)
    x = torch.rand(3, 1, 8, 8)
    assert_batched_grads_exact(model, model.rose_loss, x, names)


def test_what_each_detector_does_with_a_conditional_model(tmp_path: Path) -> None:
    from roseood.detectors import ROSE, DiffPath, make_detector

    marginal = load_model(pipeline(tmp_path / "m"))
    with pytest.raises(RoseError, match=r"diffpath method needs one class label per image.*label:N"):
        DiffPath(marginal)
    x = torch.rand(40, 1, 8, 8)
    for detector in (make_detector("rose-bands-stats", marginal), ROSE(marginal)):  # the family default
        scores = detector.fit(x[:16], held_out=x[16:]).score(x[:2])
        assert np.isfinite(scores).all()
        assert detector.mean_.shape[0] == len(detector.columns)  # bands: one column per timestep
    labelled = load_model(pipeline(tmp_path / "p", condition="label:2"))
    assert np.isfinite(DiffPath(labelled, steps=3).fit(x).score(x[:2])).all()
    assert labelled.generate(2, steps=3).shape == marginal.generate(3, steps=3)[:2].shape == (2, 1, 8, 8)


@pytest.mark.parametrize(
    ("condition", "phrase"),
    [
        ("label:3", "label:N' with N in 0..2"),
        ("classes", "'marginal' or 'label:N'"),
        (7, "must be 'marginal'"),
    ],
)
def test_a_bad_condition_is_one_line(tmp_path: Path, condition: object, phrase: str) -> None:
    folder = pipeline(tmp_path / "p")
    (folder / "roseood.json").write_text(json.dumps({"condition": condition}))
    with pytest.raises(RoseError) as err:
        load_model(folder)
    assert phrase in str(err.value) and "\n" not in str(err.value)


def test_a_vector_condition_and_training_without_labels_are_refused(tmp_path: Path) -> None:
    folder = pipeline(tmp_path / "p")
    config = json.loads((folder / "unet" / "config.json").read_text())
    model = load_model(folder)
    with pytest.raises(RoseError, match="needs one class label per image; this model judges the marginal"):
        model.train_loss(torch.rand(2, 1, 8, 8))  # trained at each image's label, not the marginal
    (folder / "unet" / "config.json").write_text(json.dumps(config | {"class_embed_type": "timestep"}))
    with pytest.raises(RoseError, match="class_embed_type 'timestep' conditions on a vector"):
        load_model(folder)


def test_a_tight_memory_budget_counts_every_class_row_and_keeps_the_scores(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marginal runs K·C denoiser rows per image: ROSE's memory plan measures an image at C× the
    denoiser rows of one label (issue 60, item 7), and a budget of one image per batch scores as an
    unbounded run does."""
    import roseood.detectors.rose.stream as stream_module
    from roseood.detectors import ROSE

    monkeypatch.setattr(stream_module, "in_use", lambda device: 100 << 20)  # the process's memory, held still
    model = load_model(pipeline(tmp_path / "p"))
    one_label = load_model(pipeline(tmp_path / "q", condition="label:0"))
    x = torch.rand(12, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    free = ROSE(model, fisher="diag").fit(x[:8], held_out=x[8:])
    probe = ROSE(model, fisher="diag", memory="64G")
    _, per_image = probe.stream.probe(x)
    assert per_image > 2 * ROSE(one_label, fisher="diag", memory="64G").stream.probe(x)[1]  # C = 3 rows each
    plan = probe.stream.plan(x, dict.fromkeys(probe.layers, "diag"), batch_size=probe.batch_size)
    tight = plan.fixed + int(1.5 * per_image)
    det = ROSE(model, fisher="diag", memory=tight, progress=True).fit(x[:8], held_out=x[8:])
    assert "1 image (2 rows) per batch" in capsys.readouterr().err
    np.testing.assert_allclose(det.score(x), free.score(x), rtol=1e-4, atol=1e-6)


def test_the_condition_is_a_loss_setting_the_detector_file_records(tmp_path: Path) -> None:
    """``--condition`` (``set_loss_settings(condition=...)``) judges the model as a folder's roseood.json
    would; a detector fitted so records it and sets it back on the model it is loaded with."""
    from roseood.detectors import ROSE, Detector

    folder = pipeline(tmp_path / "p")
    model, labelled = load_model(folder), load_model(pipeline(tmp_path / "l", condition="label:1"))
    model.set_loss_settings(condition="label:1")
    assert model.loss_settings()["condition"] == "label:1" and model.rows_per_input == 2
    assert model_fingerprint(model) == model_fingerprint(labelled)
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(model.nll(x), labelled.nll(x))
    images = torch.rand(24, 1, 8, 8)
    det = ROSE(model, fisher="diag", layers="mid", progress=False).fit(images[:12], held_out=images[12:])
    det.save(tmp_path / "d.pt")
    fresh = load_model(folder)  # the marginal, as the folder says
    loaded = Detector.load(tmp_path / "d.pt", fresh)
    assert fresh.condition.spec == "label:1"
    np.testing.assert_allclose(loaded.score(x), det.score(x), rtol=1e-6)
    with pytest.raises(RoseError, match=r"^condition 'label:1': the model is unconditional"):
        load_model(pipeline_unconditional(tmp_path / "u")).set_loss_settings(condition="label:1")


def test_rose_sample_draws_under_the_condition_it_is_given(tmp_path: Path) -> None:
    """``rose sample --condition label:N`` draws what the model set to that label draws (it had no
    ``--condition``: a conditional model could be drawn only at its folder's condition)."""
    from PIL import Image

    from roseood.cli import main

    folder = pipeline(tmp_path / "p")
    grids = {}
    for label in ("label:0", "label:2"):
        out = tmp_path / f"{label[-1]}.png"
        argv = ["sample", "--model", str(folder), "--condition", label, "--images", "3", "--steps", "4"]
        assert main([*argv, "--out", str(out), "-q"]) == 0
        grids[label] = np.asarray(Image.open(out))
        model = load_model(folder)
        model.set_loss_settings(condition=label)
        expected = model.generate(3, seed=0, progress=False, steps=4)
        assert np.array_equal(grids[label][2:10, 2:10], expected[0, 0].numpy())  # the grid's first image
    assert not np.array_equal(grids["label:0"], grids["label:2"])


@pytest.mark.parametrize("condition", ["marginal", "null", "label:0"])
def test_an_unconditional_model_refuses_every_condition_the_marginal_too(
    tmp_path: Path, condition: str
) -> None:
    """An unconditional model has no classes to average over: ``--condition marginal`` is refused in the
    line ``label:N`` and ``null`` are, not accepted without a word; by ``--condition`` or roseood.json."""
    folder = pipeline_unconditional(tmp_path / "u")
    model = load_model(folder)
    unset = re.escape("; leave the condition unset: its loss judges p(x) itself") + "$"
    with pytest.raises(RoseError, match=rf"^condition '{condition}': the model is unconditional.*{unset}"):
        model.set_loss_settings(condition=condition)
    (folder / "roseood.json").write_text(json.dumps({"condition": condition}))
    with pytest.raises(RoseError, match=rf": condition '{condition}': the model is unconditional"):
        load_model(folder)


def test_a_dit_of_one_label_still_judges_p_x_as_its_marginal() -> None:
    """A DiT built without classes has one label, and judges p(x) as the marginal over it (what the
    unconditional refusal above must not take away)."""
    from roseood.models.diffusion import DiffusionModel

    shape = {"layers": 1, "heads": 2, "head_dim": 4, "patch": 2}
    model = DiffusionModel(in_channels=1, image_size=8, dit=shape, denoising={"k": 1})
    assert (model.condition.classes, model.condition.spec, model.condition.copies) == (1, "marginal", 1)
    assert model.nll(torch.rand(2, 1, 8, 8)).shape == (2,)


def pipeline_unconditional(folder: Path) -> Path:
    """The same tiny UNet without class labels."""
    d = diffusers_module()
    torch.manual_seed(0)
    unet = d.UNet2DModel(
        sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), norm_num_groups=4,
        layers_per_block=1, down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2,
    )  # fmt: skip
    d.DDPMPipeline(unet=unet, scheduler=d.DDPMScheduler()).save_pretrained(folder)
    return folder


def test_the_marginals_rows_go_to_the_denoiser_a_bounded_number_at_a_time(
    tmp_path: Path, monkeypatch
) -> None:
    """Without gradients a batch's N·K·C rows are split into calls of at most ``ROWS_PER_CALL`` (whole
    images each; one call of a 64-image batch's 5120 rows took 23 GB in the zoo bench), and the losses are
    the ones a single call gives."""
    from roseood.models.diffusion import model as module

    model = load_model(pipeline(tmp_path / "p"))
    x = torch.rand(5, 1, 8, 8)
    whole = model.rose_loss(x)  # with gradients enabled: one call
    calls: list[int] = []
    forward = model.unet.forward
    monkeypatch.setattr(
        model.unet, "forward", lambda xt, *a, **k: calls.append(len(xt)) or forward(xt, *a, **k)
    )
    monkeypatch.setattr(module, "ROWS_PER_CALL", 12)  # 2 pairs × 3 classes: two images per call
    with torch.no_grad():
        chunked = model.rose_loss(x)
    assert calls == [12, 12, 6]
    torch.testing.assert_close(chunked, whole.detach(), rtol=1e-5, atol=1e-6)
