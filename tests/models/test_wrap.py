"""``roseood.wrap``: any module with a per-sample loss works with the detectors, on images, float
vectors and token sequences, and refuses bad inputs and losses in one clear line."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import roseood
from roseood.detectors import NLL, RND, ROSE, InputComplexity, LikelihoodRatio
from roseood.errors import DataError, RoseError
from roseood.models import RoseModel, load_weights, model_fingerprint


class GaussianMLP(nn.Module):
    """A diagonal Gaussian whose mean comes from an MLP of a fixed context: a real per-sample NLL."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 8), nn.Linear(8, dim)
        self.log_scale = nn.Parameter(torch.zeros(dim))

    def nll(self, x: Tensor) -> Tensor:
        mean = self.fc2(torch.tanh(self.fc1(x.flip(1))))
        z = (x - mean) / self.log_scale.exp()
        return (0.5 * z.pow(2) + self.log_scale + 0.9189385).sum(1)


class TokenBag(nn.Module):
    """Unigram model over tokens whose logits come from a Linear layer on a learned context."""

    def __init__(self, vocab: int = 5) -> None:
        super().__init__()
        self.context = nn.Parameter(torch.randn(1, 4))
        self.out = nn.Linear(4, vocab)

    def nll(self, tokens: Tensor) -> Tensor:
        logp = torch.log_softmax(self.out(self.context.expand(tokens.shape[0], -1)), -1)
        return -logp.gather(1, tokens).sum(1)


def test_wrapped_module_shares_names_weights_and_mode():
    torch.manual_seed(0)
    net = GaussianMLP()
    model = roseood.wrap(net, net.nll, layers=["fc1", "fc2"], input_shape=(6,), input_kind="tensor")
    assert isinstance(model, RoseModel)
    assert list(model.state_dict()) == list(net.state_dict())
    assert model_fingerprint(model) == roseood.models.checkpoint.fingerprint(net.state_dict())
    model.train()
    assert net.training and net.fc1.training
    model.eval()
    assert not net.training and not net.fc1.training
    assert model.rose_layers() == ["fc1", "fc2"] and model.input_shape == (6,)


def test_plain_state_dict_file_loads_into_the_wrapper(tmp_path):
    torch.manual_seed(0)
    trained, fresh = GaussianMLP(), GaussianMLP()
    torch.save(trained.state_dict(), tmp_path / "w.pt")
    model = load_weights(
        roseood.wrap(fresh, fresh.nll, layers=["fc1"], input_kind="tensor"), tmp_path / "w.pt"
    )
    x = torch.randn(4, 6)
    torch.testing.assert_close(model.nll(x), trained.nll(x))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layers": ["nope"]}, "has no layers ['nope']"),
        ({"layers": ["fc1"], "input_kind": "audio"}, "unknown input_kind"),
        ({"layers": ["fc1"], "input_shape": (6,)}, "image models take (C, H, W)"),
    ],
)
def test_wrap_refuses_bad_declarations(kwargs, message):
    net = GaussianMLP()
    with pytest.raises(RoseError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        roseood.wrap(net, net.nll, **kwargs)


def test_loss_that_is_not_per_sample_is_refused():
    net = GaussianMLP()
    model = roseood.wrap(net, lambda x: net.nll(x).sum(), layers=["fc1"], input_kind="tensor")
    with pytest.raises(RoseError, match=r"one value per sample, shape \(3,\), got \(\)"):
        model.rose_loss(torch.randn(3, 6))


def test_rose_on_float_vectors_separates_shifted_data():
    torch.manual_seed(0)
    net = GaussianMLP()
    model = roseood.wrap(net, net.nll, layers=["fc1", "fc2"], input_shape=(6,), input_kind="tensor")
    x = torch.randn(60, 6)
    det = ROSE(model, fisher="ekfac", batch_size=16).fit(x[:40], held_out=x[40:])
    near, far = det.score(torch.randn(20, 6)), det.score(torch.randn(20, 6) * 6 + 4)
    assert far.mean() > near.mean()
    with pytest.raises(DataError, match=r"model expects inputs of shape \(N, 6\)"):
        det.score(torch.randn(3, 5))
    with pytest.raises(DataError, match="model expects float tensors"):
        det.score(torch.zeros(3, 6, dtype=torch.long))
    with pytest.raises(DataError, match="NaN"):
        det.score(torch.full((3, 6), float("nan")))


def test_rose_and_nll_on_tokens_and_image_only_methods_refuse():
    torch.manual_seed(0)
    net = TokenBag()
    model = roseood.wrap(net, net.nll, layers=["out"], input_shape=(7,), input_kind="tokens")
    tokens = torch.randint(0, 5, (30, 7))
    det = ROSE(model, fisher="diag").fit(tokens)
    assert det.score(tokens[:4]).shape == (4,)
    assert NLL(model).fit(tokens).score(tokens[:4]).shape == (4,)
    with pytest.raises(DataError, match="integer token ids"):
        det.score(tokens.float())
    with pytest.raises(DataError, match="≥ 0"):
        det.score(tokens - 3)
    for method in (lambda: InputComplexity(model), lambda: RND(model), lambda: LikelihoodRatio(model)):
        with pytest.raises(RoseError, match="works on images only; this model takes tokens inputs"):
            method()


def test_rose_wraps_a_module_given_loss_fn_like_wrap_does(images):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3, 2, 1), nn.Flatten(), nn.Linear(3 * 16 * 16, 4))

    def loss(x: Tensor) -> Tensor:
        return net(x).pow(2).sum(1)

    direct = ROSE(net, loss_fn=loss, layers=["0", "2"], fisher="kfac").fit(images[:16], held_out=images[16:])
    wrapped = ROSE(roseood.wrap(net, loss, layers=["0", "2"]), fisher="kfac").fit(
        images[:16], held_out=images[16:]
    )
    torch.testing.assert_close(
        torch.from_numpy(direct.score(images)), torch.from_numpy(wrapped.score(images))
    )
    with pytest.raises(RoseError, match="ROSE needs a generative model"):
        ROSE(net)


def test_wrap_without_layers_takes_every_supported_layer():
    net = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 2))
    model = roseood.wrap(net, lambda x: net(x).sum(1), input_kind="tensor")
    assert model.rose_layers() == ["0", "1", "2"]  # LayerNorm's affine has a handler too
