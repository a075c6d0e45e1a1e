"""Which layers of a model ROSE can use: a dry run on a couple of probe inputs of its declared shape."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import torch
from torch import Tensor, nn

from roseood.contracts import InertLayers
from roseood.curvature import LayerReport, check_layers
from roseood.errors import RoseError
from roseood.models.base import RoseModel


def probe_inputs(model: RoseModel, batch: int = 2) -> Tensor:
    """``batch`` plain inputs of the model's declared shape and kind (mid-grey images, zero tokens)."""
    shape = model.input_shape
    if shape is None:
        raise RoseError("checking a model needs its input_shape (wrap(..., input_shape=...))")
    if model.input_kind == "tokens":
        x = torch.zeros(batch, *shape, dtype=torch.long)
    else:
        x = torch.full((batch, *shape), 0.5)
    return x.to(next(cast(nn.Module, model).parameters()).device)


def check_model(model: RoseModel) -> list[LayerReport]:
    """Every parameterised layer of ``model``: its handler, size, and whether ROSE can use it (and why not);
    ``roseood.curvature.format_layer_report`` prints the list."""
    model.eval()
    reports = check_layers(cast(nn.Module, model), model.rose_loss, probe_inputs(model))
    inert = model.inert_layers() if isinstance(model, InertLayers) else {}
    return [replace(r, usable=False, note=inert[r.name]) if r.name in inert else r for r in reports]
