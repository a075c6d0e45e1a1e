"""The paper's convolutional VAE (Appendix B.1) with a 256-way categorical decoder per pixel and channel."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from roseood.errors import CheckpointError, RoseError
from roseood.models.base import GenerativeModel
from roseood.progress import forecast_rest, resolve
from roseood.progress import progress as show
from roseood.randomness import randn


def _targets(x: Tensor) -> Tensor:
    """Pixel values 0..255 as class indices (the authors use floor(x·255); rounding avoids float slips)."""
    return (x * 255.0).round().clamp(0, 255).long()


def pyramid(size: int) -> tuple[int, int]:
    """The DCGAN pyramid for ``size``×``size`` images: (stride-2 stages, final spatial size).

    Each stage halves an even size until it is below 8, so 32 → 16 → 8 → 4 (3 stages, as in the paper),
    64 and 128 add one and two stages, 28 → 14 → 7 has 2 and 96 → … → 6 has 4. Sizes that reach an odd
    number of 8 or more (e.g. 30) have no such pyramid and are refused.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise RoseError(f"the VAE needs square images of at least 8×8, got size {size!r}")
    stages, final = 0, size
    while final >= 8:
        if final % 2:
            raise RoseError(
                f"the VAE halves the image size down to 4–7 pixels: {size} reaches {final}, which is odd; "
                "use a size f·2^k with 4 ≤ f ≤ 7, e.g. 28, 32, 48, 64, 96 or 128 (--size)"
            )
        stages, final = stages + 1, final // 2
    return stages, final


class Encoder(nn.Module):
    """Stride-2 conv/BN/ReLU stages (``conv0``, ``conv1``, …; width ngf doubling per stage) down to the
    pyramid's final size, then two conv heads as large as that map for mean and log-variance."""

    def __init__(self, in_channels: int, ngf: int, nz: int, image_size: int = 32) -> None:
        super().__init__()
        self.stages, final = pyramid(image_size)
        width = in_channels
        for i in range(self.stages):
            self.add_module(f"conv{i}", nn.Conv2d(width, ngf * 2**i, 4, 2, 1, bias=False))
            self.add_module(f"bn{i}", nn.BatchNorm2d(ngf * 2**i))
            width = ngf * 2**i
        self.mu = nn.Conv2d(width, nz, final)
        self.logvar = nn.Conv2d(width, nz, final)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = x
        for i in range(self.stages):
            h = F.relu(getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(h)))
        return self.mu(h).flatten(1), self.logvar(h).flatten(1)


class Decoder(nn.Module):
    """Transposed-conv mirror of the encoder (``convt0`` to the final size, then one stride-2 stage per
    encoder stage); outputs 256 logits per pixel and channel."""

    def __init__(self, out_channels: int, ngf: int, nz: int, image_size: int = 32) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.stages, final = pyramid(image_size)
        top = ngf * 2 ** (self.stages - 1)
        self.convt0 = nn.ConvTranspose2d(nz, top, final, 1, 0, bias=False)
        self.bn0 = nn.BatchNorm2d(top)
        for i in range(1, self.stages):
            width = top // 2**i
            self.add_module(f"convt{i}", nn.ConvTranspose2d(2 * width, width, 4, 2, 1, bias=False))
            self.add_module(f"bn{i}", nn.BatchNorm2d(width))
        last = nn.ConvTranspose2d(ngf, out_channels * 256, 4, 2, 1, bias=False)
        self.add_module(f"convt{self.stages}", last)

    def forward(self, z: Tensor) -> Tensor:
        h = z[:, :, None, None]
        for i in range(self.stages):
            h = F.relu(getattr(self, f"bn{i}")(getattr(self, f"convt{i}")(h)))
        logits = getattr(self, f"convt{self.stages}")(h)
        n, _, height, width = logits.shape
        return logits.view(n, self.out_channels, 256, height, width)


class VAE(GenerativeModel):
    """The paper's DCGAN-style conv VAE: Gaussian posterior, N(0, I) prior, categorical pixel likelihood.

    At 32×32 it is the paper's network; other sizes add or remove stride-2 stages (see ``pyramid``)."""

    kind = "vae"

    def __init__(self, in_channels: int = 1, ngf: int = 32, nz: int = 100, image_size: int = 32) -> None:
        super().__init__(in_channels, image_size)
        self.ngf = ngf
        self.nz = nz
        self.encoder = Encoder(in_channels, ngf, nz, image_size)
        self.decoder = Decoder(in_channels, ngf, nz, image_size)

    def config(self) -> dict[str, Any]:
        return {
            "in_channels": self.in_channels,
            "ngf": self.ngf,
            "nz": self.nz,
            "image_size": self.image_size,
        }

    def layer_sets(self) -> dict[str, list[str]]:
        stages = self.encoder.stages
        enc = [*(f"encoder.conv{i}" for i in range(stages)), "encoder.mu", "encoder.logvar"]
        dec = [f"decoder.convt{i}" for i in range(stages + 1)]
        return {"encoder": enc, "decoder": dec, "all": enc + dec}

    def reconstruction_nll(self, logits: Tensor, x: Tensor) -> Tensor:
        """Per-sample −log p(x|z): cross-entropy of the 256-way logits summed over pixels and channels."""
        ce = F.cross_entropy(logits.transpose(1, 2), _targets(x), reduction="none")
        return ce.flatten(1).sum(1)

    def neg_elbo(self, x: Tensor, sample: bool = True) -> Tensor:
        """Per-sample negative ELBO in nats; ``sample=False`` decodes z = μ (the authors' ROSE choice).
        The latent noise is per image inside ``roseood.randomness.per_input_seed``."""
        mu, logvar = self.encoder(x)
        z = mu + randn(x, mu.shape[1], stream="vae-latent").to(mu) * (0.5 * logvar).exp() if sample else mu
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
        return self.reconstruction_nll(self.decoder(z), x) + kl

    def iwae_nll(self, x: Tensor, k: int = 20, chunk: int = 256) -> Tensor:
        """Importance-weighted NLL estimate with ``k`` posterior samples (Burda et al. 2015), in nats; the
        samples are per image inside ``roseood.randomness.per_input_seed``. At most ``chunk`` samples are
        decoded at once, whatever ``k`` (a decoded sample holds 256 logits per pixel: k = 25 000 at once
        was 26 GB)."""
        mu, logvar = self.encoder(x)
        std = (0.5 * logvar).exp()
        log_w = torch.empty(x.shape[0], k, device=x.device)
        per_chunk = max(1, chunk // k)
        for i in range(0, x.shape[0], per_chunk):
            m, s, xi = mu[i : i + per_chunk], std[i : i + per_chunk], x[i : i + per_chunk]
            eps = randn(xi, k, m.shape[1], stream="iwae").to(m)
            z = m[:, None] + s[:, None] * eps
            flat, targets = z.flatten(0, 1), xi.repeat_interleave(k, 0)
            rec = torch.cat(
                [
                    self.reconstruction_nll(self.decoder(flat[j : j + chunk]), targets[j : j + chunk])
                    for j in range(0, flat.shape[0], chunk)
                ]
            ).view(-1, k)
            log_pz = -0.5 * (z.pow(2) + math.log(2 * math.pi)).sum(2)
            log_qz = -0.5 * (eps.pow(2) + math.log(2 * math.pi)).sum(2) - s.log().sum(1, keepdim=True)
            log_w[i : i + per_chunk] = -rec + log_pz - log_qz
        return -(torch.logsumexp(log_w, 1) - math.log(k))

    def nll(self, x: Tensor, k: int = 1) -> Tensor:
        """Single-sample negative ELBO (k = 1) or IWAE estimate with k samples, per sample in nats."""
        return self.neg_elbo(x) if k == 1 else self.iwae_nll(x, k)

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        return self.neg_elbo(x, sample=stochastic)

    def image_statistics(self, x: Tensor) -> dict[str, Tensor]:
        """The two terms of the deterministic negative ELBO ROSE differentiates (z = μ), in nats: the
        reconstruction's −log p(x|μ) and the KL divergence of q(z|x) from the prior."""
        with torch.no_grad():
            mu, logvar = self.encoder(x)
            kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
            return {"reconstruction": self.reconstruction_nll(self.decoder(mu), x), "kl": kl}

    def train_loss(self, x: Tensor) -> Tensor:
        return self.neg_elbo(x, sample=True)

    @torch.no_grad()
    def generate(self, n: int, seed: int = 0, progress: bool | None = None, **options: int) -> Tensor:
        """``n`` images decoded from latents drawn from the prior, each pixel the mean of its 256-way
        categorical (the usual picture of a VAE's samples; drawing every pixel independently adds noise)."""
        if options:
            raise RoseError(f"a VAE generates without options, not {', '.join(sorted(options))}")
        if n < 1:
            raise RoseError(f"generating needs n ≥ 1, got {n}")
        device = next(self.parameters()).device
        z = torch.randn(n, self.nz, generator=torch.Generator().manual_seed(seed)).to(device)
        was_training = self.training
        self.eval()
        levels = torch.arange(256, dtype=torch.float32, device=device).view(1, 1, 256, 1, 1)
        parts = z.split(64)
        out, start = [], time.perf_counter()
        with torch.no_grad():  # no graph kept per batch: a million draws hold only their pixels
            for zb in show(parts, f"sampling {n} images", enabled=progress, unit="batch"):
                out.append((self.decoder(zb).softmax(2) * levels).sum(2))
                if len(out) == 1 and resolve(progress):  # before the rest: the first batch, timed
                    basis = f"from one timed batch of {len(zb)}"
                    forecast_rest(f"sampling {n:,} images", time.perf_counter() - start, len(parts), basis)
        self.train(was_training)
        return torch.cat(out).round().clamp(0, 255).to(torch.uint8).cpu()


def authors_key_map(ngf: int, nz: int, channels: int = 1) -> dict[str, str]:
    """Map the released checkpoints' module names (shinypond/ood_detection) to ours."""
    e = {
        "main.input-conv": "encoder.conv0",
        "main.input-BN": "encoder.bn0",
        f"main.pyramid:{ngf}-{2 * ngf}:conv": "encoder.conv1",
        f"main.pyramid:{2 * ngf}:batchnorm": "encoder.bn1",
        f"main.pyramid:{2 * ngf}-{4 * ngf}:conv": "encoder.conv2",
        f"main.pyramid:{4 * ngf}:batchnorm": "encoder.bn2",
        "conv1": "encoder.mu",
        "conv2": "encoder.logvar",
    }
    d = {
        f"main.initial:{nz}-{4 * ngf}:convt": "decoder.convt0",
        f"main.initial:{4 * ngf}:batchnorm": "decoder.bn0",
        f"main.pyramid:{4 * ngf}-{2 * ngf}:convt": "decoder.convt1",
        f"main.pyramid:{2 * ngf}:batchnorm": "decoder.bn1",
        f"main.pyramid:{2 * ngf}-{ngf}:convt": "decoder.convt2",
        f"main.pyramid:{ngf}:batchnorm": "decoder.bn2",
        f"main.final:{ngf}-{channels}:convt": "decoder.convt3",
    }
    return {"E:" + k: v for k, v in e.items()} | {"G:" + k: v for k, v in d.items()}


def load_authors_vae(encoder_path: str | Path, decoder_path: str | Path) -> VAE:
    """Build a VAE from the ROSE authors' released ``*_netE.pth`` / ``*_netG.pth`` state dicts."""
    enc = _load_state_dict(encoder_path)
    dec = _load_state_dict(decoder_path)
    if "main.input-conv.weight" not in enc or "conv1.weight" not in enc:
        raise CheckpointError(f"{encoder_path}: not an encoder (netE) state dict of the ROSE authors' VAE")
    ngf, channels = enc["main.input-conv.weight"].shape[:2]
    nz = enc["conv1.weight"].shape[0]
    names = authors_key_map(ngf, nz, channels)
    state: dict[str, Tensor] = {}
    for prefix, sd, path in (("E:", enc, encoder_path), ("G:", dec, decoder_path)):
        for key, value in sd.items():
            module, _, leaf = key.rpartition(".")
            if prefix + module not in names:
                raise CheckpointError(f"{path}: unexpected key {key!r} for a VAE with ngf={ngf}, nz={nz}")
            state[f"{names[prefix + module]}.{leaf}"] = value
    model = VAE(in_channels=int(channels), ngf=int(ngf), nz=int(nz))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{decoder_path}: encoder/decoder do not form one VAE "
            f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.eval()


def _load_state_dict(path: str | Path) -> dict[str, Tensor]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: not a readable PyTorch state dict ({type(exc).__name__})") from None
    if not isinstance(sd, dict) or not all(isinstance(v, Tensor) for v in sd.values()):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    return dict(sd)
