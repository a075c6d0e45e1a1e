"""Latent diffusion (diffusers' LDMPipeline: a VQModel or AutoencoderKL in front of a UNet2DModel) as a
model of pixel images: the loss checked against diffusers' own encoder and ``add_noise``, exact
per-sample gradients of the denoiser with the encoder frozen, samples as LDMPipeline draws them, folders,
checkpoints and the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from roseood.errors import CheckpointError, RoseError
from roseood.models import load_model, save_model
from roseood.models.diffusion import diffusers_module, export_diffusers
from tests.curvature.test_grads import assert_batched_grads_exact

ENCODER = {
    "block_out_channels": (8, 16),
    "down_block_types": ("DownEncoderBlock2D",) * 2,
    "up_block_types": ("UpDecoderBlock2D",) * 2,
    "norm_num_groups": 4,
    "latent_channels": 4,
}


def ldm(folder: Path, kind: str = "VQModel", scaling: float = 0.5, **scheduler: Any) -> Path:
    """A tiny LDMPipeline folder written by diffusers' own classes: 3×16×16 images, 4×8×8 latents."""
    d = diffusers_module()
    torch.manual_seed(0)
    extra = {"num_vq_embeddings": 16} if kind == "VQModel" else {}
    autoencoder = getattr(d, kind)(**ENCODER, scaling_factor=scaling, **extra)
    blocks = {"down_block_types": ("DownBlock2D",) * 2, "up_block_types": ("UpBlock2D",) * 2}
    unet = d.UNet2DModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16), norm_num_groups=4,
        layers_per_block=1, **blocks,
    )  # fmt: skip
    sched = d.DDIMScheduler(**scheduler)
    d.LDMPipeline(vqvae=autoencoder, unet=unet, scheduler=sched).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["VQModel", "AutoencoderKL"])
def test_the_loss_is_the_denoisers_on_diffusers_own_latents(tmp_path: Path, kind: str) -> None:
    """Images are encoded as diffusers' autoencoder encodes them (VQ: the unquantised latent; KL: the
    posterior mean), times the config's scaling factor, and noised by the scheduler's own ``add_noise``."""
    d = diffusers_module()
    model = load_model(ldm(tmp_path / "ldm", kind))
    assert model.input_shape == (3, 16, 16) and model.space_shape == (4, 8, 8)
    auto = getattr(d, kind).from_pretrained(tmp_path / "ldm" / "vqvae")
    unet = d.UNet2DModel.from_pretrained(tmp_path / "ldm" / "unet")
    sched = d.DDPMScheduler.from_pretrained(tmp_path / "ldm" / "scheduler")
    x = torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        out = auto.encode(x * 2 - 1)
        z = (out.latents if kind == "VQModel" else out.latent_dist.mode()) * 0.5
        expected = torch.zeros(3)
        for t, noise in zip(model.loss_timesteps, model.loss_noise, strict=True):
            tt = t.expand(3)
            e = noise.expand_as(z)
            expected += (unet(sched.add_noise(z, e, tt), tt).sample - e).pow(2).flatten(1).sum(1)
    torch.testing.assert_close(model.nll(x), expected, rtol=1e-5, atol=1e-3)
    assert f"latent space: 3×16×16 images → 4×8×8 latents by {kind}" in model.describe()
    assert "scaling_factor 0.5" in model.describe()


def test_per_sample_gradients_are_the_denoisers_and_exact(tmp_path: Path) -> None:
    model = load_model(ldm(tmp_path / "ldm"))
    model.set_denoising(k=2)
    names = model.rose_layers("all")
    assert names and all(n.startswith("unet.") for n in names)  # the encoder's layers do not join
    x = torch.rand(3, 3, 16, 16)
    assert_batched_grads_exact(model, model.rose_loss, x, names)
    model.rose_loss(x).sum().backward()
    assert all(p.grad is None for p in model.autoencoder.parameters())


def test_samples_are_what_ldm_pipeline_draws_from_the_same_noise(tmp_path: Path) -> None:
    d = diffusers_module()
    model = load_model(ldm(tmp_path / "ldm"))
    ours = model.generate(2, seed=4, steps=5).float() / 255
    pipe = d.LDMPipeline.from_pretrained(tmp_path / "ldm")
    theirs = pipe(
        batch_size=2, generator=torch.Generator().manual_seed(4), num_inference_steps=5, output_type="np"
    ).images
    np.testing.assert_allclose(ours.permute(0, 2, 3, 1).numpy(), theirs, atol=1 / 255 + 1e-5)


def test_checkpoints_exports_and_the_pipelines_unet_folder_keep_the_autoencoder(tmp_path: Path) -> None:
    model = load_model(ldm(tmp_path / "ldm"))
    x = torch.rand(2, 3, 16, 16)
    save_model(model, tmp_path / "m.pt")
    again = load_model(tmp_path / "m.pt")
    assert again.autoencoder is not None and again.autoencoder.kind == "VQModel"
    torch.testing.assert_close(again.nll(x), model.nll(x))
    torch.testing.assert_close(load_model(export_diffusers(model, tmp_path / "out")).nll(x), model.nll(x))
    # the pipeline's unet/ folder on its own is the same model of pixels, not one of latents
    assert load_model(tmp_path / "ldm" / "unet").input_shape == (3, 16, 16)
    assert set(model.held_out_metrics(x)) == {"eps_mse"}  # a bound on latents is no bound on images


def test_the_baselines_run_in_latent_space(tmp_path: Path) -> None:
    from roseood.detectors import MSMA, ROSE, DiffPath

    model = load_model(ldm(tmp_path / "ldm"))
    model.set_denoising(k=2)
    x = torch.rand(20, 3, 16, 16)
    seen: list[tuple[int, ...]] = []
    hook = model.unet.register_forward_pre_hook(lambda _, args: seen.append(tuple(args[0].shape[1:])))
    try:
        for detector in (ROSE(model, progress=False), DiffPath(model, steps=3), MSMA(model, levels=3)):
            seen.clear()
            scores = detector.fit(x[:12], held_out=x[12:]).score(x[:2])
            assert scores.shape == (2,) and np.isfinite(scores).all()
            # every denoiser call of fit and score took 4×8×8 latents, never the 3×16×16 images
            assert seen and set(seen) == {model.space_shape}, (type(detector).__name__, set(seen))
    finally:
        hook.remove()


def test_reconstruction_denoises_latents_and_compares_them_decoded(tmp_path: Path) -> None:
    """DDPM-OOD on a latent model: its seeded noise is a latent's, and each reconstruction is decoded and
    compared with the decoded latent of the image (it drew pixel-shaped noise before: a torch error)."""
    from roseood.detectors import Reconstruction
    from roseood.detectors.reconstruction import plms

    model = load_model(ldm(tmp_path / "ldm"))
    x = torch.rand(4, 3, 16, 16)
    detector = Reconstruction(model, steps=2, skip=1, seed=3)
    (t0,) = detector.starts
    noise = torch.randn(model.space_shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        z = model.space.encode(x)
        rec = plms(model, model.noised(z, torch.full((4,), t0), noise.expand_as(z)), [t0, 0])
        decoded, ref = model.space.decode(rec).clamp(-1, 1), model.space.decode(z).clamp(-1, 1)
    expected = ((decoded - ref) / 2).pow(2).flatten(1).mean(1).double()
    torch.testing.assert_close(detector.reconstruction_errors(x)[:, 0], expected, rtol=1e-5, atol=1e-7)


def _edit(path: Path, **fields: Any) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | fields))


@pytest.mark.parametrize(
    ("damage", "phrase"),
    [
        (lambda f: shutil.rmtree(f / "vqvae"), "vqvae/config.json: cannot read it"),
        (lambda f: _edit(f / "vqvae" / "config.json", _class_name="VQGAN"), "'VQGAN'; roseood reads VQModel"),
        (
            lambda f: _edit(f / "vqvae" / "config.json", latent_channels=3),
            "encodes 3×16×16 images to latents of",
        ),
        (lambda f: _edit(f / "vqvae" / "config.json", scaling_factor=-1), "scaling_factor must be"),
        (lambda f: _edit(f / "vqvae" / "config.json", shift_factor=0.1), "shift_factor"),
        (lambda f: (f / "vqvae" / "diffusion_pytorch_model.safetensors").write_bytes(b"x"), "safetensors"),
    ],
)
def test_a_damaged_autoencoder_is_one_line_naming_it(tmp_path: Path, damage: Any, phrase: str) -> None:
    folder = ldm(tmp_path / "ldm")
    damage(folder)
    with pytest.raises((CheckpointError, RoseError)) as err:
        load_model(folder)
    assert phrase in str(err.value) and "\n" not in str(err.value)
