"""PixelCNN: autoregressive masks (checked by gradients), likelihood units, checkpoints, training."""

from __future__ import annotations

import pytest
import torch

from roseood.errors import RoseError
from roseood.models import PixelCNN, load_model, model_fingerprint, save_model
from roseood.models.pixelcnn import MaskedConv2d


def _tiny(channels: int) -> PixelCNN:
    torch.manual_seed(0)
    return PixelCNN(in_channels=channels, width=6, blocks=2, image_size=8).eval()


@pytest.mark.parametrize("channels", [1, 3])
def test_logits_depend_only_on_earlier_pixels_and_colours(channels):
    model = _tiny(channels)
    x = torch.rand(1, channels, 8, 8, requires_grad=True)
    logits = model.logits(x)
    for row, col in [(0, 0), (3, 5), (7, 7)]:
        for c in range(channels):
            (grad,) = torch.autograd.grad(logits[0, c, :, row, col].sum(), x, retain_graph=True)
            seen = grad[0].abs().sum(0) > 0  # (H, W): pixels this output depends on
            later = torch.zeros(8, 8, dtype=torch.bool)
            later.view(-1)[row * 8 + col + 1 :] = True
            assert not seen[later].any()
            # at its own pixel, channel c sees exactly the colours before it
            assert torch.equal(grad[0, :, row, col] != 0, torch.arange(channels) < c)
            if (row, col) != (0, 0):
                assert seen[~later].any()  # it does look back


def test_masked_conv_keeps_a_mask_buffer_and_gives_masked_entries_no_gradient():
    conv = MaskedConv2d("B", 3, 6, 3, colours=3)
    assert conv.mask.shape == conv.weight.shape and "mask" in dict(conv.named_buffers())
    conv(torch.rand(2, 3, 5, 5)).sum().backward()
    assert conv.weight.grad is not None
    assert (conv.weight.grad[conv.mask == 0] == 0).all()
    assert (conv.weight.grad[conv.mask == 1] != 0).any()
    with pytest.raises(RoseError):
        MaskedConv2d("C", 1, 4, 3)


def test_nll_is_per_sample_finite_deterministic_and_near_8_bits_untrained():
    model = _tiny(3)
    x = torch.rand(5, 3, 8, 8)
    nll = model.nll(x)
    assert nll.shape == (5,) and torch.isfinite(nll).all()
    assert torch.equal(model.rose_loss(x).detach(), nll)
    assert torch.equal(model.rose_loss(x, stochastic=True).detach(), nll)
    # an untrained softmax over 256 values is close to uniform: about 8 bits per dimension
    assert 7.0 < model.bits_per_dim(nll).mean().item() < 9.0
    # samples do not interact: one image's NLL is the same alone as in a batch
    torch.testing.assert_close(model.nll(x[2:3]), nll[2:3])


def test_layer_sets_name_masked_convs_and_all_is_the_default():
    model = _tiny(1)
    modules = dict(model.named_modules())
    sets = model.layer_sets()
    assert next(iter(sets)) == "all" and model.rose_layers() == sets["all"]
    assert all(isinstance(modules[n], MaskedConv2d) for names in sets.values() for n in names)
    assert sets["all"] == [n for n, m in modules.items() if isinstance(m, MaskedConv2d)]


def test_checkpoint_round_trip(tmp_path):
    model = _tiny(3)
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
