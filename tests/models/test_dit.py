"""DiT (diffusers' DiTPipeline: a class-conditional DiTTransformer2DModel over an AutoencoderKL's latents):
the loss checked against diffusers' own autoencoder, scheduler and transformer, exact per-sample gradients
through patch embedding, adaLN-zero, attention and feed-forward layers, samples as DiTPipeline draws them,
folders and checkpoints, the conditioning choices and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from roseood.curvature import check_layers
from roseood.errors import RoseError
from roseood.models import load_model, save_model
from roseood.models.diffusion import diffusers_module, export_diffusers
from tests.curvature.test_grads import assert_batched_grads_exact

NULL = 5  # 5 class labels, and diffusers' DiT embeds a sixth for condition dropout


def dit(folder: Path) -> Path:
    """A tiny DiTPipeline folder written by diffusers: 3×16×16 images, 4×8×8 latents, 2×2 patches, a
    learned variance (8 channels out)."""
    d = diffusers_module()
    torch.manual_seed(0)
    vae = d.AutoencoderKL(
        block_out_channels=(8, 16), down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=4, latent_channels=4,
    )  # fmt: skip
    transformer = d.DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2,
        sample_size=8, patch_size=2, num_embeds_ada_norm=NULL, norm_num_groups=4,
    )  # fmt: skip
    with torch.no_grad():  # adaLN-zero starts at zero: give its modulations something to do
        for p in transformer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    d.DiTPipeline(transformer=transformer, vae=vae, scheduler=d.DDIMScheduler()).save_pretrained(folder)
    (folder / "roseood.json").write_text(json.dumps({"denoising": {"k": 2}}))
    return folder


def test_the_loss_is_dits_at_the_null_label_on_diffusers_own_latents(tmp_path: Path) -> None:
    d = diffusers_module()
    folder = dit(tmp_path / "dit")
    model = load_model(folder)
    assert model.input_shape == (3, 16, 16) and model.space_shape == (4, 8, 8)
    vae = d.AutoencoderKL.from_pretrained(folder / "vae")
    net = d.DiTTransformer2DModel.from_pretrained(folder / "transformer")
    sched = d.DDPMScheduler.from_pretrained(folder / "scheduler")
    x = torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        z = vae.encode(x * 2 - 1).latent_dist.mode() * vae.config.scaling_factor
        expected = torch.zeros(3)
        for t, e in zip(model.loss_timesteps, model.loss_noise, strict=True):
            tt, ee = t.expand(3), e.expand_as(z)
            out = net(sched.add_noise(z, ee, tt), timestep=tt, class_labels=torch.full((3,), NULL)).sample
            expected += (out[:, :4] - ee).pow(2).flatten(1).sum(1)  # the mean's half, not the variance's
    torch.testing.assert_close(model.nll(x), expected, rtol=1e-5, atol=1e-3)
    line = model.describe()
    assert "DiTTransformer2DModel" in line and "p(x) at the null label, as condition dropout" in line


def test_every_dit_layer_has_a_handler_and_exact_per_sample_gradients(tmp_path: Path) -> None:
    model = load_model(dit(tmp_path / "dit"))
    names = model.rose_layers("all")
    x = torch.rand(3, 3, 16, 16)
    report = check_layers(model, model.rose_loss, x, names)
    assert all(r.usable and "fallback" not in r.handler for r in report), [r for r in report if not r.usable]
    kinds = {type(model.get_submodule(n)).__name__ for n in names}
    assert kinds == {"Conv2d", "Linear", "Embedding"}  # patch embedding, adaLN-zero, attention, MLP, labels
    assert_batched_grads_exact(model, model.rose_loss, x, names)


def test_samples_are_what_dit_pipeline_draws_from_the_same_noise(tmp_path: Path) -> None:
    d = diffusers_module()
    folder = dit(tmp_path / "dit")
    ours = load_model(folder).generate(2, seed=4, steps=4).float() / 255
    pipe = d.DiTPipeline.from_pretrained(folder)
    theirs = pipe(
        class_labels=[NULL, NULL], guidance_scale=1.0, generator=torch.Generator().manual_seed(4),
        num_inference_steps=4, output_type="np",
    ).images  # fmt: skip
    np.testing.assert_allclose(ours.permute(0, 2, 3, 1).numpy(), theirs, atol=1 / 255 + 1e-5)


def test_checkpoints_exports_and_the_other_conditionings(tmp_path: Path) -> None:
    from roseood.detectors import ROSE

    folder = dit(tmp_path / "dit")
    model = load_model(folder)
    x = torch.rand(2, 3, 16, 16)
    save_model(model, tmp_path / "m.pt")
    torch.testing.assert_close(load_model(tmp_path / "m.pt").nll(x), model.nll(x))
    torch.testing.assert_close(load_model(export_diffusers(model, tmp_path / "out")).nll(x), model.nll(x))
    torch.testing.assert_close(load_model(folder / "transformer").nll(x), model.nll(x))  # its own folder
    for condition, copies in (("marginal", NULL), ("label:2", 1)):
        (folder / "roseood.json").write_text(json.dumps({"denoising": {"k": 2}, "condition": condition}))
        other = load_model(folder)
        assert other.condition.copies == copies and not torch.allclose(other.nll(x), model.nll(x))
    images = torch.rand(30, 3, 16, 16)
    assert np.isfinite(ROSE(model, progress=False).fit(images[:20], held_out=images[20:]).score(x)).all()


@pytest.mark.parametrize(
    ("field", "value", "phrase"),
    [
        ("patch_size", 3, "patch_size 3 does not tile sample_size 8"),
        ("out_channels", 5, "out_channels must be in_channels or twice it"),
        ("norm_type", "layer_norm", "norm_type must be one of ada_norm_zero"),
        ("_class_name", "Transformer2DModel", "roseood reads UNet2DModel and DiTTransformer2DModel"),
    ],
)
def test_a_dit_config_roseood_cannot_read_is_one_line(
    tmp_path: Path, field: str, value: object, phrase: str
) -> None:
    folder = dit(tmp_path / "dit")
    config_file = folder / "transformer" / "config.json"
    config_file.write_text(json.dumps(json.loads(config_file.read_text()) | {field: value}))
    with pytest.raises(RoseError) as err:
        load_model(folder)
    assert phrase in str(err.value) and "\n" not in str(err.value)
