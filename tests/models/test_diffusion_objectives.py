"""The objectives' registry: a scheduler config's class picks the objective its model trains by, the CLI
offers the registered ones, and each objective's forward process and target are the ones its papers give."""

from __future__ import annotations

import argparse

import pytest
import torch

from roseood import catalogue
from roseood.errors import RoseError
from roseood.models.diffusion.objectives import OBJECTIVES, objective_of


def test_the_cli_offers_the_registered_objectives_and_the_scheduler_class_picks_one() -> None:
    p = argparse.ArgumentParser()
    catalogue.TRAIN_OPTIONS["diffusion"].add_arguments(p)
    (objective,) = [a for a in p._actions if a.dest == "objective"]
    assert tuple(objective.choices or ()) == tuple(OBJECTIVES)
    assert objective_of({}) is OBJECTIVES["ddpm"]
    assert objective_of({"_class_name": "DDIMScheduler"}) is OBJECTIVES["ddpm"]
    flow = OBJECTIVES["flow"].scheduler_config(10, 2.0)
    assert flow is not None and objective_of(flow) is OBJECTIVES["flow"]
    with pytest.raises(RoseError, match=r"ScoreSdeVeScheduler.*another objective"):
        objective_of({"_class_name": "ScoreSdeVeScheduler"})


def test_each_objective_noises_and_targets_as_its_paper_says() -> None:
    x0, noise = torch.rand(3, 1, 2, 2), torch.randn(3, 1, 2, 2)
    t = torch.tensor([0, 5, 9])
    alphas = torch.linspace(0.9, 0.1, 10)
    ddpm, flow = OBJECTIVES["ddpm"], OBJECTIVES["flow"]
    a = alphas[t].view(-1, 1, 1, 1)
    expected = a.sqrt() * x0 + (1 - a).sqrt() * noise
    torch.testing.assert_close(ddpm.noised(x0, t, noise, alphas, None), expected)
    torch.testing.assert_close(ddpm.target(x0, noise), noise)
    scheduler = argparse.Namespace(config=argparse.Namespace(num_train_timesteps=10, shift=1.0))
    sigma = (t / 10).view(-1, 1, 1, 1)
    torch.testing.assert_close(flow.noised(x0, t, noise, alphas, scheduler), (1 - sigma) * x0 + sigma * noise)
    torch.testing.assert_close(flow.target(x0, noise), noise - x0)
    assert ddpm.forward_process and not flow.forward_process
    with pytest.raises(RoseError, match="flow matching: use ROSE"):
        flow.require_forward_process("DiffPath")
