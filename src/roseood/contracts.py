"""The optional contracts of models and detectors: what one may offer beyond the ``RoseModel`` protocol and
the ``Detector`` base, as typed protocols that consumers test with ``isinstance`` instead of looking
attributes up by name. Each is met by class-level members (methods, properties, class attributes), so the
check holds on every Python version (from 3.12 ``isinstance`` on a protocol reads attributes statically).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol, runtime_checkable

from torch import Tensor


@runtime_checkable
class ModelInputs(Protocol):
    """What a model takes: ``input_kind`` ("image", "tensor" or "tokens") and one input's shape (None:
    any); every ``RoseModel`` has them."""

    @property
    def input_kind(self) -> str: ...

    @property
    def input_shape(self) -> tuple[int, ...] | None: ...


@runtime_checkable
class Described(Protocol):
    """A model that names its family (``vae``, ``diffusion``, ``wrapped``) in settings and messages."""

    kind: str


@runtime_checkable
class Varied(Protocol):
    """A model of a variety within its family that a rule judged apart (a diffusion model's ``ddpm``,
    ``fm``, ...), whose default detection method may be its own (``ModelFamily.varieties``)."""

    variety: str


@runtime_checkable
class Named(Protocol):
    """A model with a name of its own (a wrapped module: its class name or the one given to ``wrap``)."""

    name: str


@runtime_checkable
class Configured(Protocol):
    """A model whose architecture is rebuilt from keyword arguments (stored in its checkpoint)."""

    def config(self) -> dict[str, Any]: ...


@runtime_checkable
class Preprocessed(Protocol):
    """A model that records the image preprocessing it was trained with (a ``Preprocessing`` or None)."""

    preprocessing: Any


@runtime_checkable
class SettableLoss(Protocol):
    """A model whose per-image loss has settings of its own beside its weights (a DDPM's K (timestep,
    noise) pairs): ``loss_settings()`` gives them as JSON-able values, ``set_loss_settings(**options)``
    changes them (and with them the model's fingerprint). A detector file records them, and loading it
    sets them again on the model before the fingerprint is compared."""

    def loss_settings(self) -> dict[str, Any]: ...

    def set_loss_settings(self, **options: Any) -> None: ...


@runtime_checkable
class Describes(Protocol):
    """A model that can say in one line what it is beyond its layers (a diffusers folder: the denoiser,
    the objective, the scheduler, the space it models and its conditioning), shown by ``rose check-model``
    before the layer table."""

    def describe(self) -> str: ...


@runtime_checkable
class InertLayers(Protocol):
    """A model some of whose parameterised layers cannot move its loss (their gradient is zero by
    construction, so their layer scores would be rounding noise): each with why, left out of its layer
    sets and marked unusable by ``rose check-model``."""

    def inert_layers(self) -> dict[str, str]: ...


@runtime_checkable
class FromFactory(Protocol):
    """A model built by the user's code, naming the ``--model-module`` that rebuilds it (or None)."""

    factory: str | None


@runtime_checkable
class RowsModel(Protocol):
    """A model whose per-input loss sums several rows of one batch (a DDPM: each image's K noisy copies):
    ROSE sizes its batches in rows, can score each row on its own (``rows="each"``) and labels the
    columns that gives by ``row_labels``."""

    @property
    def rows_per_input(self) -> int: ...

    def row_loss(self, rows: Tensor) -> Tensor:
        """The loss of each row (N·rows_per_input,), each input ``rows_per_input`` times in a row."""
        ...

    def row_labels(self) -> list[int]:
        """One label per row of an input (a DDPM: its timesteps), in row order."""
        ...

    def row_statistics(self, losses: Tensor) -> dict[str, Tensor]:
        """The model's ``ImageStatistics`` of inputs whose rows' losses are ``losses`` (N, rows_per_input),
        without running the model again (a DDPM's statistics are its rows' losses)."""
        ...


def rows_per_input(model: object) -> int:
    """Rows per input of a model's loss: its own count (``RowsModel``), else 1."""
    return int(model.rows_per_input) if isinstance(model, RowsModel) else 1


@runtime_checkable
class OrderedLayers(Protocol):
    """A model whose layers' registration is not the order its forward pass runs them (a diffusers UNet
    registers its mid block after its up blocks): ``last:N`` layer sets follow ``forward_order``."""

    def forward_order(self, names: list[str]) -> list[str]:
        """``names`` in the order the forward pass runs those layers."""
        ...


@runtime_checkable
class ImageStatistics(Protocol):
    """A model that sums up how it fits each input in a few named positive statistics (a VAE: its ELBO's
    reconstruction and KL terms; a DDPM: its weighted ε-MSE at each of its K timesteps), for detectors
    that judge them together with ROSE's layer scores (``ROSE(features="layers,stats")``)."""

    def image_statistics(self, x: Tensor) -> dict[str, Tensor]:
        """Per-input statistics, each (N,) and ≥ 0, in a fixed order of names; no gradients needed."""
        ...


@runtime_checkable
class Trainable(Protocol):
    """A model ``roseood.models.train`` can train: a per-sample stochastic loss and what it measures
    ("nll": nats, also reported in bits per dimension; else its name, e.g. a DDPM's "eps_mse")."""

    train_objective: str

    def train_loss(self, x: Tensor) -> Tensor: ...


@runtime_checkable
class HeldOutMetrics(Protocol):
    """A model that says how well it fits held-out inputs in its own terms (a DDPM: held-out ε-MSE and
    variational bound), where the mean training loss is not the figure a person reads."""

    def held_out_metrics(self, x: Tensor) -> dict[str, float]:
        """Named figures of merit of the inputs ``x`` (lower is better), under the evaluated weights."""
        ...


@runtime_checkable
class Generates(Protocol):
    """A model that draws new images from what it learned (``rose sample``): a look at whether a detector
    judged on it judges a model worth the name."""

    def generate(self, n: int, seed: int = 0, progress: bool | None = None, **options: int) -> Tensor:
        """``n`` images as uint8 (n, C, H, W), reproducible by ``seed``, with progress lines and their ETA
        (``roseood.progress``); ``options`` are the family's own (a DDPM: ``steps``); one it does not know
        is a ``RoseError``."""
        ...


@runtime_checkable
class CountsEvaluations(Protocol):
    """A detector that states its cost as the network evaluations it makes per scored image (the
    diffusion detectors: UNet forward passes), for forecasts and reports."""

    @property
    def nfe_per_image(self) -> int: ...


@runtime_checkable
class TimesItsStages(Protocol):
    """A detector that times its own fit's stages on a batch of images before the fit (ROSE: its Fisher's
    passes and layer scores), so that a forecast counts what it will do rather than loss passes."""

    def stage_seconds(self, images: Any, beside: Sequence[Hashable] = ()) -> Any:
        """Seconds of each stage, timed on one of its batches of ``images`` by an unfitted copy
        (``roseood.detectors.rose.cost.StageSeconds``: ``fit(fisher_images, held_out)``, ``scoring``,
        ``basis()``), its Fishers fitted with those of ``beside`` (Fisher settings fitted in the same
        passes); the detector itself is left as it was."""
        ...


@runtime_checkable
class SharesFishers(Protocol):
    """A detector whose fitted Fishers another one with equal ``fisher_arguments``, on the same weights
    and images, can take instead of fitting its own (ROSE's variants in one ``rose evaluate``)."""

    @property
    def fisher_arguments(self) -> Hashable:
        """What decides the fitted Fishers besides the weights and the fit images."""
        ...

    @property
    def score_key(self) -> Hashable | None:
        """What decides its raw scores besides the images and the weights: detectors with equal ones that
        share Fishers read each other's scores of the same images (None: drawn anew each time)."""
        ...

    progress: bool

    @property
    def name(self) -> str: ...

    def fisher_key(self, images: Any) -> tuple[Hashable, str, str]:
        """What identifies the Fishers ``fit_fisher(images)`` fits: the settings, the weights' fingerprint,
        the images' digest."""
        ...

    def fit_fisher(self, images: Any, fishers: Any = None) -> Any:
        """Fit the Fishers alone on ``images`` (or take ``fishers``, fitted with the same key) and return
        them."""
        ...

    def fit(self, images: Any, held_out: Any = None, *, fishers: Any = None) -> Any:
        """Fit, taking ``fishers`` (what ``fit_fisher`` returned) when given."""
        ...


@runtime_checkable
class MaskedWeight(Protocol):
    """A layer whose forward uses ``weight * weight_mask()``: only the mask's nonzero entries are its
    parameters, which ROSE's Fishers keep to (a PixelCNN's causal convolutions). Third-party modules
    without it are read by ``roseood.curvature.declare_mask`` or a ``mask`` buffer of the weight's shape."""

    def weight_mask(self) -> Tensor:
        """The 0/1 mask, of the weight's shape."""
        ...


@runtime_checkable
class InvertibleMap(Protocol):
    """A layer whose forward is ``conv2d(x, weight_matrix())`` at every pixel and whose flow adds
    ``H·W·log|det W|`` (Glow's invertible 1×1 convolution): its weight is a function of its parameters,
    which ROSE's ``INVERTIBLE_1X1`` handler differentiates through."""

    def weight_matrix(self) -> Tensor:
        """The (C, C) matrix the layer applies at every pixel."""
        ...
