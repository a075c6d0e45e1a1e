"""What a detector checks of what it is given: the inputs it fits and scores, against its model, and what
its constructor needs of that model (one at all, image inputs, per-image counts the machine can hold)."""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from roseood.contracts import ModelInputs
from roseood.data.tensors import ImageData, check_model_input, collect
from roseood.errors import RoseError
from roseood.memory import check_memory
from roseood.models.base import RoseModel
from roseood.validation import check_int


def model_inputs(images: ImageData, model: RoseModel | None, batch_size: int) -> Tensor:
    """Validate inputs against the model's declared input kind and shape (images when no model): the
    one point where every input of a detector comes in (a DataLoader or Dataset is read into one tensor
    here, ``batch_size`` at a time)."""
    data = collect(images, batch_size) if isinstance(images, DataLoader | Dataset) else images
    return check_model_input(data, model)


def require_model(model: RoseModel | None, what: str) -> RoseModel:
    """``model``; a ``RoseError`` saying ``what`` needs a generative model when there is none."""
    if model is None:
        raise RoseError(f"{what} needs a generative model")
    return model


def require_images(model: RoseModel | None, method: str) -> None:
    """Refuse a model whose inputs are not images (for methods built on image perturbations/codecs)."""
    kind = model.input_kind if isinstance(model, ModelInputs) else "image"
    if kind != "image":
        raise RoseError(f"the {method} method works on images only; this model takes {kind} inputs")


def per_image_count(value: Any, name: str, method: str, model: RoseModel | None, *, low: int = 1) -> int:
    """A per-image count of a ``method`` detector (IWAE samples, optimisation steps): an integer ≥ ``low``,
    and its upper bound what the machine can hold: ``value`` float32 copies of one model input (at least
    what one image costs) must fit in memory. Python, the command line and a detector file share it."""
    count = check_int(value, name, low=low)
    shape = model.input_shape if model is not None else None
    check_memory(
        count * math.prod(shape or (1,)) * 4,
        f"{method}: {name} = {count} (that many copies of each {shape} input)",
        hint=f"lower {name}",
    )
    return count
