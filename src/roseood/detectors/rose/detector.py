"""The ROSE detector: settings stored at construction, everything else built and fitted by ``fit``; its
Fisher fit (``fit_together``), which fits beside its own the Fishers of other ROSEs that differ from it
only in the Fisher kind, on the same gradients (``rose evaluate``'s variants, the DDPM default's compact
EKFAC with ``rose-ekfac``'s EKFAC), each as its own fit makes it."""

from __future__ import annotations

import time
import warnings
from collections.abc import Hashable, Sequence
from contextlib import closing
from dataclasses import replace
from functools import partial
from typing import Any, Self

import numpy as np
import torch
from torch import Tensor

from roseood import distributed
from roseood.contracts import RowsModel, SharesFishers
from roseood.curvature import (
    FISHERS,
    FactorCache,
    GradientStore,
    JointFit,
    LayerReport,
    check_layers,
    fisher_pass,
    settled_line,
)
from roseood.data.tensors import ImageData, iter_batches
from roseood.detectors.adjustment import LikelihoodTrend, column_names
from roseood.detectors.aggregation import Aggregation
from roseood.detectors.base import Detector
from roseood.detectors.features import extra_columns
from roseood.detectors.inputs import model_inputs
from roseood.detectors.rose.arguments import FisherArguments, ScoreArguments, check_rows, view
from roseood.detectors.rose.cost import StageSeconds
from roseood.detectors.rose.fitted import FittedFishers, MemoKey, stored_digest
from roseood.detectors.rose.statistics import fit_statistics, statistics_scores
from roseood.detectors.rose.stream import LayerStream
from roseood.errors import CheckpointError, DataError, RoseError, shown
from roseood.integrity import same, tensor
from roseood.models.base import RoseModel
from roseood.models.checkpoint import model_fingerprint
from roseood.models.wrap import LossFn, wrap
from roseood.progress import note
from roseood.serialization import array_digest
from roseood.settings import ROSE_DEFAULTS

STATE_VERSION = 2  # 2: compact Fisher states (Householder eigenbases, float32 eigenvalues)


class ROSE(Detector):
    """ROSE detector: ``__init__`` stores and checks the settings (``fisher_arguments`` and
    ``score_arguments`` are their typed views, where each setting is described); ``fit`` builds the
    layer gradients, fits the Fishers (``fishers_``, a ``FittedFishers``, or takes another ROSE's) and
    the statistics and aggregation on held-out images.

    ``model`` is a :class:`~roseood.models.base.RoseModel` (a built-in family or ``roseood.wrap(...)``),
    or any image ``nn.Module`` with ``loss_fn`` (its per-sample −log p(x), shape (N,)), which ROSE wraps
    (non-image inputs: wrap it first). Every setting's meaning, default and check (``fisher``, ``layers``,
    ...): ``roseood.settings.ROSE_SETTINGS``. Degenerate fits (ties, exploding or constant layer scores)
    raise a ``DegenerateFitWarning`` at fit and are kept in ``fit_warnings_``; non-finite layer scores
    are refused in one line, at fit and when scoring."""

    method = "rose"
    keeps_held_out = True  # layer statistics come from the held-out images
    layerwise = True
    reports_fit_warnings = True
    runtime_params = ("progress", "loss_fn", "memory")
    grad_cache_bytes: int = 2**29
    """Memory the first Fisher pass may keep its layer gradients in for EKFAC's second pass, which then
    skips the model for those batches (0: always recompute; they add to the peak memory)."""

    def __init__(
        self,
        model: RoseModel | torch.nn.Module | None,
        *,
        loss_fn: LossFn | None = None,
        fisher: str = ROSE_DEFAULTS["fisher"],
        layers: str | list[str] | None = ROSE_DEFAULTS["layers"],
        damping: float = ROSE_DEFAULTS["damping"],
        rcond: float | None = ROSE_DEFAULTS["rcond"],
        beta: float | list[float] = ROSE_DEFAULTS["beta"],
        p: float = ROSE_DEFAULTS["p"],
        stats_fraction: float = ROSE_DEFAULTS["stats_fraction"],
        stochastic: bool = ROSE_DEFAULTS["stochastic"],
        seed: int = ROSE_DEFAULTS["seed"],
        rows: str = ROSE_DEFAULTS["rows"],
        aggregate: str = ROSE_DEFAULTS["aggregate"],
        adjust: str = ROSE_DEFAULTS["adjust"],
        features: str = ROSE_DEFAULTS["features"],
        batch_size: int = ROSE_DEFAULTS["batch_size"],
        max_size: int | str | None = ROSE_DEFAULTS["max_size"],
        memory: int | str | None = ROSE_DEFAULTS["memory"],
        progress: bool | None = None,
    ) -> None:
        if loss_fn is not None and isinstance(model, torch.nn.Module):
            model = wrap(model, loss_fn, layers=layers if isinstance(layers, list) else None)
        if not isinstance(model, RoseModel) or not isinstance(model, torch.nn.Module):
            raise RoseError("ROSE needs a generative model: a roseood model, roseood.wrap(...), or loss_fn=")
        super().__init__(model, batch_size=batch_size, progress=progress)
        self.model: RoseModel = model
        self.layers = layers if isinstance(layers, list) else model.rose_layers(layers)  # names, resolved
        self.fisher, self.damping, self.rcond, self.stochastic = fisher, damping, rcond, stochastic
        self.seed, self.max_size, self.memory = seed, max_size, memory
        self.rows, self.aggregate, self.beta, self.p = rows, aggregate, beta, p
        self.adjust, self.features, self.stats_fraction = adjust, features, stats_fraction
        checked = self.fisher_arguments  # refuses a bad setting now, before any image is read
        self.seed, self.max_size, self.memory = checked.seed, checked.max_size, checked.memory
        self.score_arguments  # noqa: B018 (the same check of the scoring settings)
        check_rows(rows, model, stochastic)
        self.stream = LayerStream(  # the layers' per-sample gradients, in batches that fit the memory
            model,
            self.layers,
            fisher=fisher,
            rows=rows,
            stochastic=stochastic,
            seed=self.seed,
            memory=self.memory,
        )
        if "complexity" in features and model.input_kind != "image":
            raise RoseError("features=...,complexity needs an image model (it compresses the images)")
        self.fishers_: FittedFishers | None = None  # fitted (or taken) by fit, restored by load
        self.aggregation_: Aggregation | None = None
        self.trend_ = LikelihoodTrend()
        self.extra_columns_: list[str] = []
        self.mean_: Tensor | None = None  # the held-out layer scores' mean and spread (z-scores)
        self.std_: Tensor | None = None

    def _matches(self, param: str, value: Any) -> bool:
        if param == "layers" and isinstance(value, str):  # a named set: the layers it names
            try:
                return self.layers == self.model.rose_layers(value)
            except RoseError:  # a set this model does not have
                return False
        return super()._matches(param, value)

    @property
    def fisher_arguments(self) -> FisherArguments:
        """The settings that decide the fitted Fishers (ROSEs with equal ones can share a fit)."""
        # the Fishers of "bands" rows are those of the images' summed gradients ("sum")
        rows = "each" if self.rows == "each" else "sum"
        return view(FisherArguments, self, layers=tuple(self.layers), rows=rows)

    @property
    def score_arguments(self) -> ScoreArguments:
        """The settings that turn raw layer scores into one score."""
        return view(ScoreArguments, self, beta=tuple(self.beta) if isinstance(self.beta, list) else self.beta)

    @property
    def score_key(self) -> tuple[FisherArguments, str] | None:
        """What decides the raw scores besides the images and weights (None: a stochastic loss, drawn
        anew each time): ROSEs with equal ones sharing Fishers read each other's scores."""
        return None if self.stochastic else (self.fisher_arguments, self.rows)

    @property
    def columns(self) -> list[str]:
        """Names of the raw layer-score columns: the layers, or with ``rows="each"`` each layer at each of
        the model's K timesteps (``layer@t``, layer-major), or with ``rows="bands"`` each timestep's sum
        over the layers (``layers@t``)."""
        if self.rows == "sum":
            return list(self.layers)
        k = self.stream.rows_per_image
        steps = self.model.row_labels() if isinstance(self.model, RowsModel) else list(range(k))
        if self.rows == "bands":
            return [f"layers@{t}" for t in steps]
        return [f"{name}@{t}" for name in self.layers for t in steps]

    def check(self, images: Tensor | np.ndarray) -> list[LayerReport]:
        """Dry run on a couple of images: every parameterised layer of the model, its handler, usable or
        why not (``roseood.curvature.format_layer_report`` prints it as a table)."""
        self.model.eval()
        x = model_inputs(images, self.model, self.batch_size).to(self.device)
        return check_layers(
            self.stream.grads.model, lambda b: self.model.rose_loss(b, stochastic=self.stochastic), x
        )

    def fit(
        self,
        images: ImageData,
        held_out: ImageData | None = None,
        *,
        stats_images: ImageData | None = None,
        fishers: FittedFishers | None = None,
    ) -> Self:
        """Fit the per-layer Fishers on ``images`` and the layer-score normalisation on ``held_out``
        (``stats_images`` is its former name), else on the last ``stats_fraction`` of ``images``.
        ``fishers``: Fishers fitted on the same ``images`` and weights with equal ``fisher_arguments``
        (another ROSE's ``fishers_``, or ``FittedFishers.load``), taken instead of fitting new ones;
        refused in one line otherwise (``rose evaluate`` fits them once for the ROSE variants it compares)."""
        self.fishers_ = fishers  # taken, after their check, by _fit_apart
        return super().fit(images, held_out if held_out is not None else stats_images)

    def held_out_share(self) -> float:
        return self.stats_fraction

    def _check_last_count(self, n: int) -> None:
        self.score_arguments.aggregation().check_count(n)

    def _fit_apart(self, x: Tensor, held_out: Tensor) -> None:
        if held_out.shape[0] > 1 and bool((held_out == held_out[:1]).all()):
            raise DataError(
                f"the {held_out.shape[0]} held-out images are one image repeated; ROSE's layer statistics "
                "need images that differ"
            )
        if held_out.shape == x.shape and torch.equal(held_out, x):
            raise DataError("the held-out images are the Fisher's; ROSE's statistics need other ones")
        self.fit_fisher(x, self.fishers_)
        self.fit_stats(held_out)

    def fisher_key(self, images: ImageData) -> tuple[FisherArguments, str, str]:
        """What identifies the Fishers ``fit_fisher(images)`` fits (the key they are shared by)."""
        x = model_inputs(images, self.model, self.batch_size)
        return self.fisher_arguments, model_fingerprint(self.model), array_digest(x.detach().cpu().numpy())

    def fit_fisher(self, images: ImageData, fishers: FittedFishers | None = None) -> FittedFishers:
        """Fit each layer's Fisher on ``images`` (two passes for EKFAC) into ``fishers_`` and return them;
        given ``fishers`` (fitted on these images with equal settings: another ROSE's, a file's, a
        cache's), take them instead, refused in one line when their ``fisher_key`` differs. The passes,
        under torchrun too: ``fit_together``."""
        if fishers is not None:
            fishers.check(*self.fisher_key(images))
            self.fishers_ = fishers
            return fishers
        (self.fishers_,), _ = fit_together(self, images)
        return self.fishers_

    def stage_seconds(self, images: ImageData, beside: Sequence[Hashable] = ()) -> StageSeconds:
        """Each stage of a fit timed on one of its batches of ``images`` (``StageSeconds``): an unfitted
        copy fits its Fishers there (with those of ``beside`` in the same passes, ``fit_together``; each
        pass's batches timed apart from its end) and computes their layer scores and extra columns, as its
        statistics and scoring do; this detector is left as it was."""
        probe = type(self)(self.model, **self.get_params(), memory=self.memory, progress=False)
        x = model_inputs(images, probe.model, probe.batch_size)
        x = x[: probe.stream.images_per_batch(probe.batch_size)]
        with warnings.catch_warnings():  # a fit on one batch may be warned about; the real one is not this
            warnings.simplefilter("ignore")
            (fishers, *_), seconds = fit_together(probe, x, beside)
            probe.fit_fisher(x, fishers)
            start = time.perf_counter()
            _, rows = probe._scores_and_loss(x)
            probe.extra_features(x, rows.sum(1), rows)
            scoring = time.perf_counter() - start
        wanted = [f.first_pass_images() for f in fishers.values()]
        first = None if None in wanted else max(w for w in wanted if w is not None)
        passes = tuple(batches / len(x) for batches, _ in seconds)
        return StageSeconds(passes, first, sum(end for _, end in seconds), scoring / len(x), len(x))

    def fit_stats(self, x: Tensor) -> None:
        """Fit the z-normalisation and the aggregation on held-out in-distribution images (never the
        Fisher's: ``fit`` passes disjoint slices) and warn about a degenerate fit; sharded under torchrun."""
        distributed.check_enough(x.shape[0], "statistics images")
        x = x[distributed.shard(x.shape[0])]
        raw, rows = self._scores_and_loss(x, desc="ROSE layer statistics")
        loss = rows.sum(1)
        extra, self.extra_columns_ = self.extra_features(x, loss, rows)
        raw, loss = distributed.gather_rows(raw), distributed.gather_rows(loss)
        extra = distributed.gather_rows(torch.from_numpy(extra)).numpy()
        self.fit_columns(raw.numpy(), loss.numpy(), extra, self.extra_columns_)

    def fit_columns(
        self,
        raw: np.ndarray,
        loss: np.ndarray,
        extra: np.ndarray | None = None,
        extra_names: list[str] | None = None,
    ) -> Self:
        """``fit_stats`` on held-out images' columns already computed (``statistics.fit_statistics``: raw
        layer scores, their loss, extra columns): how ``rose bench`` compares settings on one scoring."""
        extra = np.empty((len(raw), 0)) if extra is None else extra
        self.extra_columns_ = list(extra_names or [])
        what, names = f"ROSE-{self.fisher}", self.extra_columns_
        f = fit_statistics(raw, loss, extra, names, self.columns, self.score_arguments, self.trend_, what)
        self.mean_, self.std_, self.aggregation_ = f.mean, f.std, f.aggregation
        self.fit_warnings_, self.held_out_scores_ = f.warnings, f.held_out_scores  # calibrate() reads these
        return self

    def score_columns(self, raw: np.ndarray, loss: np.ndarray, extra: np.ndarray | None = None) -> np.ndarray:
        """Scores (N,) of images' columns as ``fit_columns`` takes them: ``score`` once it has them."""
        if self.aggregation_ is None:
            raise RoseError("ROSE detector is not fitted: call fit() or fit_columns() first")
        a, what = self.aggregation_, f"ROSE-{self.fisher}"
        return statistics_scores(raw, loss, extra, a, self.trend_, self.adjust, self.columns, what)

    def layer_scores(self, images: ImageData, desc: str = "ROSE scoring") -> Tensor:
        """Raw per-layer scores ``gᵀ F⁻¹ g``, shape (N, columns), float64 (``columns``: one per layer, or
        per layer and timestep with ``rows="each"``)."""
        return self._scores_and_loss(model_inputs(images, self.model, self.batch_size), desc)[0]

    def layer_scores_and_loss(self, images: Tensor | np.ndarray) -> tuple[Tensor, Tensor]:
        """Raw per-layer scores (N, layers) and the per-sample loss they are gradients of (N,), float64."""
        raw, rows = self._scores_and_loss(model_inputs(images, self.model, self.batch_size))
        return raw, rows.sum(1)

    def _scores_and_loss(self, x: Tensor, desc: str = "ROSE scoring") -> tuple[Tensor, Tensor]:
        """Raw layer scores (N, columns) and the loss of each image's rows (N, K; K = 1 with
        ``rows="sum"``), both float64 on the CPU (``LayerStream.scores``); shared Fishers
        (``FittedFishers.share``) remember them by the weights', the images' and the rows' names, unless
        the loss is drawn anew each time, and a ROSE that took them reads what they remember."""
        fishers = self.fishers_
        if fishers is None:
            raise RoseError("ROSE detector is not fitted: call fit() or load() first")
        key: MemoKey | None = None
        if fishers.shared and not self.stochastic:
            key = model_fingerprint(self.model), array_digest(x.detach().cpu().numpy()), self.rows
        found = fishers.remembered(key) if key is not None else None
        if found is None:
            found = self.stream.scores(
                x, fishers, batch_size=self.batch_size, desc=desc, progress=self.progress
            )
            if key is not None:
                fishers.remember(key, found)
        return found

    def normalized_layer_scores(self, images: Tensor | np.ndarray) -> Tensor:
        """Layer scores z-normalised with the in-distribution statistics, (N, layers)."""
        x = model_inputs(images, self.model, self.batch_size)
        raw = self._scores_and_loss(x)[0]  # refuses a detector with no Fishers
        assert self.mean_ is not None and self.std_ is not None  # fitted with them
        return (raw - self.mean_) / self.std_

    def _score(self, x: Tensor) -> Tensor:
        raw, rows = self._scores_and_loss(x)
        loss = rows.sum(1)
        extra = self.extra_features(x, loss, rows)[0] if self.extra_columns_ else None
        return torch.from_numpy(self.score_columns(raw.numpy(), loss.numpy(), extra))

    def extra_features(
        self, x: Tensor, loss: Tensor, rows: Tensor | None = None
    ) -> tuple[np.ndarray, list[str]]:
        """The columns ``features`` adds beside the layer scores of ``x`` (``roseood.detectors.features``);
        ``rows``: each image's rows' loss (N, K), which a diffusion model's statistics are read from."""
        if self.features == "layers":
            return np.empty((len(x), 0)), []
        step = self.stream.images_per_batch(self.batch_size)

        def batches(images: Tensor) -> list[Tensor]:
            return [images[i : i + step].to(self.device) for i in range(0, len(images), step)]

        self.model.eval()
        by_rows = rows if self.rows != "sum" else None  # with "sum", one row per image: its summed loss
        return extra_columns(self.model, x, loss, self.features, batches, by_rows)

    def state(self) -> dict[str, Any]:
        assert self.fishers_ is not None and self.aggregation_ is not None  # save() refuses an unfitted one
        return self.fishers_.state() | {
            "version": STATE_VERSION,
            "fisher_images": self.fishers_.images,  # their fit images' digest: another ROSE may take them
            "mean": self.mean_,
            "std": self.std_,
            "aggregation": self.aggregation_.state(),
            "trend": self.trend_.state(),
            "extra_columns": list(self.extra_columns_),
            "fit_warnings": self.fit_warnings_,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        if not same(state.get("version"), STATE_VERSION):
            raise CheckpointError(
                "this ROSE detector was saved by an older roseood in a format no longer read; refit it"
            )
        images = stored_digest(state, "fisher_images", "state.fisher_images")
        model = model_fingerprint(self.model)
        self.fishers_ = FittedFishers.from_state(state, self.fisher_arguments, model=model, images=images)
        n = (len(self.columns),)
        self.mean_ = tensor(state.get("mean"), "state.mean", shape=n, finite=False).double()
        self.std_ = tensor(state.get("std"), "state.std", shape=n, finite=False).double()
        extra = state.get("extra_columns", [])
        if not isinstance(extra, list) or not all(isinstance(c, str) for c in extra):
            raise CheckpointError(
                f"field 'state.extra_columns' must be a list of names, found {shown(extra)}"
            )
        if bool(extra) != (self.features != "layers"):
            raise CheckpointError(f"field 'state.extra_columns' does not fit features={self.features!r}")
        self.extra_columns_ = [str(c) for c in extra]
        columns = len(column_names(self.columns, self.adjust)) + len(self.extra_columns_)
        # files from before aggregations were options hold only the paper's z-normalisation
        self.aggregation_ = self.score_arguments.aggregation()
        self.aggregation_.load_state(
            state.get("aggregation", {"mean": self.mean_, "std": self.std_}), columns
        )
        if self.adjust != "none":
            self.trend_.load_state(state.get("trend", {}), len(self.columns))
        self.fit_warnings_ = [str(w) for w in state.get("fit_warnings", [])]


PassSeconds = list[tuple[float, float]]  # each pass's batches' seconds and its end's


def joinable(lead: SharesFishers, arguments: Hashable) -> bool:
    """Whether Fishers of ``arguments`` fitted beside ``lead``'s are their own fit: ``lead``'s settings but
    the kind, a deterministic loss, and the layer gradients in the same coordinates (they differ only on
    reparameterised layers, as Glow's LU-factorised 1×1 convolutions)."""
    if not isinstance(lead, ROSE) or not isinstance(arguments, FisherArguments):
        return False
    own = lead.fisher_arguments
    if replace(arguments, fisher=own.fisher) != own or own.stochastic:
        return False
    coords = FISHERS.get(arguments.fisher).coords == FISHERS.get(own.fisher).coords
    return coords or not lead.stream.grads.reparameterised


def fit_together(
    lead: SharesFishers, images: ImageData, beside: Sequence[Hashable] = ()
) -> tuple[list[FittedFishers], PassSeconds]:
    """``lead``'s Fishers on ``images`` and, in the same passes, those of each of ``beside`` (``lead``'s
    Fisher settings with another kind; refused in one line otherwise, or when the loss is stochastic: its
    passes draw anew, so a kind's fit would not be the one it makes alone); the fits in that order, and
    each pass's seconds. Under torchrun each process sums its shard; the sums are added together (float64)
    before each pass ends and rank 0's eigendecompositions are shared. With a deterministic loss a later
    pass reuses the first pass's gradients (up to ``grad_cache_bytes``) instead of running the model."""
    assert isinstance(lead, ROSE)
    others = [a for a in beside if isinstance(a, FisherArguments) and joinable(lead, a)]
    refused = [getattr(a, "fisher", str(a)) for a in beside if a not in others]
    if refused:
        raise RoseError(
            f"{', '.join(refused)} Fishers cannot be fitted beside ROSE-{lead.fisher}'s: only other kinds, "
            "on a deterministic loss (each pass of a stochastic one draws anew) and gradients in the same "
            "coordinates, are their own fits there"
        )
    x = model_inputs(images, lead.model, lead.batch_size)
    arguments, model, digest = lead.fisher_key(x)  # all the images, before this process's shard
    fits = list(dict.fromkeys([arguments, *others]))
    distributed.check_enough(x.shape[0], "Fisher images")
    x = x[distributed.shard(x.shape[0])]
    shapes = lead.stream.probe(x)[0]
    joint = JointFit([a.kinds(shapes) for a in fits], arguments.make)
    passes = joint.passes
    kinds = joint.kinds[0]
    plan = lead.stream.plan(
        x, kinds, batch_size=lead.batch_size, progress=lead.progress, also=joint.kinds[1:]
    )
    room = plan.budget - plan.peak if plan.budget is not None else lead.grad_cache_bytes
    store = GradientStore(min(lead.grad_cache_bytes, room) if passes > 1 and not lead.stochastic else 0)
    named = "+".join(dict.fromkeys(a.fisher for a in fits))
    seconds: PassSeconds = []
    for pass_index in range(passes):
        pending = {n: j for n, j in joint.layers.items() if pass_index < j.passes}
        desc = f"ROSE-{named} Fisher pass {pass_index + 1}/{passes}" if lead.progress else None
        start = time.perf_counter()
        with closing(iter_batches(x, plan.images, desc)) as batches:
            fisher_pass(pending, batches, pass_index, store, partial(lead.stream.run, rows=arguments.rows))
        first = {n: j.fishers[0] for n, j in pending.items()}
        if pass_index == 0 and lead.progress and (line := settled_line(named, first, len(x))):
            note(line)
        ended = time.perf_counter()
        factors = FactorCache()
        for j in pending.values():
            if distributed.active():
                j.reduce_sums(pass_index, distributed.all_reduce)
            j.end_pass(pass_index, factors)
            j.map_tensors(distributed.broadcast)
        seconds.append((ended - start, time.perf_counter() - ended))
    made = joint.fits()
    return [FittedFishers(a, m, model=model, images=digest) for a, m in zip(fits, made, strict=True)], seconds
