"""ROSE (Choi et al. 2021): how far the model would have to move to fit a test image.

Per layer l, ``s_l(x) = g_lᵀ F_l⁻¹ g_l`` with ``g_l`` the per-sample gradient of the model's −log p(x)
w.r.t. the layer and ``F_l`` its empirical Fisher on in-distribution data. Layer scores are
z-normalised with in-distribution statistics taken on images *not* used for the Fisher (the Fisher's
own samples score systematically low), and aggregated as ``‖ReLU(ẑ + β)‖_p`` (the default; other
aggregations in ``roseood.detectors.aggregation``, fitted on the same held-out images).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Self

import numpy as np
import torch
from torch import Tensor

from roseood import distributed
from roseood.curvature import (
    FISHERS,
    FactorCache,
    Fisher,
    GradientStore,
    LayerGradients,
    LayerReport,
    check_layers,
    make_fisher,
)
from roseood.data.tensors import ImageData, iter_batches
from roseood.detectors.adjustment import LikelihoodTrend, adjusted, check_adjust, column_names
from roseood.detectors.aggregation import (
    DEFAULT_AGGREGATION,
    Aggregation,
    layer_problems,
    make_aggregation,
    tie_problem,
)
from roseood.detectors.base import Detector, register_detector
from roseood.errors import CheckpointError, DataError, DegenerateFitWarning, RoseError
from roseood.integrity import field, same, shown, tensor
from roseood.models.base import RoseModel
from roseood.models.wrap import LossFn, wrap
from roseood.randomness import per_input_seed
from roseood.validation import check_float, check_int

STATE_VERSION = 2  # 2: compact Fisher states (Householder eigenbases, float32 eigenvalues)


class ROSE(Detector):
    """ROSE detector. ``fisher``: ekfac (paper default), kfac, diag or dense; ``layers``: a named layer set
    of the model (e.g. "encoder", "invconv", "all") or a list of module names.

    ``model`` is a :class:`~roseood.models.base.RoseModel` (a built-in family or ``roseood.wrap(...)``),
    or any image ``nn.Module`` together with ``loss_fn`` (its per-sample −log p(x), shape (N,)), which
    ROSE wraps itself (for non-image inputs, wrap it first). ``stats_fraction`` of the images given to
    ``fit`` are held out for the layer means/stds unless ``held_out`` images are passed explicitly.
    ``stochastic=True`` samples the latent (VAE) or the dequantisation noise (Glow) instead of the
    deterministic loss the authors used, per image from ``seed`` and the image (``roseood.randomness``).

    ``aggregate`` names how layer scores become one score, ``name[:k=v,...]`` (``relu-norm``, the
    paper's, with ``beta`` and ``p``; ``max-z``; ``log-z``; ``gaussian``; ``gmm:k=3``); it is fitted on
    the held-out images. ``adjust`` (beyond the paper; see ``roseood.detectors.adjustment``): ``nll``
    divides each layer score by its in-distribution trend in the image's loss, ``both`` aggregates the raw
    and the adjusted layer scores together. Degenerate fits (ties, non-finite, exploding or constant layer
    scores) raise a ``DegenerateFitWarning`` at fit time and are kept in ``fit_warnings_``.
    ``batch_size`` counts rows of the model's loss: a model whose loss runs each image several times
    (a diffusion model's K pairs, ``rows_per_input``) gets ``batch_size // K`` images per batch, so
    memory does not grow with K.
    """

    method = "rose"
    keeps_held_out = True  # layer statistics come from the held-out images
    layerwise = True
    reports_fit_warnings = True
    runtime_params = ("progress", "loss_fn")
    grad_cache_bytes: int = 2**29
    """Memory the first Fisher pass may keep its layer gradients in for EKFAC's second pass, which then
    skips the model for those batches (0: always recompute; the kept gradients add to the peak memory)."""

    def __init__(
        self,
        model: RoseModel | torch.nn.Module | None,
        *,
        loss_fn: LossFn | None = None,
        fisher: str = "ekfac",
        layers: str | list[str] | None = None,
        damping: float = 1e-8,
        beta: float | list[float] = 0.0,
        p: float = math.inf,
        stats_fraction: float = 0.2,
        stochastic: bool = False,
        seed: int = 0,
        aggregate: str = DEFAULT_AGGREGATION,
        adjust: str = "none",
        batch_size: int = 64,
        progress: bool | None = None,
    ) -> None:
        if loss_fn is not None and isinstance(model, torch.nn.Module):
            model = wrap(model, loss_fn, layers=layers if isinstance(layers, list) else None)
        if not isinstance(model, RoseModel) or not isinstance(model, torch.nn.Module):
            raise RoseError("ROSE needs a generative model: a roseood model, roseood.wrap(...), or loss_fn=")
        super().__init__(model, batch_size=batch_size, progress=progress)
        check_float(p, "p", low=1.0, allow_inf=True)
        check_float(damping, "damping", low=0.0)
        for b in beta if isinstance(beta, list) else [beta]:
            check_float(b, "beta")
        given = {k: v for k, v, default in (("beta", beta, 0.0), ("p", p, math.inf)) if v != default}
        self.aggregation_: Aggregation = make_aggregation(aggregate, **given)
        if not 0.0 < check_float(stats_fraction, "stats_fraction") < 1.0:
            raise RoseError(f"stats_fraction must lie in (0, 1), got {stats_fraction}")
        coords = type(make_fisher(fisher)).coords  # validates the name early
        self.model: RoseModel = model
        self.fisher = fisher
        self.layer_spec = layers
        self.layers = layers if isinstance(layers, list) else model.rose_layers(layers)
        self.damping = damping
        self.beta = beta
        self.p = p
        self.aggregate = aggregate
        self.adjust = check_adjust(adjust)
        self.trend_ = LikelihoodTrend()
        self.stats_fraction = stats_fraction
        self.stochastic = stochastic
        self.seed = check_int(seed, "seed", low=0)
        self._grads = LayerGradients(model, self.layers, coords=coords)
        self.fishers_: dict[str, Fisher] = {}
        self.mean_: Tensor | None = None
        self.std_: Tensor | None = None

    @property
    def images_per_batch(self) -> int:
        """Images per batch: ``batch_size`` rows of the loss over the rows each image becomes (≥ 1)."""
        return max(1, self.batch_size // getattr(self.model, "rows_per_input", 1))

    def _layer_grads(self, x: Tensor) -> tuple[dict[str, Any], Tensor]:
        """Per-sample gradients of the chosen layers and the per-sample loss they differentiate."""
        self.model.eval()
        with per_input_seed(self.seed):
            return self._grads.with_loss(
                lambda b: self.model.rose_loss(b, stochastic=self.stochastic), x.to(self.device)
            )

    def check(self, images: Tensor | np.ndarray) -> list[LayerReport]:
        """Dry run on a couple of images: every parameterised layer of the model, its handler, usable or
        why not (``roseood.curvature.format_layer_report`` prints it as a table)."""
        self.model.eval()
        x = self._check(images).to(self.device)
        return check_layers(
            self._grads.model, lambda b: self.model.rose_loss(b, stochastic=self.stochastic), x
        )

    def fit(
        self,
        images: ImageData,
        held_out: ImageData | None = None,
        *,
        stats_images: ImageData | None = None,
    ) -> Self:
        """Fit the per-layer Fishers on ``images`` and the layer-score normalisation on ``held_out``
        (``stats_images`` is its former name), else on the last ``stats_fraction`` of ``images``."""
        return super().fit(images, held_out if held_out is not None else stats_images)

    def held_out_share(self) -> float:
        return self.stats_fraction

    def _fit_apart(self, x: Tensor, held_out: Tensor) -> None:
        if held_out.shape == x.shape and torch.equal(held_out, x):
            raise DataError("the held-out images are the Fisher's; ROSE's statistics need other ones")
        self.fit_fisher(x)
        self.fit_stats(held_out)

    def fit_fisher(self, x: Tensor) -> None:
        """Accumulate each layer's Fisher over ``x`` (two passes for EKFAC).

        Under torchrun each process accumulates its shard of ``x``; the sums are added together (float64)
        before each pass ends, and rank 0's eigendecompositions are shared with every process. With a
        deterministic loss, the second pass reuses the first pass's gradients (up to ``grad_cache_bytes``)
        instead of running the model again."""
        self.fishers_ = {name: make_fisher(self.fisher, self.damping) for name in self.layers}
        passes = next(iter(self.fishers_.values())).passes
        distributed.check_enough(x.shape[0], "Fisher images")
        x = x[distributed.shard(x.shape[0])]
        store = GradientStore(self.grad_cache_bytes if passes > 1 and not self.stochastic else 0)
        for pass_index in range(passes):
            desc = f"ROSE-{self.fisher} Fisher pass {pass_index + 1}/{passes}" if self.progress else None
            for i, batch in enumerate(iter_batches(x, self.images_per_batch, desc)):
                grads = store.get(i, pass_index, batch, lambda b: self._layer_grads(b)[0])
                for name, g in grads.items():
                    self.fishers_[name].update(g, pass_index)
            factors = FactorCache()
            for f in self.fishers_.values():
                if distributed.active():
                    f.reduce_sums(pass_index, distributed.all_reduce)
                f.end_pass(pass_index, factors)
                f.map_tensors(distributed.broadcast)

    def fit_stats(self, x: Tensor) -> None:
        """Fit the z-normalisation and the aggregation on held-out in-distribution images (never the
        Fisher's: ``fit`` passes disjoint slices) and warn about a degenerate fit; sharded under torchrun."""
        distributed.check_enough(x.shape[0], "statistics images")
        x = x[distributed.shard(x.shape[0])]
        raw, loss = self._scores_and_loss(x, desc="ROSE layer statistics")
        raw, loss = distributed.gather_rows(raw), distributed.gather_rows(loss)
        self.mean_ = raw.mean(0)
        self.std_ = raw.std(0).clamp_min(1e-12)
        if self.adjust != "none":
            self.trend_.fit(raw.numpy(), loss.numpy())
        values = adjusted(raw.numpy(), loss.numpy(), self.trend_, self.adjust)
        columns = column_names(self.layers, self.adjust)
        self.fit_warnings_ = self._warn(layer_problems(values, columns))
        self.aggregation_.fit(values)
        self.fit_warnings_ += self._warn(tie_problem(values, columns, self.aggregation_))

    def _warn(self, messages: list[str]) -> list[str]:
        for message in messages:
            warnings.warn(f"ROSE-{self.fisher}: {message}", DegenerateFitWarning, stacklevel=4)
        return messages

    def layer_scores(self, images: ImageData, desc: str = "ROSE scoring") -> Tensor:
        """Raw per-layer scores ``gᵀ F⁻¹ g``, shape (N, layers), float64."""
        return self._layer_scores(self._check(images), desc)

    def layer_scores_and_loss(self, images: Tensor | np.ndarray) -> tuple[Tensor, Tensor]:
        """Raw per-layer scores (N, layers) and the per-sample loss they are gradients of (N,), float64:
        what the likelihood adjustment is fitted on."""
        return self._scores_and_loss(self._check(images))

    def _layer_scores(self, x: Tensor, desc: str = "ROSE scoring") -> Tensor:
        """``layer_scores`` of already validated images (each public call validates once)."""
        return self._scores_and_loss(x, desc)[0]

    def _scores_and_loss(self, x: Tensor, desc: str = "ROSE scoring") -> tuple[Tensor, Tensor]:
        """Raw layer scores (N, layers) and the per-sample loss (N,), both float64 on the CPU."""
        if not self.fishers_:
            raise RoseError("ROSE detector is not fitted: call fit() or load() first")
        scores, losses = [], []
        for batch in iter_batches(x, self.images_per_batch, desc if self.progress else None):
            grads, loss = self._layer_grads(batch)
            scores.append(torch.stack([self.fishers_[n].quad(grads[n]) for n in self.layers], 1))
            losses.append(loss.double())
        return torch.cat(scores).cpu(), torch.cat(losses).cpu()

    def normalized_layer_scores(self, images: Tensor | np.ndarray) -> Tensor:
        """Layer scores z-normalised with the in-distribution statistics, (N, layers)."""
        return self._normalized(self._check(images))

    def _normalized(self, x: Tensor) -> Tensor:
        assert self.mean_ is not None and self.std_ is not None
        return (self._layer_scores(x) - self.mean_) / self.std_

    def _score(self, x: Tensor) -> Tensor:
        raw, loss = self._scores_and_loss(x)
        columns = adjusted(raw.numpy(), loss.numpy(), self.trend_, self.adjust)
        return torch.from_numpy(self.aggregation_(columns))

    def state(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "fishers": {n: f.state() for n, f in self.fishers_.items()},
            "mean": self.mean_,
            "std": self.std_,
            "aggregation": self.aggregation_.state(),
            "trend": self.trend_.state(),
            "fit_warnings": self.fit_warnings_,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if not same(state.get("version"), STATE_VERSION):
            raise CheckpointError(
                "this ROSE detector was saved by an older roseood in a format no longer read; refit it"
            )
        fishers = field(state, "fishers", dict, "state.")
        if list(fishers) != self.layers:
            raise CheckpointError(
                f"field 'state.fishers' must hold one Fisher per layer of the detector "
                f"({len(self.layers)}), found {shown(list(fishers))}"
            )
        self.fishers_ = {}
        for name in fishers:
            f = make_fisher(self.fisher, self.damping)
            try:
                f.load_state(field(fishers, name, dict, "state.fishers."))
            except CheckpointError as exc:
                raise CheckpointError(f"the {self.fisher} Fisher of layer {name}: {exc}") from None
            self.fishers_[name] = f
        n = (len(self.layers),)
        self.mean_ = tensor(state.get("mean"), "state.mean", shape=n, finite=False).double()
        self.std_ = tensor(state.get("std"), "state.std", shape=n, finite=False).double()
        columns = len(column_names(self.layers, self.adjust))
        # files from before aggregations were options hold only the paper's z-normalisation
        aggregation = state.get("aggregation", {"mean": self.mean_, "std": self.std_})
        self.aggregation_.load_state(aggregation, columns)
        if self.adjust != "none":
            self.trend_.load_state(state.get("trend", {}), len(self.layers))
        self.fit_warnings_ = [str(w) for w in state.get("fit_warnings", [])]


register_detector(ROSE, {f"rose-{fisher}": {"fisher": fisher} for fisher in reversed(FISHERS.names())})
