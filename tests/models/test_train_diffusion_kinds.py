"""``rose train diffusion`` learns the kinds beyond the pixel UNet: a class-conditional UNet (trained at
each image's label, judged by the marginal), a DiT (one label, or the data's classes with diffusers'
label dropout, judged at its null label), a latent model (a VQ-VAE first, then the denoiser on its
latents); each saves, exports to a diffusers folder and reads back the same; what does not fit is
refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from roseood.cli import main
from roseood.errors import RoseError
from roseood.models import load_model
from roseood.models.diffusion import export_diffusers
from roseood.models.diffusion.stages import first_stage_path
from roseood.serialization import safe_load

TINY = [
    "--data",
    "fashion_mnist",
    "--subset",
    "48",
    "--size",
    "8",
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "-q",
]


def trained(tmp_path: Path, name: str, *options: str) -> Path:
    out = tmp_path / f"{name}.pt"
    assert main(["train", "diffusion", *TINY, *options, "--out", str(out)]) == 0
    return out


def test_a_conditional_unet_trains_at_each_images_label(tmp_path: Path) -> None:
    out = trained(tmp_path, "cu", "--conditional", "--widths", "8,16", "--no-attention", "--held-out", "4")
    model = load_model(out)
    assert model.unet.config.num_class_embeds == 10 and model.condition.spec == "marginal"
    assert model.condition.copies == 10  # judged by the marginal over Fashion-MNIST's ten classes
    x, y = torch.rand(3, 1, 8, 8), torch.tensor([0, 4, 9])
    torch.manual_seed(1)
    loss = model.train_loss(x, labels=y)  # eval mode: no EMA step, the same draws as below
    torch.manual_seed(1)
    x0 = model.space.encode(x)
    t = torch.randint(0, model.train_timesteps, (3,))
    expected = model.squared_error(x0, t, torch.randn_like(x0), y)
    torch.testing.assert_close(loss, expected)
    other = model.squared_error(x0, t, torch.randn_like(x0), torch.tensor([1, 5, 2]))
    assert not torch.allclose(expected, other)  # the label is used
    assert set(model.held_out_metrics(x)) == {"eps_mse"}  # the marginal's held-out loss, not the bound
    with pytest.raises(RoseError, match=r"class labels must be 3 integers in 0\.\.9"):
        model.train_loss(x, labels=torch.tensor([0, 10, 1]))
    with pytest.raises(RoseError, match="needs one class label per image"):
        model.train_loss(x)  # the marginal has no one path to train


def test_a_dit_trains_exports_and_reads_back_the_same(tmp_path: Path) -> None:
    shape = ["--dit-layers", "1", "--dit-heads", "2", "--dit-head-dim", "4", "--patch-size", "4"]
    out = trained(tmp_path, "dit", "--denoiser", "dit", *shape)
    model = load_model(out)
    assert type(model.unet).__name__ == "DiTTransformer2DModel"
    assert model.unet.config.num_layers == 1 and model.unet.config.patch_size == 4
    assert model.condition.classes == 1 and model.condition.spec == "marginal"  # one label: p(x)
    export_diffusers(model, tmp_path / "folder")
    again = load_model(tmp_path / "folder")
    x = torch.rand(4, 1, 8, 8)
    torch.testing.assert_close(again.nll(x), model.nll(x))
    conditional = load_model(trained(tmp_path, "cdit", "--denoiser", "dit", "--conditional", *shape))
    assert conditional.condition.classes == 10 and conditional.condition.spec == "null"


def test_a_latent_model_trains_its_vq_vae_first_then_the_denoiser_on_its_latents(tmp_path: Path) -> None:
    vq = ["--autoencoder", "vq", "--autoencoder-widths", "8,8", "--latent-channels", "2", "--codebook", "16"]
    vq += ["--autoencoder-epochs", "1", "--widths", "8,8", "--no-attention"]
    out = trained(tmp_path, "ldm", *vq)
    model = load_model(out)
    assert model.autoencoder.kind == "VQModel" and model.space_shape == (2, 4, 4)
    stage = safe_load(first_stage_path(out), "roseood-model")["state_dict"]
    for name, weight in model.autoencoder.net.state_dict().items():  # the first stage's, frozen
        torch.testing.assert_close(weight, stage[f"codec.net.{name}"])
    assert not any(p.requires_grad for p in model.autoencoder.parameters())
    from roseood.data import load_images

    images = load_images("fashion_mnist", split="train", n=48, seed=0, size=8).images
    z = model.space.encode(torch.as_tensor(images).float() / 255)
    assert abs(float(z.std()) - 1) < 0.01  # the scaling factor: one over the training latents' spread
    export_diffusers(model, tmp_path / "ldm")
    again = load_model(tmp_path / "ldm")
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(again.nll(x), model.nll(x))
    before = out.read_bytes()
    args = [
        "train",
        "diffusion",
        *TINY,
        *vq,
        "--autoencoder-epochs",
        "1",
        "--widths",
        "8,8",
        "--no-attention",
    ]
    assert main([*args, "--out", str(out), "--resume"]) == 0  # both stages done: nothing changes
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    ("options", "phrase"),
    [
        (["--denoiser", "dit", "--widths", "8,16"], "--widths shapes a UNet; this is a --denoiser dit"),
        (["--denoiser", "dit", "--no-attention"], "--no-attention shapes a UNet"),
        (["--patch-size", "2"], "--patch-size shapes a DiT; this is a --denoiser unet"),
        (["--codebook", "64"], "--codebook shapes a VQ-VAE: give --autoencoder vq"),
    ],
)
def test_the_other_denoisers_shape_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: list[str], phrase: str
) -> None:
    assert main(["train", "diffusion", *TINY, *options, "--out", str(tmp_path / "m.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert phrase in err and "\n" not in err
    assert not (tmp_path / "m.pt").exists()


def test_unlabelled_images_cannot_train_a_conditional_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for i in range(4):
        Image.fromarray(np.full((8, 8), 40 * i, np.uint8)).save(folder / f"{i}.png")
    out = tmp_path / "m.pt"
    code = main(["train", "diffusion", "--data", str(folder), "--conditional", "--out", str(out), "-q"])
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the line saying how images were read
    assert code == 2 and last.startswith("error: ") and "without a class label" in last
    assert not out.exists()
