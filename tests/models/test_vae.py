"""The paper's VAE: likelihood bookkeeping, the authors' checkpoints, and checkpoint I/O."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from roseood.demo import demo_images, demo_model
from roseood.errors import CheckpointError, RoseError
from roseood.integrity import seal
from roseood.models import VAE, load_authors_vae, load_checkpoint, load_model, model_fingerprint, save_model

AUTHORS = Path(__file__).resolve().parents[3] / "shared" / "models" / "rose-paper-vae"


def test_shapes_and_units(tiny_vae, images):
    with torch.no_grad():
        nll = tiny_vae.nll(images)
    assert nll.shape == (24,)
    # an untrained categorical decoder is near uniform over 256 values: about 8 bits per dimension
    assert 6.0 < tiny_vae.bits_per_dim(nll).mean().item() < 10.0


def test_elbo_at_the_mean_is_deterministic_and_sampled_elbo_is_not(tiny_vae, images):
    with torch.no_grad():
        assert torch.equal(tiny_vae.rose_loss(images), tiny_vae.rose_loss(images))  # same kernels: exact
        assert not torch.equal(tiny_vae.neg_elbo(images), tiny_vae.neg_elbo(images))


def test_iwae_is_a_tighter_bound_than_the_elbo():
    model = demo_model()
    x = torch.from_numpy(demo_images()["fashion_mnist_test"][:12]).float() / 255
    torch.manual_seed(0)
    with torch.no_grad():
        elbo = torch.stack([model.neg_elbo(x) for _ in range(10)]).mean(0)
        iwae = model.iwae_nll(x, k=20)
    assert (iwae < elbo).all()


def test_iwae_with_one_sample_is_the_elbo(tiny_vae, images):
    torch.manual_seed(5)
    with torch.no_grad():
        a = tiny_vae.iwae_nll(images, k=1)
    torch.manual_seed(5)
    with torch.no_grad():
        mu, logvar = tiny_vae.encoder(images)
        z = mu + torch.randn(mu.shape[0], 1, mu.shape[1])[:, 0] * (0.5 * logvar).exp()
        rec = tiny_vae.reconstruction_nll(tiny_vae.decoder(z), images)
        log_pz = -0.5 * (z.pow(2) + math.log(2 * math.pi)).sum(1)
        std = (0.5 * logvar).exp()
        log_qz = -0.5 * (((z - mu) / std).pow(2) + math.log(2 * math.pi)).sum(1) - std.log().sum(1)
    torch.testing.assert_close(a, rec - log_pz + log_qz, rtol=1e-4, atol=1e-3)


def test_checkpoint_round_trip(tiny_vae, images, tmp_path):
    save_model(tiny_vae, tmp_path / "m.pt")
    loaded = load_model(tmp_path / "m.pt")
    assert isinstance(loaded, VAE) and model_fingerprint(loaded) == model_fingerprint(tiny_vae)
    torch.testing.assert_close(loaded.rose_loss(images), tiny_vae.rose_loss(images))


def test_bad_checkpoints(tmp_path, tiny_vae):
    (tmp_path / "junk.pt").write_bytes(b"\x00" * 100)
    with pytest.raises(CheckpointError, match="not a readable"):
        load_model(tmp_path / "junk.pt")
    torch.save({"format": "something-else"}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="expected a roseood-model"):
        load_model(tmp_path / "other.pt")
    save_model(tiny_vae, tmp_path / "m.pt")
    obj = torch.load(tmp_path / "m.pt", weights_only=True)
    obj["config"]["ngf"] = 8
    torch.save(seal(obj), tmp_path / "mismatch.pt")  # an edit that keeps the checksum valid
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(tmp_path / "mismatch.pt")


def test_shipped_model_reproduces_the_likelihood_failure():
    """Figure 1: the authors' Fashion-MNIST VAE gives MNIST fewer bits/dim than its own test set."""
    model = demo_model()
    imgs = demo_images()
    torch.manual_seed(0)
    with torch.no_grad():
        fm = model.bits_per_dim(model.nll(torch.from_numpy(imgs["fashion_mnist_test"][:200]).float() / 255))
        mn = model.bits_per_dim(model.nll(torch.from_numpy(imgs["mnist_test"][:200]).float() / 255))
    assert 2.9 < fm.mean().item() < 3.5  # the authors' README: about 3.2
    assert mn.mean().item() < fm.mean().item() - 0.5


@pytest.mark.skipif(not AUTHORS.exists(), reason="../shared/models is not present")
def test_import_of_the_authors_checkpoints_matches_the_shipped_model():
    m = load_authors_vae(
        AUTHORS / "fmnist_ngf32_nz100_seed1_netE.pth", AUTHORS / "fmnist_ngf32_nz100_seed1_netG.pth"
    )
    assert model_fingerprint(m) == model_fingerprint(demo_model())
    small = load_authors_vae(
        AUTHORS / "fmnist_ngf16_nz100_seed1_netE.pth", AUTHORS / "fmnist_ngf16_nz100_seed1_netG.pth"
    )
    assert small.config() == {"in_channels": 1, "ngf": 16, "nz": 100, "image_size": 32}
    with pytest.raises(CheckpointError, match=r"do not form one VAE|unexpected key"):
        load_authors_vae(
            AUTHORS / "fmnist_ngf16_nz100_seed1_netE.pth", AUTHORS / "fmnist_ngf32_nz100_seed1_netG.pth"
        )
    with pytest.raises(CheckpointError, match="not an encoder"):
        load_authors_vae(
            AUTHORS / "fmnist_ngf32_nz100_seed1_netG.pth", AUTHORS / "fmnist_ngf32_nz100_seed1_netG.pth"
        )


def test_generate_decodes_prior_draws_reproducibly_by_seed(tiny_vae):
    a = tiny_vae.generate(5, seed=1)
    assert a.shape == (5, 1, 32, 32) and a.dtype == torch.uint8
    assert torch.equal(a, tiny_vae.generate(5, seed=1)) and not torch.equal(a, tiny_vae.generate(5, seed=2))
    # each pixel is its categorical's mean: by hand for the first image
    z = torch.randn(5, tiny_vae.nz, generator=torch.Generator().manual_seed(1))[:1]
    with torch.no_grad():
        probs = tiny_vae.decoder(z).softmax(2)
    mean = (probs * torch.arange(256.0).view(1, 1, 256, 1, 1)).sum(2)
    assert (a[:1].float() - mean).abs().max() <= 0.5 + 1e-3
    with pytest.raises(RoseError, match="without options, not steps"):
        tiny_vae.generate(2, steps=3)
    with pytest.raises(RoseError, match="n ≥ 1"):
        tiny_vae.generate(0)


def test_a_long_draw_says_its_time_after_the_first_batch(tiny_vae, monkeypatch, capsys):
    """A draw that outlasts the first progress line is forecast from its first timed batch, once."""
    from roseood import progress as progress_module

    monkeypatch.setattr(progress_module, "LINE_INTERVAL_S", 0.0)  # forecast whatever the estimate
    assert torch.equal(tiny_vae.generate(130, seed=1, progress=True), tiny_vae.generate(130, seed=1))
    lines = capsys.readouterr().err.splitlines()
    forecasts = [line for line in lines if "≈" in line]
    assert forecasts == [lines[0]] and "sampling 130 images: ≈ " in lines[0]
    assert "from one timed batch of 64" in lines[0] and lines[-1].startswith("sampling 130 images: 3/3")
