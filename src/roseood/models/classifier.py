"""Image classifiers for the paper's layer-wise study (Appendix, Figure 6): a 4-conv CNN, VGG-11/13/16/19
and a CIFAR-style ResNet-18, each ending in one fully connected layer as the paper states.

ROSE treats a classifier like a generative model whose "−log p(x)" is the cross-entropy with the
*predicted* label (argmax of the logits), as the paper does for test samples. Inputs are images in
[0, 1]; the model maps them to [−1, 1] (a fixed ``2x − 1``, so checkpoints need no data statistics).
All convolutions are 3×3 (1×1 on ResNet shortcuts), followed by BatchNorm and ReLU; features are
global-average-pooled before the linear head, so every architecture works on any image size ≥ 32.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from roseood.errors import RoseError
from roseood.models.base import GenerativeModel

# Standard VGG configurations (Simonyan & Zisserman 2015): convolutions per stage; every stage ends in a
# 2×2 max-pool and has 64, 128, 256, 512, 512 channels at width 64.
VGG_STAGES: dict[str, tuple[int, ...]] = {
    "vgg11": (1, 1, 2, 2, 2),
    "vgg13": (2, 2, 2, 2, 2),
    "vgg16": (2, 2, 3, 3, 3),
    "vgg19": (2, 2, 4, 4, 4),
}
ARCHS = ("cnn", *VGG_STAGES, "resnet18")


def _conv_bn_relu(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


def _cnn(in_channels: int, width: int) -> tuple[nn.Sequential, int]:
    """Basic CNN: four conv/BN/ReLU/max-pool blocks with width, 2·width, 4·width, 8·width channels."""
    layers: list[nn.Module] = []
    c_in = in_channels
    for mult in (1, 2, 4, 8):
        layers += [*_conv_bn_relu(c_in, mult * width), nn.MaxPool2d(2)]
        c_in = mult * width
    return nn.Sequential(*layers), c_in


def _vgg(arch: str, in_channels: int, width: int) -> tuple[nn.Sequential, int]:
    """VGG feature extractor with BatchNorm: stages of width·(1, 2, 4, 8, 8) channels, each max-pooled."""
    layers: list[nn.Module] = []
    c_in = in_channels
    for convs, mult in zip(VGG_STAGES[arch], (1, 2, 4, 8, 8), strict=True):
        for _ in range(convs):
            layers += _conv_bn_relu(c_in, mult * width)
            c_in = mult * width
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers), c_in


class BasicBlock(nn.Module):
    """ResNet basic block: two 3×3 conv/BN, plus a 1×1 conv/BN shortcut when the shape changes.

    Submodules are registered in forward order (conv1, conv2, shortcut) so layer lists read by depth.
    """

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + self.shortcut(x))


def _resnet18(in_channels: int, width: int) -> tuple[nn.Sequential, int]:
    """CIFAR-style ResNet-18: 3×3 stem (no max-pool), four stages of two blocks, width·(1, 2, 4, 8)."""
    layers: list[nn.Module] = _conv_bn_relu(in_channels, width)
    c_in = width
    for stage, mult in enumerate((1, 2, 4, 8)):
        c_out = mult * width
        stride = 1 if stage == 0 else 2
        layers.append(nn.Sequential(BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)))
        c_in = c_out
    return nn.Sequential(*layers), c_in


class Classifier(GenerativeModel):
    """A ``num_classes``-way image classifier (``arch`` in ``ARCHS``) that ROSE can analyse layer by layer.

    ``width`` is the first-layer channel count (64 gives the standard VGG / ResNet-18 sizes); tiny widths
    make fast tests. Layer names: ``features.*`` (convolutions) and ``head`` (the one linear layer).
    """

    kind = "classifier"

    def __init__(
        self,
        arch: str = "cnn",
        in_channels: int = 1,
        num_classes: int = 10,
        width: int = 64,
        image_size: int = 32,
    ) -> None:
        if arch not in ARCHS:
            raise RoseError(f"unknown classifier architecture {arch!r}; choose from {', '.join(ARCHS)}")
        if width < 1 or num_classes < 2 or in_channels < 1:
            raise RoseError(
                f"need width ≥ 1, num_classes ≥ 2 and in_channels ≥ 1 "
                f"(got {width}, {num_classes}, {in_channels})"
            )
        if image_size < 32:
            raise RoseError(f"classifiers downsample by up to 32: need image_size ≥ 32, got {image_size}")
        super().__init__(in_channels, image_size)
        self.arch = arch
        self.num_classes = num_classes
        self.width = width
        if arch == "cnn":
            self.features, channels = _cnn(in_channels, width)
        elif arch == "resnet18":
            self.features, channels = _resnet18(in_channels, width)
        else:
            self.features, channels = _vgg(arch, in_channels, width)
        self.head = nn.Linear(channels, num_classes)

    def config(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "in_channels": self.in_channels,
            "num_classes": self.num_classes,
            "width": self.width,
            "image_size": self.image_size,
        }

    def layer_sets(self) -> dict[str, list[str]]:
        """``all``: every Conv2d and the linear head in forward order (BatchNorm excluded); ``convs``."""
        convs = [n for n, m in self.named_modules() if isinstance(m, nn.Conv2d)]
        return {"all": [*convs, "head"], "convs": convs}

    def logits(self, x: Tensor) -> Tensor:
        """Class logits (N, num_classes) for images in [0, 1]."""
        h = self.features(2.0 * x - 1.0)
        return self.head(F.adaptive_avg_pool2d(h, 1).flatten(1))

    def rose_loss(self, x: Tensor, stochastic: bool = False) -> Tensor:
        """Per-sample cross-entropy with the predicted (argmax) label, which is taken without gradient.

        Deterministic (``stochastic`` is accepted for the interface and has no effect); samples are
        independent in eval mode, where BatchNorm uses its running statistics.
        """
        logits = self.logits(x)
        return F.cross_entropy(logits, logits.detach().argmax(1), reduction="none")

    def nll(self, x: Tensor) -> Tensor:
        """−log of the maximum softmax probability, per sample in nats.

        Not an image likelihood: it is the classifier's own baseline OOD score (maximum softmax
        probability), and equals ``rose_loss``.
        """
        return self.rose_loss(x)

    def train_loss(self, x: Tensor) -> Tensor:
        raise RoseError("classifiers need labels: train them with roseood.bench.classifier.train_classifier")
