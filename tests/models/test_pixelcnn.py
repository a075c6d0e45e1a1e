"""PixelCNN, residual and gated: autoregressive masks (checked by gradients), likelihood units, per-sample
gradients, checkpoints, training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from roseood.cli import build_parser
from roseood.curvature import LayerGradients
from roseood.errors import RoseError
from roseood.models import FAMILIES, PixelCNN, load_model, model_fingerprint, save_model
from roseood.models.pixelcnn import MaskedConv2d
from tests.curvature.test_handlers import as_matrix, loop


def _tiny(channels: int, gated: bool = False, width: int = 6) -> PixelCNN:
    torch.manual_seed(0)
    return PixelCNN(in_channels=channels, width=width, blocks=2, image_size=8, gated=gated).eval()


@pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
@pytest.mark.parametrize("channels", [1, 3])
def test_logits_depend_only_on_earlier_pixels_and_colours(channels, gated):
    # 4 channels per colour group and the dependencies of 16 independent images pooled, so that dead
    # ReLUs (at width 6 a group has 2 channels, often both dead at one pixel) hide no path
    model = _tiny(channels, gated, width=12)
    x = torch.rand(16, channels, 8, 8, requires_grad=True)
    logits = model.logits(x)
    for row, col in [(0, 0), (3, 5), (7, 7)]:
        for c in range(channels):
            (grad,) = torch.autograd.grad(logits[:, c, :, row, col].sum(), x, retain_graph=True)
            grad = grad.abs().sum(0)
            seen = grad.sum(0) > 0  # (H, W): pixels this output depends on
            later = torch.zeros(8, 8, dtype=torch.bool)
            later.view(-1)[row * 8 + col + 1 :] = True
            assert not seen[later].any()
            # at its own pixel, channel c sees exactly the colours before it
            assert torch.equal(grad[:, row, col] != 0, torch.arange(channels) < c)
            if (row, col) != (0, 0):
                assert seen[~later].any()  # it does look back


def test_the_gated_stack_has_no_blind_spot():
    """The residual PixelCNN's masks never reach the pixels up and to the right (the blind spot); the
    gated one sees every pixel of the row above within its vertical kernel's reach (3 + 1 per layer)."""
    x = torch.rand(1, 1, 8, 8, requires_grad=True)
    seen = {}
    for gated in (False, True):
        (grad,) = torch.autograd.grad(_tiny(1, gated).logits(x)[0, 0, :, 4, 2].sum(), x)
        seen[gated] = grad[0, 0, 3] != 0  # the row above pixel (4, 2)
    assert not seen[False][7] and seen[True].all()


def test_masked_conv_keeps_a_mask_buffer_and_gives_masked_entries_no_gradient():
    conv = MaskedConv2d("B", 3, 6, 3, colours=3)
    assert conv.mask.shape == conv.weight.shape and "mask" in dict(conv.named_buffers())
    conv(torch.rand(2, 3, 5, 5)).sum().backward()
    assert conv.weight.grad is not None
    assert (conv.weight.grad[conv.mask == 0] == 0).all()
    assert (conv.weight.grad[conv.mask == 1] != 0).any()
    with pytest.raises(RoseError):
        MaskedConv2d("C", 1, 4, 3)


@pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
def test_nll_is_per_sample_finite_deterministic_and_near_8_bits_untrained(gated):
    model = _tiny(3, gated)
    x = torch.rand(5, 3, 8, 8)
    nll = model.nll(x)
    assert nll.shape == (5,) and torch.isfinite(nll).all()
    assert torch.equal(model.rose_loss(x).detach(), nll)  # one code path: exact on any CPU
    assert torch.equal(model.rose_loss(x, stochastic=True).detach(), nll)
    # an untrained softmax over 256 values is close to uniform: about 8 bits per dimension
    assert 7.0 < model.bits_per_dim(nll).mean().item() < 9.0
    # samples do not interact: one image's NLL is the same alone as in a batch
    torch.testing.assert_close(model.nll(x[2:3]), nll[2:3])


@pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
def test_layer_sets_name_every_conv_and_the_default_is_all_or_the_vertical_stack(gated):
    model = _tiny(1, gated)
    modules = dict(model.named_modules())
    sets = model.layer_sets()
    default = "vertical" if gated else "all"
    assert next(iter(sets)) == default and model.rose_layers() == sets[default]
    assert sets["all"] == [n for n, m in modules.items() if isinstance(m, nn.Conv2d)]
    assert sets["all"] == sets["first"] + sets["body"] + sets["last"]
    assert all(isinstance(modules[n], MaskedConv2d) for n in sets["last"])
    if gated:  # 3 gated layers of 4 convs, then head and output; one vertical-stack conv per layer
        assert (
            sets["vertical"] == [n for n in sets["all"] if n.endswith("vertical")] and len(sets["all"]) == 14
        )
        assert not any(isinstance(modules[n], MaskedConv2d) for n in sets["vertical"])
    else:
        assert "vertical" not in sets


def test_rose_train_builds_the_gated_variant_from_the_cli():
    args = build_parser().parse_args(["train", "pixelcnn", "--gated", "--width", "8", "--out", "p.pt"])
    assert FAMILIES["pixelcnn"].from_cli_arguments(args) == {"width": 8, "blocks": 5, "gated": True}


def test_gated_per_sample_gradients_equal_an_autograd_loop():
    """Every gated layer (plain vertical convs, masked horizontal convs with gate-grouped colours)
    through the conv handler, weights and biases, against one backward pass per image."""
    model = _tiny(3, gated=True)
    x = torch.rand(3, 3, 8, 8)
    names = model.layer_sets()["all"]
    got = LayerGradients(model, names)(model.rose_loss, x)
    for name in names:
        module = model.get_submodule(name)
        matrix = got[name].matrix()
        torch.testing.assert_close(
            matrix, as_matrix(module, loop(model.rose_loss, x, module)), rtol=1e-4, atol=1e-4
        )
        free = getattr(module, "mask", torch.ones_like(module.weight)).flatten(1) != 0
        assert (matrix[:, :, : free.shape[1]][:, ~free] == 0).all()  # masked entries: exactly zero


@pytest.mark.parametrize("gated", [False, True], ids=["residual", "gated"])
def test_checkpoint_round_trip(tmp_path, gated):
    model = _tiny(3, gated)
    save_model(model, tmp_path / "p.pt")
    loaded = load_model(tmp_path / "p.pt")
    assert isinstance(loaded, PixelCNN) and loaded.config() == model.config()
    assert model_fingerprint(loaded) == model_fingerprint(model)
    x = torch.rand(2, 3, 8, 8)
    torch.testing.assert_close(loaded.nll(x), model.nll(x))


def test_a_few_adam_steps_lower_the_loss():
    model = _tiny(1).train()
    x = (torch.rand(16, 1, 8, 8) > 0.5).float()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = model.train_loss(x).mean().item()
    for _ in range(5):
        loss = model.train_loss(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model.train_loss(x).mean().item() < before


def test_a_pixelcnn_without_blocks_is_refused_before_training():
    # its config (blocks 0) would fail the checkpoint's "every size ≥ 1" check after training
    with pytest.raises(RoseError, match="blocks ≥ 1"):
        PixelCNN(1, width=8, blocks=0)
