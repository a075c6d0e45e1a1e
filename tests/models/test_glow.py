"""Glow: invertibility, exact log-determinants, likelihood conventions, ActNorm init and the ROSE contract."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roseood.errors import DataError, RoseError
from roseood.models.glow import ActNorm, Glow, GlowLevel, InvConv2d, ZeroConv2d


def _tiny(channels: int = 1, size: int = 8, lu: bool = True, **kwargs: Any) -> Glow:
    torch.manual_seed(0)
    return Glow(in_channels=channels, image_size=size, levels=2, steps=2, hidden=8, lu=lu, **kwargs)


def _make_nontrivial(model: Glow, x: torch.Tensor) -> None:
    """Initialise every ActNorm from ``x`` and perturb the zero-initialised layers so no step is identity."""
    model.train()
    model.nll(x)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, ZeroConv2d):
                for p in module.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        for p in model.prior.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    model.eval()


@pytest.mark.parametrize("lu", [True, False])
@pytest.mark.parametrize("channels", [1, 3])
def test_reverse_inverts_encode(lu: bool, channels: int) -> None:
    model = _tiny(channels, 16, lu)
    x = torch.rand(4, channels, 16, 16)
    _make_nontrivial(model, x)
    y = model.preprocess(x, noise=True)
    zs, _ = model.encode(y)
    assert [z.shape for z in zs] == [(4, 2 * channels, 8, 8), (4, 8 * channels, 4, 4)]
    assert torch.allclose(model.reverse(zs), y, atol=1e-5)


@pytest.mark.parametrize("lu", [True, False])
@pytest.mark.parametrize(("channels", "size"), [(1, 8), (3, 4)])
def test_logdet_matches_bruteforce_jacobian(lu: bool, channels: int, size: int) -> None:
    model = _tiny(channels, size, lu).double()
    x = torch.rand(8, channels, size, size, dtype=torch.float64)
    _make_nontrivial(model, x)
    y = model.preprocess(x, noise=True)
    _, logdet = model.encode(y)

    for i in range(2):

        def flat_latents(v: torch.Tensor) -> torch.Tensor:
            zs, _ = model.encode(v.view(1, channels, size, size))
            return torch.cat([z.flatten() for z in zs])

        jac = torch.autograd.functional.jacobian(flat_latents, y[i].flatten(), vectorize=True)
        assert jac.shape == (channels * size * size,) * 2
        # float64 (as below): rounding (2⁻⁵³ an operation, on any CPU) stays far inside 1e-8
        assert torch.linalg.slogdet(jac)[1].item() == pytest.approx(logdet[i].item(), abs=1e-8)


def _normal_log_prob(z: torch.Tensor, mean: torch.Tensor, logs: torch.Tensor) -> torch.Tensor:
    return torch.distributions.Normal(mean, logs.exp()).log_prob(z).sum(dim=(1, 2, 3))


def test_log_prob_is_change_of_variables_with_conditional_split_prior() -> None:
    model = _tiny().double()
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    _make_nontrivial(model, x)
    y = model.preprocess(x, noise=False)
    zs, logdet = model.encode(y)
    top = _normal_log_prob(zs[-1], *model.prior.mean_logs(zs[-1]))
    # the kept half at the split is what the top level maps back to
    top_level, first_level = model.blocks[1], model.blocks[0]
    assert isinstance(top_level, GlowLevel) and isinstance(first_level, GlowLevel)
    assert top_level.split is None and first_level.split is not None
    kept = top_level.reverse(zs[-1], None, 1.0)
    h = first_level.split.zero(kept)
    split = _normal_log_prob(zs[0], h[:, 0::2], h[:, 1::2])
    assert torch.allclose(model(y), logdet + top + split, rtol=1e-10)


@pytest.mark.parametrize("lu", [True, False])
def test_invconv_forward_is_conv_and_logdet_is_slogdet(lu: bool) -> None:
    torch.manual_seed(0)
    inv = InvConv2d(6, lu).double()
    with torch.no_grad():
        for p in inv.parameters():
            p.add_(0.1 * torch.randn_like(p))
    w = inv.weight_matrix()
    assert w.shape == (6, 6)
    x = torch.randn(2, 6, 3, 5, dtype=torch.float64)
    assert torch.equal(inv(x), F.conv2d(x, w[:, :, None, None]))  # the same call inside: exact on any CPU
    assert inv.log_det(3, 5).item() == pytest.approx(15 * torch.linalg.slogdet(w)[1].item(), abs=1e-10)
    jac = torch.autograd.functional.jacobian(lambda v: inv(v.view(1, 6, 3, 5)).flatten(), x[0].flatten())
    assert torch.linalg.slogdet(jac)[1].item() == pytest.approx(inv.log_det(3, 5).item(), abs=1e-8)
    assert torch.allclose(inv.reverse(inv(x)), x, atol=1e-10)


def test_invconv_initial_weight_is_orthogonal_and_lu_parameters_are_triangular() -> None:
    torch.manual_seed(0)
    for lu in (True, False):
        w = InvConv2d(5, lu).weight_matrix().detach()
        assert torch.allclose(w @ w.T, torch.eye(5), atol=1e-5)
    inv = InvConv2d(5, lu=True)
    assert {n for n, _ in inv.named_parameters()} == {"lower", "upper", "log_s"}
    assert torch.equal(inv.lower, torch.tril(inv.lower, -1))
    assert torch.equal(inv.upper, torch.triu(inv.upper, 1))


def test_nll_is_deterministic_finite_and_near_eight_bits_per_dim() -> None:
    model = _tiny()
    x = torch.rand(16, 1, 8, 8)
    model.train()
    model.train_loss(x)  # ActNorm data-dependent init
    model.eval()
    nll = model.nll(x)
    assert nll.shape == (16,)
    assert torch.all(torch.isfinite(nll))
    assert torch.equal(nll, model.nll(x))  # the same tensors through the same kernels: exact on any CPU
    assert torch.equal(nll, model.rose_loss(x).detach())
    bpd = model.bits_per_dim(nll)
    assert torch.all((bpd > 7.5) & (bpd < 9.5))
    assert not torch.allclose(model.train_loss(x), nll)
    assert not torch.allclose(model.rose_loss(x, stochastic=True), nll)


def test_nll_includes_discretisation_term() -> None:
    model = _tiny()
    model.eval()
    x = torch.rand(2, 1, 8, 8)
    y = model.preprocess(x, noise=False)
    assert torch.allclose(model.nll(x), 64 * math.log(256) - model(y).detach())


def test_preprocess_quantises_like_the_authors() -> None:
    k = torch.arange(256, dtype=torch.float32)
    x = (k / 255).view(4, 1, 8, 8)
    assert torch.allclose(_tiny().preprocess(x, noise=False), ((k + 0.5) / 256 - 0.5).view(4, 1, 8, 8))
    y5 = _tiny(n_bits=5).preprocess(x, noise=False)
    assert torch.allclose(y5, ((torch.floor(k / 8) + 0.5) / 32 - 0.5).view(4, 1, 8, 8))
    noisy = _tiny().preprocess(x, noise=True)
    low = k.view(4, 1, 8, 8) / 256 - 0.5
    assert torch.all((noisy >= low) & (noisy < low + 1 / 256))


def test_samples_are_independent_in_eval_mode() -> None:
    model = _tiny(3)
    x = torch.rand(5, 3, 8, 8)
    _make_nontrivial(model, x)
    batch = model.rose_loss(x)
    alone = torch.cat([model.rose_loss(x[i : i + 1]) for i in range(5)])
    assert torch.allclose(batch, alone, rtol=1e-5)


@pytest.mark.parametrize("lu", [True, False])
@pytest.mark.parametrize("learn_prior", [True, False])
def test_gradients_reach_every_parameter(lu: bool, learn_prior: bool) -> None:
    model = _tiny(lu=lu, learn_prior=learn_prior)
    x = torch.rand(4, 1, 8, 8)
    _make_nontrivial(model, x)
    model.train()
    model.train_loss(x).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_actnorm_initialises_once_and_never_in_eval() -> None:
    model = _tiny()
    actnorms = [m for m in model.modules() if isinstance(m, ActNorm)]
    assert len(actnorms) == 2 * 2 * 3  # levels · steps · (flow + two in the coupling net)
    x = torch.rand(8, 1, 8, 8)
    model.eval()
    model.nll(x)
    assert not any(bool(m.initialized) for m in actnorms)
    assert all(torch.equal(m.logs, torch.zeros_like(m.logs)) for m in actnorms)

    model.train()
    model.train_loss(x)
    assert all(bool(m.initialized) for m in actnorms)
    first = actnorms[0]
    h = F.pixel_unshuffle(model.preprocess(x, noise=False), 2)
    # the first ActNorm standardises its (noisy) batch per channel
    out = first(h).detach()
    assert out.mean(dim=(0, 2, 3)).abs().max() < 0.05
    assert torch.allclose(out.std(dim=(0, 2, 3)), torch.ones(4), atol=0.05)

    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.train_loss(torch.rand(8, 1, 8, 8) * 0.1)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())

    fresh = Glow(**model.config())
    fresh.train()
    fresh.load_state_dict(state)
    fresh.train_loss(torch.rand(8, 1, 8, 8) * 0.1)
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in state.items())


def test_config_round_trip() -> None:
    model = _tiny(3, 16, lu=False, learn_prior=False, n_bits=5)
    x = torch.rand(4, 3, 16, 16)
    _make_nontrivial(model, x)
    config = model.config()
    assert config == {
        "in_channels": 3,
        "image_size": 16,
        "levels": 2,
        "steps": 2,
        "hidden": 8,
        "lu": False,
        "learn_prior": False,
        "n_bits": 5,
    }
    clone = Glow(**config)
    clone.load_state_dict(model.state_dict())
    clone.eval()
    assert torch.equal(clone.nll(x), model.nll(x))  # same class, so same parameter layouts and kernels
    assert model.bits_per_dim(model.nll(x)).max() < 7  # 5-bit data


def test_layer_sets_name_hookable_convolutions_in_network_order() -> None:
    model = _tiny()
    sets = model.layer_sets()
    assert list(sets) == ["invconv", "all"]
    assert model.rose_layers() == sets["invconv"]
    modules = dict(model.named_modules())
    assert len(sets["invconv"]) == 4 and all(isinstance(modules[n], InvConv2d) for n in sets["invconv"])
    assert len(sets["all"]) == 16
    assert [n for n in sets["all"] if isinstance(modules[n], InvConv2d)] == sets["invconv"]
    assert all(isinstance(modules[n], (InvConv2d, nn.Conv2d)) for n in sets["all"])
    assert sets["all"][:4] == [
        "blocks.0.steps.0.invconv",
        "blocks.0.steps.0.coupling.conv1",
        "blocks.0.steps.0.coupling.conv2",
        "blocks.0.steps.0.coupling.zero.conv",
    ]

    seen: list[str] = []
    hooks = [modules[n].register_forward_hook(lambda m, i, o, n=n: seen.append(n)) for n in sets["all"]]
    model.eval()
    model.rose_loss(torch.rand(2, 1, 8, 8))
    for hook in hooks:
        hook.remove()
    assert seen == sets["all"]


def test_invconv_hook_sees_linear_input_and_output() -> None:
    model = _tiny()
    model.eval()
    name = model.layer_sets()["invconv"][0]
    inv = dict(model.named_modules())[name]
    assert isinstance(inv, InvConv2d)
    captured: dict[str, torch.Tensor] = {}

    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        captured["in"], captured["out"] = inputs[0], output

    handle = inv.register_forward_hook(hook)
    model.rose_loss(torch.rand(2, 1, 8, 8))
    handle.remove()
    expected = F.conv2d(captured["in"], inv.weight_matrix()[:, :, None, None])
    assert torch.equal(captured["out"], expected)  # the layer's own call, repeated: exact on any CPU


def test_default_size_32_and_sampling() -> None:
    torch.manual_seed(0)
    model = Glow(in_channels=1, levels=2, steps=2, hidden=8)
    x = torch.rand(3, 1, 32, 32)
    model.train()
    assert torch.all(torch.isfinite(model.train_loss(x)))
    model.eval()
    samples = model.sample(2, temperature=0.7)
    assert samples.shape == (2, 1, 32, 32)
    assert samples.min() >= 0 and samples.max() <= 1
    rgb = Glow(in_channels=3, levels=3, steps=1, hidden=8)
    assert rgb.nll(torch.rand(2, 3, 32, 32)).shape == (2,)


def test_invalid_configs_and_inputs_are_rejected() -> None:
    with pytest.raises(RoseError):
        Glow(image_size=12, levels=3)
    with pytest.raises(RoseError):
        Glow(n_bits=9)
    with pytest.raises(DataError):
        _tiny().nll(torch.rand(2, 3, 8, 8))
    model = _tiny()
    with pytest.raises(RoseError):
        model.reverse([torch.zeros(1, 8, 2, 2)])
