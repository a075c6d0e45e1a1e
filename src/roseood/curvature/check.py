"""A dry run over a model's parameterised layers: which can ROSE use, how, and why not."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from roseood.curvature.grads import LayerGradients
from roseood.curvature.handlers import own_parameters, resolve
from roseood.errors import RoseError


@dataclass(frozen=True)
class LayerReport:
    """One layer's verdict: its handler (or ``fallback (slow)``), parameter count, usable or why not."""

    name: str
    type: str
    handler: str
    params: int
    usable: bool
    note: str = ""


def _calls(
    model: nn.Module, names: list[str], loss_fn: Callable[[Tensor], Tensor], x: Tensor
) -> dict[str, int]:
    """How often each named module's forward runs in one forward pass of ``loss_fn``."""
    modules = dict(model.named_modules())
    counts = dict.fromkeys(names, 0)

    def hook(name: str) -> Callable[..., None]:
        def count(*_: object) -> None:
            counts[name] += 1

        return count

    handles = [modules[n].register_forward_hook(hook(n)) for n in names]
    try:
        with torch.no_grad():
            loss_fn(x)
    finally:
        for h in handles:
            h.remove()
    return counts


def _dry_run(
    model: nn.Module, names: list[str], loss_fn: Callable[[Tensor], Tensor], x: Tensor
) -> str | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            LayerGradients(model, names)(loss_fn, x)
    except RoseError as e:
        return str(e)
    return None


def check_layers(
    model: nn.Module, loss_fn: Callable[[Tensor], Tensor], x: Tensor, names: list[str] | None = None
) -> list[LayerReport]:
    """Report every parameterised module of ``model`` (or the ``names`` given): its handler, parameter
    count, and whether per-sample gradients of ``loss_fn`` on a couple of samples of ``x`` work."""
    modules = dict(model.named_modules())
    if names is None:
        names = [n for n, m in modules.items() if n and own_parameters(m)]
    unknown = [n for n in names if n not in modules]
    if unknown:
        raise RoseError(f"unknown layers {unknown}; the model has e.g. {list(modules)[1:6]}")
    x = x[:2]
    calls = _calls(model, names, loss_fn, x)
    verdicts = {}
    for n in names:
        r = resolve(modules[n])
        usable, note = r.usable, r.note
        if usable and calls[n] == 0:
            usable, note = False, "its forward is never called (a parent uses its weights)"
        elif usable and calls[n] > 1:
            note = f"called {calls[n]} times per pass: exact gradient summed over calls (KFAC: expand)"
        verdicts[n] = (r, usable, note)
    usable_names = [n for n, v in verdicts.items() if v[1]]
    if usable_names and _dry_run(model, usable_names, loss_fn, x) is not None:  # find the culprits
        for n in usable_names:
            error = _dry_run(model, [n], loss_fn, x)
            if error is not None:
                verdicts[n] = (verdicts[n][0], False, error)
    reports = []
    for n, (r, usable, note) in verdicts.items():
        m = modules[n]
        count = sum(p.numel() for p in (m.parameters() if r.handler is None else own_parameters(m).values()))
        reports.append(LayerReport(n, type(m).__name__, r.label, count, usable, note))
    return reports


def format_layer_report(reports: list[LayerReport], sets: Mapping[str, list[str]] | None = None) -> str:
    """The reports as a plain-text table, one layer per line; with ``sets`` (a model's named layer sets),
    a column naming the sets each layer is in."""
    header = ("layer", "type", "handler", "params", "usable", *(("sets",) if sets else ()), "note")
    member = {r.name: ",".join(k for k, names in (sets or {}).items() if r.name in names) for r in reports}
    rows = [
        (r.name, r.type, r.handler, str(r.params), "yes" if r.usable else "no")
        + ((member[r.name] or "-",) if sets else ())
        + (r.note,)
        for r in reports
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join(
        ("  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]).rstrip()
        for row in [header, *rows]
    )
