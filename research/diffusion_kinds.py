"""The diffusion models people train now, judged on the reference zoo: flow matching (``fm``), a
class-conditional UNet judged by the marginal over its classes (``cddpm``), a DiT judged at its null
label (``dit``) and a latent model, a VQ-VAE and a UNet on its latents (``ldm``), each beside the UNet
DDPM of the same data and training seed (``ddpm``), on the same images.

Every method of the ``diffusion`` experiment that applies to a kind, and the DDPM family's default
(``rose-bands-stats``, on ``rose-ekfac``'s Fishers), runs at its defaults (one draw of the K pairs); a
method a kind refuses (DiffPath, MSMA and DDPM-OOD follow DDPM's forward process along one class label)
is listed with the model's own one-line reason. A cell is the mean AUROC over the kind's zoo models ±
the 95 % Student-t half-width (one model: its value). Fit and test images: the data
seed + the training seed, as in ``diffusion-zoo``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from research.diffusion import DATA_SEED, METHODS, OOD, cell, evaluate_methods, nfe
from roseood.bench.experiments import common
from roseood.bench.report import BenchReport
from roseood.bench.workspace import Workspace
from roseood.catalogue import TRAIN_OPTIONS
from roseood.detectors import make_detector
from roseood.errors import RoseError
from roseood.evaluation.report import markdown_rows
from roseood.models import zoo
from roseood.models.checkpoint import load_model
from roseood.models.diffusion import DiffusionModel, as_diffusion_model
from roseood.models.state import first_line

KINDS = {  # the reference first in the tables
    "ddpm": "UNet DDPM (ε prediction), the reference",
    "fm": "UNet trained by flow matching (rectified flow)",
    "dit": "class-conditional DiT, judged at its null label",
    "ldm": "latent model: VQ-VAE, then a UNet on its latents",
    "cddpm": "class-conditional UNet, judged by the marginal over its 10 classes",
}
# the order they run, cheapest first, so that a run stopped part-way has the most kinds: flow matching
# takes three methods, the latent UNet runs on latents a quarter the size, the marginal costs ten times
ORDER = ("fm", "ldm", "dit", "ddpm", "cddpm")
# the diffusion experiment's, the family's default and the varieties' (compact EKFAC's, once), so
# that every kind is judged against the defaults a rule set for another
KIND_METHODS = list(
    dict.fromkeys(
        [*METHODS, TRAIN_OPTIONS["diffusion"].method, *TRAIN_OPTIONS["diffusion"].varieties.values()]
    )
)
USES = common.Uses(
    tuple(f"zoo {k}-*" for k in KINDS), ("fashion_mnist",), tuple(KIND_METHODS), ("diffusion-kinds",)
)


@dataclass
class KindResults:
    """What the zoo models of one kind gave on one data set: the methods it refuses (with the reason),
    the models run, and per method its AUROC on each OOD set per model, images/s and NFEs per image."""

    refused: dict[str, str]
    sets: list[str]
    names: list[str] = field(default_factory=list)
    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    speed: dict[str, list[float]] = field(default_factory=dict)
    nfes: dict[str, str] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return [m for m in KIND_METHODS if m not in self.refused]

    def add(
        self, name: str, got: dict[str, dict[str, float]], speed: dict[str, float], nfes: dict[str, str]
    ) -> None:
        """One model's AUROCs (method → set → value), images/s and NFEs per image."""
        self.names.append(name)
        for m in self.methods:
            for s in self.sets:
                self.values.setdefault(m, {}).setdefault(s, [])
                if s in got.get(m, {}):
                    self.values[m][s].append(got[m][s])
            self.speed.setdefault(m, []).append(speed.get(m, float("nan")))
        self.nfes |= nfes

    def table(self, kind: str) -> str:
        """Markdown: the AUROC table (rows: OOD sets, NFEs and images/s; columns: the methods it takes)
        and the methods it refuses."""
        rows = [[s, *(cell(self.values[m][s]) for m in self.methods)] for s in self.sets]
        rows.append(["NFEs/image", *(self.nfes.get(m, "–") for m in self.methods)])
        rows.append(["images/s", *(f"{np.nanmean(self.speed[m]):.1f}" for m in self.methods)])
        text = f"{KINDS[kind]}; models: {', '.join(self.names)}.\n\n"
        text += markdown_rows(["OOD set", *self.methods], rows)
        if self.refused:
            text += "\n\nRefused by this kind:\n\n" + "\n".join(
                f"- {m}: {w}" for m, w in self.refused.items()
            )
        return text


def refusals(model: DiffusionModel, ws: Workspace) -> dict[str, str]:
    """The methods ``model`` refuses, each with the one-line reason its detector gives when built."""
    out = {}
    for m in KIND_METHODS:
        try:
            make_detector(m, model, **ws.detector_kwargs(m))
        except RoseError as exc:
            out[m] = first_line(exc)
    return out


def zoo_runs(data: str) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(kind, training seed, zoo name) of every new kind's models on ``data`` that the zoo folder holds and
    the reference DDPMs of the same seeds, in ``ORDER`` (none where it holds no model of a new kind on
    it); and the names of those it lacks (an older copy of the zoo)."""
    short = next(k for k, v in zoo.ZOO_DATA.items() if v == data)
    kinds = [k for k in KINDS if k != "ddpm" and short in zoo.ZOO_FAMILIES.get(k, ())]
    named = [(k, s, name) for k in kinds for s, name in zoo.zoo_seeds(k, data)]
    runs = [r for r in named if (zoo.zoo_dir() / r[2]).is_dir()]
    seeds = sorted({s for _, s, _ in runs})
    missing = [name for _, _, name in named if not (zoo.zoo_dir() / name).is_dir()]
    runs += [("ddpm", s, f"ddpm-{short}-s{s}") for s in seeds] if runs else []
    return sorted(runs, key=lambda r: ORDER.index(r[0])), missing


def run(ws: Workspace, out: Path, rep: BenchReport) -> None:
    """Every zoo model of every kind in turn (``ORDER``); after each, ``report.md`` holds the tables of what
    has finished, marked partial, the reference first."""
    started = time.time()
    rep.parts.append(
        "Models: the zoo's kinds (zoo/README.md); every method that applies at its defaults, one draw of "
        f"ROSE's K pairs; data seed {DATA_SEED} + the training seed; cells: mean AUROC ± 95 % t-interval "
        "half-width over a kind's models (one model: its value)."
    )
    for data in ws.select_data():
        runs, missing = zoo_runs(data)
        if missing:
            rep.parts.append(
                f"Not in this zoo folder ({zoo.zoo_dir()}), so not judged: {', '.join(missing)}."
            )
        if not runs:
            rep.parts.append(f"{data}: the zoo has no model of the new kinds on it.")
            continue
        sets = ws.ood_sets(data, OOD[data])
        found: dict[str, KindResults] = {}
        for done, (kind, seed, name) in enumerate(runs, 1):
            model = as_diffusion_model(load_model(zoo.zoo_path(name)), "the kinds bench").to(ws.device)
            refused = refusals(model, ws)
            entry = found.setdefault(kind, KindResults(refused, sets))
            result, got = evaluate_methods(ws, model, data, entry.methods, seed)
            nfes = {m: nfe(model, m, ws.detector_kwargs(m)) for m in entry.methods}
            entry.add(name, got, result.images_per_second, nfes)
            rep.results[f"{data}/{name}"] = result.to_json() | {"refused": refused}
            shown = copy.deepcopy(rep) if done < len(runs) else rep
            if done < len(runs):
                shown.parts.append(
                    f"**Partial: {done} of {len(runs)} models on {data} finished** (the last: {name}); this "
                    "report is replaced as the run goes on."
                )
            for k in sorted(found, key=list(KINDS).index):
                shown.section(f"AUROC, {k} on {data}", found[k].table(k))
            if done < len(runs):
                shown.write(out, ws, time.time() - started)
        rep.results[f"{data}/summary"] = {
            k: {"values": f.values, "refused": f.refused, "models": f.names} for k, f in found.items()
        }


EXPERIMENT = common.Experiment(
    "diffusion-kinds",
    "ROSE and the diffusion baselines on flow-matching, conditional, DiT and latent zoo models",
    "beyond the paper",
    run,
    USES,
)
