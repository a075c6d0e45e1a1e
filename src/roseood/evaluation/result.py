"""The result of one evaluation run (scores per method and set, their metrics, settings and timings),
and of the same run on several models (``AcrossModels``: the spread over training seeds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from roseood.errors import RoseError
from roseood.evaluation.gallery import Extremes
from roseood.evaluation.metrics import INTERVAL_MIN_SCORES, metric_intervals, ood_metrics
from roseood.serialization import save_npz, write_json


def metric_text(value: str, interval: tuple[float, float] | None, bold: bool = False) -> str:
    """A metric's printed ``value`` (bold if ``bold``), then its bootstrap interval to 3 decimals if any."""
    text = f"**{value}**" if bold else value
    return f"{text} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else text


@dataclass
class EvaluationResult:
    """``scores[method][set]``: per-image scores; the in-distribution set is keyed ``in_name``;
    ``examples[method][set]``: the most and least OOD images, for the HTML page (not saved)."""

    in_name: str
    settings: dict[str, Any]
    scores: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    images_per_second: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # OOD set -> why it was not evaluated
    # each set's file names (None: not from a folder) and labels, in score order: per-image rows
    files: dict[str, tuple[str, ...] | None] = field(default_factory=dict, repr=False)
    labels: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    thresholds: dict[str, float] = field(default_factory=dict)  # method -> calibrated (evaluate's tpr)
    detectors: dict[str, Any] = field(default_factory=dict, repr=False)  # method -> fitted (with tpr)
    bootstrap: int = 0  # resamples for metric intervals (0: none); see add_intervals
    bootstrap_seed: int = 0
    examples: dict[str, dict[str, Extremes]] = field(default_factory=dict, repr=False)
    _intervals: dict[tuple[str, str], dict[str, tuple[float, float]]] = field(
        default_factory=dict, repr=False
    )

    @property
    def methods(self) -> list[str]:
        return list(self.scores)

    @property
    def ood_sets(self) -> list[str]:
        sets = {s for per in self.scores.values() for s in per if s != self.in_name}
        first = next(iter(self.scores.values()), {})
        return [s for s in first if s in sets] + sorted(sets - set(first))

    def metrics(self) -> dict[str, dict[str, dict[str, float]]]:
        """``metrics[method][ood_set][metric]``."""
        return {
            m: {s: ood_metrics(per[self.in_name], v) for s, v in per.items() if s != self.in_name}
            for m, per in self.scores.items()
        }

    def add_intervals(self, resamples: int, seed: int) -> None:
        """Give every metric a 95 % bootstrap interval (``metric_intervals``), computed per (method, set)
        when first asked for, and say in the settings what the intervals cover."""
        self.bootstrap, self.bootstrap_seed = resamples, seed
        self._intervals.clear()
        self.settings["intervals"] = (
            f"95 % percentile bootstrap, {resamples} resamples of the test images (seed {seed}); "
            "the Fisher images and the model's training are held fixed"
        )

    def _cell_intervals(self, method: str, ood_set: str) -> dict[str, tuple[float, float]]:
        """Every metric's interval for one cell; none for a set of fewer than two images."""
        if (method, ood_set) not in self._intervals:
            s_in, s_out = self.scores[method][self.in_name], self.scores[method][ood_set]
            self._intervals[method, ood_set] = (
                metric_intervals(s_in, s_out, self.bootstrap, seed=self.bootstrap_seed)
                if min(len(s_in), len(s_out)) >= INTERVAL_MIN_SCORES
                else {}
            )
        return self._intervals[method, ood_set]

    def interval(self, method: str, ood_set: str, metric: str) -> tuple[float, float] | None:
        """The bootstrap interval of one metric, or ``None`` without ``add_intervals`` (or images)."""
        return self._cell_intervals(method, ood_set).get(metric) if self.bootstrap else None

    def intervals(self) -> dict[str, dict[str, dict[str, tuple[float, float]]]]:
        """``intervals[method][ood_set][metric]``: every interval (empty without ``add_intervals``)."""
        if not self.bootstrap:
            return {}
        return {
            m: {s: self._cell_intervals(m, s) for s in per if s != self.in_name}
            for m, per in self.scores.items()
        }

    def layer_metrics(self, method: str, metric: str = "auroc") -> dict[str, list[float]]:
        """For layer-wise scores ``(N, layers)`` (``EvalSpec.layerwise``): ``[ood_set][layer]`` metric."""
        per = self.scores[method]
        s_in = per[self.in_name]
        return {
            s: [ood_metrics(s_in[:, j], v[:, j])[metric] for j in range(s_in.shape[1])]
            for s, v in per.items()
            if s != self.in_name
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "results": self.metrics(),
            "images_per_second": self.images_per_second,
            "missing": self.missing,
            **({"intervals": self.intervals()} if self.bootstrap else {}),
            **({"thresholds": self.thresholds} if self.thresholds else {}),
        }

    def write_json(self, path: str | Path) -> None:
        """Settings and metrics as JSON, written atomically."""
        write_json(path, self.to_json())

    def save_scores(self, path: str | Path) -> None:
        """All raw scores as one .npz (keys ``method/set``), for re-plotting without recomputing."""
        save_npz(path, {f"{m}/{s}": v for m, per in self.scores.items() for s, v in per.items()})


def spread_text(spread: dict[str, float], bold: bool = False) -> str:
    """``mean ± sd (min–max)`` of one metric across models, to 3 decimals (mean bold if ``bold``)."""
    mean = f"**{spread['mean']:.3f}**" if bold else f"{spread['mean']:.3f}"
    return f"{mean} ± {spread['sd']:.3f} ({spread['min']:.3f}–{spread['max']:.3f})"


@dataclass
class AcrossModels:
    """One evaluation per model with the same settings and images — typically one model per training
    seed — and how much every metric moves between them: the spread that test-image bootstrap
    intervals cannot show, because they hold the trained model fixed."""

    results: dict[str, EvaluationResult]

    def __post_init__(self) -> None:
        if len(self.results) < 2:
            raise RoseError(f"a spread across models needs at least two models, got {len(self.results)}")
        first = self.first
        for name, result in self.results.items():
            if result.methods != first.methods or result.ood_sets != first.ood_sets:
                raise RoseError(
                    f"model {name!r} was evaluated with other methods or sets than the first: "
                    f"{result.methods} on {result.ood_sets}, not {first.methods} on {first.ood_sets}"
                )

    @property
    def first(self) -> EvaluationResult:
        return next(iter(self.results.values()))

    def shared_settings(self) -> dict[str, Any]:
        """The settings every model has alike: those that differ, such as the fingerprint or each fit's
        degenerate-fit warnings, are left out (each model's own report keeps them)."""
        others = [r.settings for r in self.results.values()]
        return {k: v for k, v in self.first.settings.items() if all(o.get(k) == v for o in others)}

    def metrics(self) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
        """``metrics[model][method][ood_set][metric]``: each model's own metrics."""
        return {name: r.metrics() for name, r in self.results.items()}

    def spread(self) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
        """``spread[method][ood_set][metric]``: ``mean``, ``sd`` (n − 1), ``min``, ``max``, ``n`` and the
        95 % Student-t interval of the mean (``mean_low``, ``mean_high``; it assumes the models are
        independent draws, e.g. training seeds, and a roughly normal spread)."""
        per_model = list(self.metrics().values())
        out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
        for method, sets in per_model[0].items():
            for ood_set, metrics in sets.items():
                for metric in metrics:
                    values = np.array([m[method][ood_set][metric] for m in per_model])
                    n, mean, sd = len(values), float(values.mean()), float(values.std(ddof=1))
                    half = float(stats.t.ppf(0.975, n - 1)) * sd / np.sqrt(n)
                    out.setdefault(method, {}).setdefault(ood_set, {})[metric] = {
                        "mean": mean,
                        "sd": sd,
                        "min": float(values.min()),
                        "max": float(values.max()),
                        "n": n,
                        "mean_low": mean - half,
                        "mean_high": mean + half,
                    }
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "across_models": self.spread(),
            "spread": "over the models listed; mean_low/high: 95 % Student-t interval of the mean",
            "models": {name: r.to_json() for name, r in self.results.items()},
        }

    def write_json(self, path: str | Path) -> None:
        """The spread and every model's own settings and metrics as JSON, written atomically."""
        write_json(path, self.to_json())
