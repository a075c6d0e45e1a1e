"""A diffusion model's two denoisers: the EMA weights ``unet``, which evaluation, ROSE and export use, and
the optimised weights ``online``, which training steps and the EMA follows. A model read from a folder
(``load_diffusers``) makes ``online`` only when it first trains: one read to score holds one denoiser (a
copy of Stable Diffusion 1.5's UNet is 3.4 GB). Its state dict names ``online.`` either way (until the
copy exists, the EMA weights' own tensors), so files and fingerprints do not depend on whether it exists.
Which of the two a loss runs (``net``) and the layers ROSE may take (the EMA one's) are said here too."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Self

import torch
from torch import Tensor, nn

from roseood.memory import check_memory, module_bytes
from roseood.models.diffusion.denoisers import forward_order, inert_layers, layer_sets


class EMAWeights(nn.Module):
    """The EMA denoiser ``unet`` and the optimised one ``online`` (None until training makes it, in a model
    read to score), the decay ``ema_decay`` and the steps taken ``ema_steps``, as ``DiffusionModel`` keeps
    them; which one runs, and the layers ROSE may take."""

    unet: Any
    online: Any
    ema_decay: float
    ema_steps: Tensor

    def net(self) -> Any:
        """The denoiser in use: the optimised one while training, the EMA one otherwise."""
        return self.online if self.training else self.unet

    def inert_layers(self) -> dict[str, str]:
        """The denoiser's layers whose gradient is zero by construction, each with why (``inert_layers``
        of ``...diffusion.denoisers``): their layer scores would be rounding noise."""
        return inert_layers(self.unet, "unet.")

    def layer_sets(self) -> dict[str, list[str]]:
        """Layers of the EMA denoiser: ``all`` (every convolution, linear map and norm affine), ``weights``
        (convolutions and linear maps), ``down``/``mid``/``up`` (one part of a UNet, all layers); none
        of the ``inert_layers``."""
        return layer_sets(self.unet, "unet.")

    def forward_order(self, names: list[str]) -> list[str]:
        """Layer ``names`` in the order the denoiser runs them (``last:N`` takes the last N)."""
        return forward_order(names, "unet.")

    def train(self, mode: bool = True) -> Self:
        """Train mode; in a model read to score, the optimised copy of the EMA weights is made the first
        time (refused in one line where it cannot fit): call it before an optimiser takes the parameters."""
        if mode and self.online is None:
            self._make_online()
        return super().train(mode)

    def _make_online(self) -> None:
        """The optimised weights, a copy of the EMA ones (an adapter's base frozen in it as in them)."""
        size = module_bytes(lambda: self.unet)
        check_memory(
            size,
            f"the optimised copy of the {type(self.unet).__name__}'s weights, which training needs",
            device=self.ema_steps.device,
            hint="the model is too large to train on this machine",
        )
        self.online = copy.deepcopy(self.unet)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """``nn.Module``'s, the optimised weights under ``online.`` as ever: until training makes them, the
        EMA weights' own tensors (no copy), so that a model's files and fingerprint are the same whether
        or not it has held a second denoiser."""
        out = super().state_dict(*args, **kwargs)
        if self.online is None:
            prefix = kwargs.get("prefix", "")
            ema = f"{prefix}unet."
            for key in [k for k in out if k.startswith(ema)]:
                out[f"{prefix}online.{key.removeprefix(ema)}"] = out[key]
        return out

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        """``nn.Module``'s; optimised weights (``online.``) unlike the EMA ones (a checkpoint written while
        training) make the optimised copy first, so that they load; equal ones (a model that has not
        trained since it was read) leave the model one denoiser."""
        if self.online is None and any(
            k.startswith("online.") and not _same(v, state_dict.get(f"unet.{k.removeprefix('online.')}"))
            for k, v in state_dict.items()
        ):
            self._make_online()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    @torch.no_grad()
    def _update_ema(self) -> None:
        """EMA with diffusers' warm-up: decay min(ema_decay, (1 + s) / (10 + s)) at step s."""
        s = int(self.ema_steps)
        decay = min(self.ema_decay, (1 + s) / (10 + s))
        for e, p in zip(self.unet.parameters(), self.online.parameters(), strict=True):
            e.lerp_(p, 1 - decay)
        self.ema_steps += 1


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal tensors (of one shape and dtype)."""
    return isinstance(b, Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
