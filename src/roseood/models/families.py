"""One registry of model families: what checkpoints, ``rose train`` and the bench recipes know of a kind.

A family names a ``GenerativeModel`` class (its ``kind``), its training defaults (``TrainConfig`` fields)
and its ``rose train`` options. Adding a family is one call::

    register_family(ModelFamily("pixelcnn", PixelCNN, {"lr": 3e-4}, add_arguments, arguments_to_config))
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from roseood.catalogue import CLASSES_OF_DATA, FIT_COUNTS, PAPER_METHOD, TRAIN_OPTIONS
from roseood.contracts import Described, Varied
from roseood.data.loading import ImageSet, ImageStream
from roseood.data.preprocess import Preprocessing
from roseood.errors import RoseError
from roseood.models.base import GenerativeModel
from roseood.models.classifier import Classifier
from roseood.models.diffusion import DiffusionModel
from roseood.models.glow import Glow
from roseood.models.pixelcnn import PixelCNN
from roseood.models.vae import VAE
from roseood.registry import Registry


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A family without ``rose train`` options of its own."""


def _no_config(args: argparse.Namespace) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class ModelFamily:
    """A model kind: its class, ``TrainConfig`` overrides, and its ``rose train`` options.

    ``add_cli_arguments(parser)`` adds the architecture options; ``from_cli_arguments(args)`` turns
    them into constructor keywords (``in_channels`` and ``image_size`` are added from the data).
    ``trainable``: whether ``rose train`` / ``roseood.models.train.train`` fit it on images alone
    (classifiers need labels). ``method``: the detection method ``rose fit`` and ``rose evaluate`` take
    for this family when none is named (``python -m research near-ood``'s rule decides it), ``fit_counts``
    the (fit, statistics) images they take when none are given, and ``faster`` a cheaper setting of the
    method that ``rose fit`` names when it takes the method unasked (empty: none), for the varieties in
    ``faster_for`` (empty: every model of the family); ``varieties`` the
    method of each variety a rule judged apart (a model's ``variety`` attribute), where not ``method``.
    """

    name: str
    cls: type[GenerativeModel]
    train_defaults: dict[str, Any] = field(default_factory=dict)
    add_cli_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    from_cli_arguments: Callable[[argparse.Namespace], dict[str, Any]] = _no_config
    trainable: bool = True
    help: str = ""
    method: str = PAPER_METHOD
    fit_counts: tuple[int, int] = FIT_COUNTS
    faster: str = ""
    faster_for: tuple[str, ...] = ()
    varieties: dict[str, str] = field(default_factory=dict)

    def build(self, in_channels: int, image_size: int = 32, **config: Any) -> GenerativeModel:
        """A fresh model of this family for ``in_channels``-channel ``image_size``² images (an
        architecture that scales with the size, e.g. the VAE's stages and Glow's levels)."""
        if "image_size" in inspect.signature(self.cls).parameters:
            config["image_size"] = image_size
        elif image_size != 32:
            raise RoseError(f"{self.name} models take no image_size: they are 32×32 (use --size 32)")
        return self.cls(in_channels=in_channels, **config)

    def build_for(self, images: ImageSet | ImageStream, **config: Any) -> GenerativeModel:
        """A fresh model for loaded images: their channels and size (and, where ``classes`` asks for the
        data's, their class count), and their preprocessing recorded (``model.preprocessing``, saved in its
        checkpoints and applied again when scoring)."""
        prep = images.preprocessing or Preprocessing()
        if config.get("classes") == CLASSES_OF_DATA:
            config["classes"] = class_count(images)
        model = self.build(prep.channels, prep.size, **config)
        cast(Any, model).preprocessing = prep  # an attribute of the instance, saved by save_model
        return model


def class_count(images: ImageSet | ImageStream) -> int:
    """How many classes labelled images have (a folder's class subfolders, else the largest label + 1);
    a one-line error where an image has none."""
    if len(images.labels) == 0 or int(images.labels.min()) < 0:
        raise RoseError(
            f"{images.name} has images without a class label (an .npz without 'labels', a folder without "
            "class subfolders): a class-conditional model trains on labelled images"
        )
    return len(images.classes) if images.classes else int(images.labels.max()) + 1


FAMILIES: Registry[str, ModelFamily] = Registry("model kind")


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` (keyed by its name, which must be its class's ``kind``); returns it."""
    if getattr(family.cls, "kind", None) != family.name:
        raise RoseError(
            f"family {family.name!r}: its class {family.cls.__name__} has kind {family.cls.kind!r}"
        )
    return FAMILIES.register(family.name, family, replace=True)


def get_family(name: str) -> ModelFamily:
    """The registered family ``name``, or a ``RoseError`` listing the known ones."""
    return FAMILIES.get(name)


def _family_of(model: object) -> ModelFamily | None:
    """The registered family of ``model``'s kind, or None (a wrapped or user model, an unknown kind)."""
    return FAMILIES.find(model.kind) if isinstance(model, Described) else None


def default_method(model: object) -> str:
    """The detection method for ``model`` when none is named: its variety's within its family (a DDPM's
    among the diffusion models), else its family's, else the paper's ROSE-EKFAC."""
    family = _family_of(model)
    if family is None:
        return ModelFamily.method
    return family.varieties.get(model.variety, family.method) if isinstance(model, Varied) else family.method


def default_faster(model: object) -> str:
    """A cheaper setting of ``default_method(model)`` to name beside it (its family's ``faster``, where
    measured on its variety), or ""."""
    family = _family_of(model)
    if family is None:
        return ""
    variety = model.variety if isinstance(model, Varied) else ""
    return family.faster if not family.faster_for or variety in family.faster_for else ""


def default_counts(model: object) -> tuple[int, int]:
    """The (fit, statistics) images ``rose fit`` and ``rose evaluate`` take for ``model`` when none are
    given: its family's, else the paper's."""
    family = _family_of(model)
    return family.fit_counts if family is not None else FIT_COUNTS


def _built_in(name: str, cls: type[GenerativeModel], train_defaults: dict[str, Any]) -> None:
    """Register a built-in family with its ``rose train`` options and its detection method from the
    torch-free catalogue."""
    opts = TRAIN_OPTIONS[name]
    register_family(
        ModelFamily(
            name,
            cls,
            train_defaults,
            opts.add_arguments,
            opts.to_config,
            help=opts.help,
            method=opts.method,
            fit_counts=opts.fit_counts,
            faster=opts.faster,
            faster_for=opts.faster_for,
            varieties=opts.varieties,
        )
    )


_built_in("vae", VAE, {})
_built_in("glow", Glow, {"optimizer": "adamax", "lr": 5e-4, "lr_halve_every": 0, "epochs": 50})
_built_in("pixelcnn", PixelCNN, {"epochs": 20, "lr_halve_every": 10})
_built_in(
    "diffusion",
    DiffusionModel,
    {"lr": 1e-3, "lr_halve_every": 0, "epochs": 3, "batch_size": 64, "warmup_steps": 100, "grad_clip": 1.0},
)
# loaded by name like the others (it was registered by roseood.bench, so a classifier checkpoint loaded
# only once the bench had been imported); trained with labels by roseood.bench.classifier
register_family(ModelFamily("classifier", Classifier, trainable=False, help="Figure 6 classifiers"))
