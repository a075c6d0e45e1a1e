"""Random network distillation with perturbed images (Choi & Chung 2019, "Novelty detection via
blurring"; code: sungikchoi/NVB), the RND baseline of the paper's Table 1.

Two fixed, randomly initialised target nets g₀ and g₁ embed images; a predictor f is trained to output
g₀(x) on in-distribution images and g₁(x̃) on their perturbations x̃ (SVD/DCT blurring, Gaussian blur or
random pixels, ``roseood.data.perturbations``). The OOD score is ``‖f(x) − g₀(x)‖²``: the predictor only
learned to imitate g₀ on images like the training data, and learned to *avoid* it on blurred ones.

NVB used ResNet-34 targets and a deeper ResNet predictor (512-d outputs), Adam lr 1e-4 for 50 epochs,
×0.1 at epoch 25, batch 128. To stay CPU-friendly we use small plain conv nets (four 3×3 convs with
strides 1, 2, 2, 2, global average pooling, a linear map to ``out_dim``; the predictor has ``extra``
more convs so it is deeper than its targets, as in NVB) and fewer epochs; the learning rate drops ×0.1
after half of the epochs as in NVB. Inputs are mapped from [0, 1] to [−1, 1] before every net.

The generative model is not used (pass None); if one is given, the nets run on its device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from roseood.data.perturbations import make_perturbation
from roseood.data.tensors import iter_batches
from roseood.detectors.base import Detector, register_detector
from roseood.detectors.inputs import require_images
from roseood.errors import CheckpointError, DataError
from roseood.integrity import count, field, tensor
from roseood.memory import check_memory, module_bytes
from roseood.models.base import RoseModel
from roseood.progress import progress as progress_bar
from roseood.validation import check_float, check_int, check_seed

MAX_CHANNELS, MAX_IMAGE_SIZE = 64, 4096  # a stored net larger than this is a damaged file, not a model


def _cpu_state(net: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().cpu() for k, v in net.state_dict().items()}


class EmbeddingNet(nn.Module):
    """3×3 conv/ReLU stack (strides 1, 2, 2, 2, then ``extra`` stride-1 convs), average pool, linear."""

    def __init__(self, in_channels: int, width: int, out_dim: int, extra: int = 0) -> None:
        super().__init__()
        chans = [in_channels, width, 2 * width, 4 * width, 8 * width]
        layers: list[nn.Module] = []
        for i in range(4):
            layers += [nn.Conv2d(chans[i], chans[i + 1], 3, stride=1 if i == 0 else 2, padding=1), nn.ReLU()]
        for _ in range(extra):
            layers += [nn.Conv2d(chans[-1], chans[-1], 3, padding=1), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(chans[-1], out_dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(2.0 * x - 1.0).mean(dim=(2, 3)))


class RND(Detector):
    """RND novelty score (higher = more OOD).

    ``perturbation``: a spec of ``make_perturbation`` ("svd:28", "dct:28", "gb", "random:0.2");
    ``epochs``/``lr``: predictor training (Adam, batches of ``batch_size`` clean + as many perturbed
    images); ``width``/``out_dim``/``extra``: net sizes; ``seed``: net initialisation, shuffling and
    random perturbations.
    """

    method = "rnd"

    def __init__(
        self,
        model: RoseModel | None = None,
        *,
        perturbation: str = "svd:28",
        epochs: int = 5,
        lr: float = 1e-3,
        width: int = 16,
        out_dim: int = 256,
        extra: int = 1,
        seed: int = 0,
        batch_size: int = 128,
        progress: bool | None = None,
    ) -> None:
        super().__init__(model, batch_size=batch_size, progress=progress)
        require_images(model, self.method)
        self._device = super().device
        self.model = None  # the model only chooses the device: RND never reads it
        self._perturb = make_perturbation(perturbation)  # validates the spec
        self.perturbation = perturbation
        self.epochs = check_int(epochs, "epochs")
        self.lr = check_float(lr, "lr", low=0.0, low_open=True)
        self.width = check_int(width, "width")
        self.out_dim = check_int(out_dim, "out_dim")
        self.extra = check_int(extra, "extra", low=0)
        self.seed = check_seed(seed)
        nets = module_bytes(lambda: EmbeddingNet(3, self.width, self.out_dim, self.extra))
        # three nets; the predictor's gradients and Adam's two moments on top
        check_memory(6 * nets, f"rnd nets of width {width}, out_dim {out_dim}, extra {extra}")
        self.in_channels_: int | None = None
        self.image_size_: int | None = None
        self.predictor_: EmbeddingNet | None = None
        self.targets_: tuple[EmbeddingNet, EmbeddingNet] | None = None
        self.losses_: list[float] = []

    @property
    def device(self) -> torch.device:
        return self._device

    def _build(self, in_channels: int, image_size: int) -> None:
        """Create the predictor and the two targets, initialised from ``seed`` (global RNG left intact)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            nets = [EmbeddingNet(in_channels, self.width, self.out_dim, e) for e in (self.extra, 0, 0)]
        for net in nets:
            net.to(self.device)
        for target in nets[1:]:
            target.requires_grad_(False).eval()
        self.predictor_, self.targets_ = nets[0], (nets[1], nets[2])
        self.in_channels_, self.image_size_ = in_channels, image_size

    def _fit(self, x: Tensor) -> None:
        self._build(x.shape[1], x.shape[2])
        assert self.predictor_ is not None and self.targets_ is not None
        f, (g0, g1) = self.predictor_, self.targets_
        gen = torch.Generator().manual_seed(self.seed)
        opt = torch.optim.Adam(f.parameters(), lr=self.lr)
        decay_at = (self.epochs + 1) // 2 if self.epochs > 1 else self.epochs
        self.losses_ = []
        f.train()
        epochs = progress_bar(range(self.epochs), "RND training", enabled=self.progress, unit="epoch")
        for epoch in epochs:
            for group in opt.param_groups:
                group["lr"] = self.lr * (0.1 if epoch >= decay_at else 1.0)
            total = 0.0
            for idx in torch.randperm(x.shape[0], generator=gen).split(self.batch_size):
                clean = x[idx]
                perturbed = self._perturb(clean, gen)
                clean, perturbed = clean.to(self.device), perturbed.to(self.device)
                with torch.no_grad():
                    target = torch.cat([g0(clean), g1(perturbed)])
                loss = (f(torch.cat([clean, perturbed])) - target).pow(2).sum(1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * idx.numel()
            self.losses_.append(total / x.shape[0])
            epochs.set_postfix(loss=f"{self.losses_[-1]:.4g}")
        f.eval()

    def _score(self, x: Tensor) -> Tensor:
        assert self.predictor_ is not None and self.targets_ is not None
        if (x.shape[1], x.shape[2]) != (self.in_channels_, self.image_size_):
            raise DataError(
                f"this RND detector was fitted on {self.in_channels_}-channel {self.image_size_}×"
                f"{self.image_size_} images, got {x.shape[1]}-channel {x.shape[2]}×{x.shape[3]}"
            )
        f, g0 = self.predictor_, self.targets_[0]
        out = []
        with torch.no_grad():
            for batch in iter_batches(x, self.batch_size, "RND scoring" if self.progress else None):
                b = batch.to(self.device)
                out.append((f(b) - g0(b)).pow(2).sum(1).cpu())
        return torch.cat(out)

    def state(self) -> dict[str, Any]:
        assert self.predictor_ is not None and self.targets_ is not None
        return {
            "in_channels": self.in_channels_,
            "image_size": self.image_size_,
            "predictor": _cpu_state(self.predictor_),
            "target0": _cpu_state(self.targets_[0]),
            "target1": _cpu_state(self.targets_[1]),
            "losses": list(self.losses_),
        }

    def load_state(self, state: dict[str, Any]) -> None:
        sizes = [count(state, k, "state.") for k in ("in_channels", "image_size")]
        if sizes[0] > MAX_CHANNELS or sizes[1] > MAX_IMAGE_SIZE:
            raise CheckpointError(f"fields 'state.in_channels'/'image_size': implausible sizes {sizes}")
        for net in ("predictor", "target0", "target1"):
            for name, value in field(state, net, dict, "state.").items():
                tensor(value, f"state.{net}.{name}")
        self._build(*sizes)
        assert self.predictor_ is not None and self.targets_ is not None
        self.predictor_.load_state_dict(state["predictor"])
        self.targets_[0].load_state_dict(state["target0"])
        self.targets_[1].load_state_dict(state["target1"])
        self.predictor_.eval()
        self.losses_ = list(state.get("losses", []))


register_detector(
    RND,
    {
        f"rnd-{name}": {"perturbation": perturbation}
        for name, perturbation in (
            ("svd", "svd:28"),
            ("dct", "dct:28"),
            ("gb", "gb"),
            ("random", "random:0.2"),
        )
    },
)
