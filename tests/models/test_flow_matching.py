"""Flow-matching (rectified-flow) UNets: the per-image loss checked against diffusers' own
FlowMatchEulerDiscreteScheduler, exact per-sample gradients, sampling as diffusers' pipeline samples,
folders and checkpoints, training, and the DDPM-only detectors refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.errors import RoseError
from roseood.models import load_model, save_model
from roseood.models.diffusion import DiffusionModel, diffusers_module, export_diffusers
from tests.curvature.test_grads import assert_batched_grads_exact

FLOW = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0}


def tiny(k: int = 4, **scheduler: float) -> DiffusionModel:
    torch.manual_seed(0)
    return DiffusionModel(
        in_channels=1, image_size=8, widths=(8, 16), denoising={"k": k}, scheduler=FLOW | scheduler
    ).eval()


def test_the_loss_is_diffusers_flow_matching_loss_at_the_fixed_pairs() -> None:
    """Each of the K rows is diffusers' forward process (``scale_noise``: (1 − σ) x + σ ε with the
    scheduler's own shifted σ of that timestep) and the velocity target ε − x, as diffusers' SD3 training
    script forms them; an image's loss is the sum of the K rows' squared errors."""
    d = diffusers_module()
    model = tiny(k=4)
    sched = d.FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    # K = 4 strata midpoints s = 1/8, 3/8, ... are train timesteps of the scheduler (s·T integral)
    assert [round(float(t)) for t in model.loss_timesteps] == [300, 643, 833, 955]
    x = torch.rand(3, 1, 8, 8)
    x0 = x * 2 - 1
    expected = torch.zeros(3)
    for j, t in enumerate(model.loss_timesteps):
        index = int(torch.argmin((sched.timesteps - t).abs()))
        assert abs(float(sched.timesteps[index]) - float(t)) < 1e-3  # the scheduler's own timestep
        noise = model.loss_noise[j].expand_as(x0)
        xt = sched.scale_noise(x0, sched.timesteps[index].expand(3), noise)
        v = model.unet(xt, sched.timesteps[index].expand(3)).sample
        expected += (v - (noise - x0)).pow(2).flatten(1).sum(1)
    torch.testing.assert_close(model.rose_loss(x).detach(), expected, rtol=1e-5, atol=1e-4)
    assert list(model.image_statistics(x)) == [f"v_mse@{t}" for t in model.row_labels()]


def test_per_sample_gradients_of_the_flow_loss_equal_an_autograd_loop() -> None:
    model = tiny(k=3)
    names = model.rose_layers("all")
    x = torch.rand(4, 1, 8, 8)
    assert_batched_grads_exact(model, model.rose_loss, x, names)


def test_samples_are_what_diffusers_pipeline_draws_from_the_same_noise() -> None:
    """``generate`` runs the flow's Euler steps as diffusers' DDPMPipeline does with the same
    FlowMatchEulerDiscreteScheduler and the same seed: the two images agree to a grey level."""
    d = diffusers_module()
    model = tiny()
    ours = model.generate(2, seed=3, steps=6).float() / 255
    pipe = d.DDPMPipeline(unet=model.unet, scheduler=d.FlowMatchEulerDiscreteScheduler.from_config(FLOW))
    theirs = pipe(
        batch_size=2, generator=torch.Generator().manual_seed(3), num_inference_steps=6, output_type="np"
    ).images
    np.testing.assert_allclose(ours.permute(0, 2, 3, 1).numpy(), theirs, atol=1 / 255 + 1e-6)


def test_checkpoints_folders_and_a_users_pipeline_keep_the_objective(tmp_path: Path) -> None:
    d = diffusers_module()
    model = tiny()
    x = torch.rand(3, 1, 8, 8)
    save_model(model, tmp_path / "m.pt")
    again = load_model(tmp_path / "m.pt")
    assert again.objective.name == "flow"
    torch.testing.assert_close(again.nll(x), model.nll(x))
    folder = export_diffusers(model, tmp_path / "pipe")
    assert json.loads((folder / "scheduler" / "scheduler_config.json").read_text())["shift"] == 3.0
    torch.testing.assert_close(load_model(folder).nll(x), model.nll(x))
    # a pipeline a user saved with diffusers' own classes
    d.DDPMPipeline(unet=model.unet, scheduler=d.FlowMatchEulerDiscreteScheduler(shift=2.0)).save_pretrained(
        tmp_path / "theirs"
    )
    theirs = load_model(tmp_path / "theirs")
    assert theirs.objective.name == "flow" and theirs.scheduler.config.shift == 2.0
    assert "flow matching" in theirs.describe() and "shift 2" in theirs.describe()


@pytest.mark.parametrize(
    ("setting", "phrase"),
    [
        ({"use_dynamic_shifting": True}, "use_dynamic_shifting (a shift that depends on the image size)"),
        ({"invert_sigmas": True}, "invert_sigmas"),
        ({"shift_terminal": 0.1}, "shift_terminal"),
        ({"shift": 0.0}, "shift must be"),
    ],
)
def test_a_flow_setting_roseood_does_not_model_is_refused_in_one_line(setting: dict, phrase: str) -> None:
    with pytest.raises(RoseError, match="^[^\n]*" + phrase.replace("(", r"\(").replace(")", r"\)")):
        tiny(**setting)


def test_the_ddpm_only_detectors_refuse_a_flow_model_and_rose_scores_it() -> None:
    from roseood.detectors import MSMA, ROSE, DenoisingLoss, DiffPath, Reconstruction

    model = tiny(k=2)
    for cls in (DiffPath, MSMA, Reconstruction):
        with pytest.raises(RoseError, match="trained by flow matching: use ROSE"):
            cls(model)
    with pytest.raises(RoseError, match="the diffpath-1d method needs"):  # named by its preset
        DiffPath(model, variant="1d")
    with pytest.raises(RoseError, match=r"elbo.*velocity"):
        model.set_denoising(weighting="elbo")
    x = torch.rand(24, 1, 8, 8)
    rose = ROSE(model, progress=False).fit(x[:16], held_out=x[16:])
    assert rose.score(torch.rand(3, 1, 8, 8)).shape == (3,)
    np.testing.assert_allclose(DenoisingLoss(model).fit(x).score(x[:2]), model.nll(x[:2]).numpy(), rtol=1e-5)


def test_rose_train_diffusion_learns_a_flow_model(tmp_path: Path) -> None:
    """``--objective flow``: the training loss and the held-out figure are the velocity's MSE, and the
    checkpoint loads as a flow-matching model that ``rose sample`` draws from."""
    from roseood.cli import main

    out = tmp_path / "flow.pt"
    args = "--data fashion_mnist --subset 64 --size 8 --epochs 2 --widths 8,16 --no-attention --batch-size 16"
    flow = ["--objective", "flow", "--flow-shift", "2"]
    assert main(["train", "diffusion", *args.split(), *flow, "--out", str(out)]) == 0
    model = load_model(out)
    assert model.objective.name == "flow" and model.scheduler.config.shift == 2.0
    assert set(model.held_out_metrics(torch.rand(4, 1, 8, 8))) == {"v_mse"}
    png = str(tmp_path / "s.png")
    assert main(["sample", "--model", str(out), "--images", "4", "--steps", "3", "--out", png]) == 0
    assert (tmp_path / "s.png").stat().st_size > 0
    assert main(["train", "diffusion", *args.split(), "--objective", "rectified", "--out", str(out)]) == 2
    assert main(["train", "diffusion", *args.split(), "--flow-shift", "3", "--out", str(out)]) == 2
