"""Where a benchmark run keeps what it makes: trained models, fitted detectors and scores, all reused.

Models are named by everything that defines them except the epoch count (a longer run resumes a
shorter one), trained with per-epoch atomic checkpoints, and shared by every experiment of a results
folder. Detectors and scores go to a content-addressed ``ResultCache``. Re-running an interrupted
experiment therefore redoes only what had not finished.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from roseood import distributed
from roseood.bench.classifier import Classifier, train_classifier
from roseood.bench.profiles import BACKGROUND, PAPER_GLOW_WEIGHT_DECAY, PAPER_VAE, Profile
from roseood.data import load_images
from roseood.data.jpeg import JpegHistory
from roseood.errors import RoseError
from roseood.evaluation.cache import ResultCache
from roseood.evaluation.evaluate import evaluate, sweep
from roseood.evaluation.histories import history_of_set, with_twins
from roseood.evaluation.result import EvaluationResult
from roseood.evaluation.splits import EvalSpec
from roseood.models import get_family, load_checkpoint
from roseood.models.base import GenerativeModel, RoseModel, model_name
from roseood.models.train import TrainConfig, train
from roseood.validation import check_choice, check_device

BENCH_MODELS = ("vae", "glow", "pixelcnn", "ddpm")  # families experiments know (ddpm: the shipped zoo)
CHANNELS = {"fashion_mnist": 1, "cifar10": 3}
DEFAULT_MODELS = ("vae", "glow")  # `rose bench` without --models
DEFAULT_DATASETS = ("fashion_mnist", "cifar10")  # ... and without --datasets


@dataclass(frozen=True)
class ModelRecipe:
    """A model to train: kind, data, architecture and training settings (epochs may grow on resume)."""

    kind: str  # vae | glow | pixelcnn | classifier | diffusion
    data: str  # fashion_mnist | cifar10
    arch: tuple[tuple[str, Any], ...]
    subset: int | None
    epochs: int
    perturb: str | None = None
    weight_decay: float = 0.0
    warmup: int = 0  # learning-rate warm-up steps
    grad_clip: float = 0.0  # max gradient norm (0: none)
    seed: int = 0

    @property
    def channels(self) -> int:
        return CHANNELS[self.data]

    @property
    def name(self) -> str:
        """File stem, e.g. ``vae-cifar10-c3-ngf64-nz200-n20000-s0`` (epochs excluded: they can grow); a
        true flag shows as its name (``gated``), a false one not at all."""
        arch = (
            k if v is True else f"{k}{'-'.join(map(str, v)) if isinstance(v, tuple) else v}"
            for k, v in self.arch
            if v is not False
        )
        parts = [self.kind, self.data, f"c{self.channels}", *arch]
        parts.append(f"n{self.subset}" if self.subset else "nall")
        if self.perturb:
            parts.append(self.perturb.replace(":", ""))
        if self.weight_decay:
            parts.append(f"wd{self.weight_decay:g}")
        if self.warmup or self.grad_clip:
            parts.append(f"warm{self.warmup}-clip{self.grad_clip:g}")
        return "-".join([*parts, f"s{self.seed}"])

    def build(self) -> GenerativeModel:
        """A fresh model of the recipe's registered family."""
        return get_family(self.kind).build(self.channels, **dict(self.arch))


@dataclass
class Workspace:
    """A results folder's shared cache plus the run's profile, data folder, device and progress setting."""

    root: Path
    profile: Profile
    data_dir: str | Path | None = None
    device: str = "cpu"
    progress: bool = True
    models: tuple[str, ...] = DEFAULT_MODELS  # which generative models experiments loop over
    datasets: tuple[str, ...] = DEFAULT_DATASETS  # which in-distribution sets
    trained: dict[str, dict[str, Any]] = field(default_factory=dict)  # recipe name -> training summary
    experiment: str = ""  # the experiment running now; selects the profile's experiment_overrides
    # recipe name -> a model file used in its place (e.g. the authors' released VAE), never trained here
    given: dict[str, Path] = field(default_factory=dict)
    _histories: dict[str, JpegHistory | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        """Refuse unknown model or dataset names before anything is trained or written."""
        for name in self.models:
            check_choice(name, BENCH_MODELS, "bench model")
        for name in self.datasets:
            check_choice(name, tuple(CHANNELS), "bench dataset")
        self.device = distributed.device(check_device(self.device))  # auto: the best device here

    def select_models(self, available: tuple[str, ...]) -> list[str]:
        return [m for m in available if m in self.models]

    def select_data(self) -> list[str]:
        return [d for d in CHANNELS if d in self.datasets]

    def report_folder(self, experiment: str) -> str:
        """The experiment's folder name: its name, then the datasets and models when they are not the
        defaults (``ablation-cifar10``, ``table2-fashion_mnist-pixelcnn``), so a run on a selection never
        replaces the report of a full run."""
        parts = [experiment]
        if set(self.datasets) != set(DEFAULT_DATASETS):
            parts.append("+".join(self.select_data()))
        if set(self.models) != set(DEFAULT_MODELS):
            parts.append("+".join(self.select_models(BENCH_MODELS)))
        return "-".join(parts)

    @property
    def cache(self) -> ResultCache:
        return ResultCache(self.root / "cache")

    # -- models ------------------------------------------------------------------------------------
    def vae(self, data: str, capacity: float = 1.0) -> ModelRecipe:
        """The paper's VAE for ``data`` at ``capacity`` × its width (Table 3), sized by the profile."""
        base = PAPER_VAE[data]
        width = max(2, round(base["ngf"] * capacity * self.profile.vae_width))
        nz = max(4, round(base["nz"] * self.profile.vae_width))
        subset, epochs = self.profile.vae_train[data]
        return ModelRecipe("vae", data, (("ngf", width), ("nz", nz)), subset, epochs)

    def glow(self, data: str) -> ModelRecipe:
        """Glow for ``data``: learning-rate warm-up and gradient clipping keep early training stable."""
        subset, epochs = self.profile.glow_train[data]
        arch = tuple(self.profile.glow[data].items())
        decay = PAPER_GLOW_WEIGHT_DECAY[data]
        return ModelRecipe("glow", data, arch, subset, epochs, weight_decay=decay, warmup=200, grad_clip=50.0)

    def pixelcnn(self, data: str) -> ModelRecipe:
        """A PixelCNN for ``data`` (not in the paper), sized by the profile."""
        subset, epochs = self.profile.pixelcnn_train[data]
        return ModelRecipe("pixelcnn", data, tuple(self.profile.pixelcnn.items()), subset, epochs)

    def recipe(self, kind: str, data: str) -> ModelRecipe:
        """The main generative model of ``kind`` (vae, glow or pixelcnn) for ``data``."""
        recipes = {"vae": self.vae, "glow": self.glow, "pixelcnn": self.pixelcnn}
        if kind not in recipes:
            raise RoseError(f"unknown generative model {kind!r}; choose from {', '.join(recipes)}")
        return recipes[kind](data)

    def background(self, main: ModelRecipe, perturb: str | None = None) -> ModelRecipe:
        """Likelihood-Ratio background of ``main``: same architecture, trained on perturbed images
        (``perturb`` or the paper's choice for that model and data, Appendix B.3)."""
        default, decay = BACKGROUND[(main.kind, main.data)]
        subset, epochs = self.profile.background_train[main.data]
        return ModelRecipe(
            main.kind,
            main.data,
            main.arch,
            subset,
            epochs,
            perturb or default,
            decay,
            main.warmup,
            main.grad_clip,
        )

    def classifier(self, arch: str) -> ModelRecipe:
        subset, epochs = self.profile.classifier_train
        return ModelRecipe(
            "classifier",
            "fashion_mnist",
            (("arch", arch), ("width", self.profile.classifier_width)),
            subset,
            epochs,
        )

    def model(self, recipe: ModelRecipe) -> RoseModel:
        """The trained model of ``recipe``: loaded when its checkpoint has every epoch, else trained
        (resuming from the last finished epoch)."""
        if recipe.name in self.given:
            return self._given(recipe)
        path = self.root / "cache" / "models" / f"{recipe.name}.pt"
        if path.exists():
            model, obj = load_checkpoint(path)
            done = obj.get("train_state", {}).get("epoch", 0)
            if done >= recipe.epochs:
                self.trained[recipe.name] = {"epochs": done, "images": recipe.subset or "all", "reused": True}
                return model.to(self.device).eval()
        data = load_images(
            f"{recipe.data}:train",
            n=recipe.subset,
            seed=recipe.seed,
            channels=recipe.channels,
            data_dir=self.data_dir,
        )
        torch.manual_seed(recipe.seed)  # the initial weights (and VAE sampling) depend on the recipe only
        model = recipe.build()
        t0 = time.time()
        if recipe.kind == "classifier":
            train_classifier(
                cast(Classifier, model),
                data.images,
                data.labels,
                epochs=recipe.epochs,
                batch_size=self.profile.batch_size,
                checkpoint=path,
                resume=True,
                progress=self.progress,
                device=self.device,
                seed=recipe.seed,
            )
        else:
            cfg = TrainConfig.for_model(
                recipe.kind,
                epochs=recipe.epochs,
                batch_size=self.profile.batch_size,
                perturb=recipe.perturb,
                weight_decay=recipe.weight_decay or None,
                warmup_steps=recipe.warmup or None,
                grad_clip=recipe.grad_clip or None,
                seed=recipe.seed,
            )
            train(model, data.images, cfg, path, resume=True, progress=self.progress, device=self.device)
        self.trained[recipe.name] = {
            "epochs": recipe.epochs,
            "images": len(data),
            "train_seconds": round(time.time() - t0, 1),
        }
        model, _ = load_checkpoint(path)
        return model.to(self.device).eval()

    def _given(self, recipe: ModelRecipe) -> RoseModel:
        """The model file given for ``recipe`` (``--model-file``), refused in one line unless it is a
        model of the recipe's family, channels and architecture."""
        path = self.given[recipe.name]
        model, obj = load_checkpoint(path)
        config = obj.get("config", {})
        wanted = {"in_channels": recipe.channels, **dict(recipe.arch)}
        differ = {k: (config.get(k), v) for k, v in wanted.items() if config.get(k) != v}
        if obj.get("kind") != recipe.kind or differ:
            raise RoseError(
                f"{path}: a {obj.get('kind')} model with {config}, not the {recipe.kind} of {recipe.name} "
                f"(file vs recipe: {differ})"
            )
        self.trained[recipe.name] = {"file": str(path)}  # trained elsewhere: no epochs or images here
        return model.to(self.device).eval()

    # -- evaluation --------------------------------------------------------------------------------
    def jpeg_history(self, data: str) -> JpegHistory | None:
        """The JPEG history found in ``data``'s test images at the bench's 32×32 (our CIFAR-10: quality
        75, 4:2:0; a lossless copy: None), found once per run."""
        if data not in self._histories:
            images = load_images(data, n=64, channels=CHANNELS[data], size=32, data_dir=self.data_dir)
            self._histories[data] = history_of_set(images)
        return self._histories[data]

    def ood_sets(self, data: str, sets: Sequence[str]) -> list[str]:
        """``sets`` with, after each natural-image set, its twin put through ``data``'s JPEG history
        (``celeba``, ``celeba+jpeg75``) where ``data`` has one: its verdicts are judged on the twin, the
        set as stored is kept beside it."""
        return with_twins(sets, self.jpeg_history(data))

    def spec(self, model: RoseModel, in_data: str, ood: list[str], methods: list[str], **kw: Any) -> EvalSpec:
        """An ``EvalSpec`` sized by the profile (Glow gets the paper's smaller test sets)."""
        p = self.profile
        test = p.glow_test_samples if model_name(model) == "glow" else p.test_samples
        options: dict[str, Any] = {
            "fit_samples": p.fit_samples,
            "stats_samples": p.stats_samples,
            "test_samples": test,
            "data_dir": self.data_dir,
            "batch_size": p.batch_size,
            "test_limits": dict(p.test_limits),
            "overall_per_set": p.overall_per_set,
            "bootstrap": 0 if kw.get("layerwise") else p.bootstrap,  # layer-wise scores have no intervals
        }
        overrides = {
            k: v
            for k, v in self.profile.experiment_overrides.get(self.experiment, {}).items()
            if k != "detector_kwargs"
        }
        ood = self.ood_sets(in_data, ood) if in_data in CHANNELS else ood
        return EvalSpec(in_data=in_data, ood=ood, methods=methods, **(options | overrides | kw))

    def detector_kwargs(self, method: str) -> dict[str, Any]:
        """The profile's keyword overrides for ``method`` (by family: "lr", "lratio", "ic", "rnd", …)."""
        family = method.split("-")[0]
        special = self.profile.experiment_overrides.get(self.experiment, {}).get("detector_kwargs", {})
        return self.profile.detector_kwargs.get(family, {}) | special.get(family, {})

    def evaluate(self, model: RoseModel, spec: EvalSpec) -> EvaluationResult:
        """``roseood.evaluation.evaluate`` with this workspace's result cache and progress setting."""
        torch.manual_seed(spec.seed)
        return evaluate(model, spec, progress=self.progress, cache=self.cache)

    def sweep(
        self, model: RoseModel, spec: EvalSpec, field: str, values: Sequence[Any], repeats: int = 1
    ) -> dict[Any, list[EvaluationResult]]:
        """``roseood.evaluation.sweep`` with this workspace's result cache and progress setting."""
        torch.manual_seed(spec.seed)
        return sweep(model, spec, field, values, repeats, progress=self.progress, cache=self.cache)
