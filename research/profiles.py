"""The research experiments' settings per bench profile: a ``ResearchProfile`` is the bench's ``Profile`` of
the same name (``smoke``, ``cpu``, ``paper``) with the fields only these experiments read, and their
experiment overrides, detector settings and cuts added to the bench's."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from roseood.bench.profiles import PAPER_VAE, Budget, Profile, both
from roseood.bench.profiles import get_profile as bench_profile
from roseood.bench.workspace import Workspace
from roseood.errors import RoseError


@dataclass(frozen=True)
class ResearchProfile(Profile):
    """A bench profile with the research experiments' own sizes (their defaults: the paper profile's)."""

    # ablation: EKFAC on every layer set (True) or only on the paper's (VAE encoder, Glow invconv) — the VAE
    # decoder's output layer has a (256·C·16)² Kronecker factor, far too slow to eigendecompose on a CPU
    ablation_ekfac_everywhere: bool = True
    # diffusion experiment (not in the paper): UNet, training budget, seeds, K of the loss
    diffusion: dict[str, Any] = field(
        default_factory=lambda: {"widths": (64, 128, 128), "layers_per_block": 2, "attention": True}
    )
    diffusion_train: dict[str, Budget] = field(default_factory=lambda: {d: (None, 50) for d in PAPER_VAE})
    diffusion_seeds: tuple[int, ...] = (0, 1, 2)
    diffusion_k: int = 8
    diffusion_draws: int = 3  # noise draws of the K pairs in diffusion-zoo
    near_ood_seeds: tuple[int, ...] = (0, 1, 2)  # training seeds of near-ood's own Glows and PixelCNNs


# Per bench profile: the ResearchProfile fields it changes, and the cuts, experiment overrides and detector
# settings it adds to the bench profile's.
RESEARCH: dict[str, dict[str, Any]] = {
    "paper": {},
    "cpu": {
        "cuts": (
            "ablation: 2000 Fisher + 500 statistics images, 1000 test images per set, EKFAC only on the "
            "paper's layer set; diffusion: UNet widths (16, 32, 32), one ResNet layer per block, 2 epochs on "
            "3000 images per seed (3 seeds), K = 4, 300 fit + 100 statistics images (every method fitted on "
            "all 400), 200 test images per set, reconstruction from 3 starts (t = 50, 450, 850) of a 20-step "
            "PLMS schedule (paper: 25 of 100 steps); diffusion-zoo and diffusion-kinds: the zoo's models, "
            "200 fit + 100 statistics images, 100 test images per set, the same reconstruction cut"
        ),
        "experiment_overrides": {
            "ablation": {"fit_samples": 2000, "stats_samples": 500, "test_samples": 1000},
            "near-ood": {"fit_samples": 2000, "stats_samples": 500, "test_samples": 1000},
            "diffusion": {
                "fit_samples": 300,
                "stats_samples": 100,
                "test_samples": 200,
                "detector_kwargs": {"reconstruction": {"steps": 20, "skip": 8}},
            },
            "diffusion-zoo": {
                "fit_samples": 200,
                "stats_samples": 100,
                "test_samples": 100,
                "detector_kwargs": {"reconstruction": {"steps": 20, "skip": 8}},
            },
            "diffusion-kinds": {
                "fit_samples": 200,
                "stats_samples": 100,
                "test_samples": 100,
                "detector_kwargs": {"reconstruction": {"steps": 20, "skip": 8}},
            },
        },
        "ablation_ekfac_everywhere": False,
        "diffusion": {"widths": (16, 32, 32), "layers_per_block": 1, "attention": True},
        "diffusion_train": both((3000, 2)),
        "diffusion_k": 4,
    },
    "smoke": {
        "ablation_ekfac_everywhere": False,
        "detector_kwargs": {
            "diffpath": {"steps": 2},
            "msma": {"levels": 2},
            "reconstruction": {"steps": 4, "skip": 2},
        },
        "diffusion": {"widths": (8, 16), "layers_per_block": 1, "attention": True},
        "diffusion_train": both((64, 1)),
        "diffusion_seeds": (0, 1),
        "diffusion_k": 2,
        "diffusion_draws": 2,
        "near_ood_seeds": (0,),
        "experiment_overrides": {
            "diffusion": {"test_samples": 12, "detector_kwargs": {"rose": {"layers": "mid"}}},
            "diffusion-zoo": {
                "fit_samples": 16,
                "test_samples": 8,
                "detector_kwargs": {"rose": {"layers": "mid"}},
            },
            "diffusion-kinds": {
                "fit_samples": 16,
                "stats_samples": 24,  # rose-bands-stats' gmm:k=auto, as near-ood's
                "test_samples": 8,
                "detector_kwargs": {"reconstruction": {"steps": 4, "skip": 2}},  # a DiT has no 'mid'
            },
            "near-ood": {"stats_samples": 24},  # gmm:k=auto compares two halves of ten or more
        },
    },
}
ADDED = ("experiment_overrides", "detector_kwargs")  # dictionaries whose entries join the bench profile's


def get_profile(name: str) -> ResearchProfile:
    """The bench profile ``name`` (refused in one line if unknown) with the research settings added."""
    base = bench_profile(name)
    own = RESEARCH[name]
    values = {f.name: getattr(base, f.name) for f in fields(base)}
    values |= {k: v for k, v in own.items() if k not in ("cuts", *ADDED)}
    values |= {k: getattr(base, k) | own.get(k, {}) for k in ADDED}
    if "cuts" in own:
        values["cuts"] = f"{base.cuts}; {own['cuts']}"
    return ResearchProfile(**values)


def profile_of(ws: Workspace) -> ResearchProfile:
    """The workspace's profile as the research experiments read it, refused in one line where a workspace
    of the bench's own profiles reaches one of them (it lacks their settings)."""
    if not isinstance(ws.profile, ResearchProfile):
        raise RoseError(
            f"profile {ws.profile.name!r} has no research settings: run the experiment by python -m research"
        )
    return ws.profile
