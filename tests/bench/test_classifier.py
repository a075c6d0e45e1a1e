"""Figure 6's classifiers: architectures, the predicted-label ROSE loss, exact per-sample gradients,
training with labels, checkpoints and resume, and ROSE's layer-wise scores on a classifier."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roseood.bench.classifier import ARCHS, Classifier, train_classifier
from roseood.curvature import LayerGradients
from roseood.detectors import ROSE
from roseood.errors import CheckpointError, DataError, RoseError
from roseood.models import FAMILIES, load_checkpoint, load_model, model_fingerprint, save_model


def _with_running_stats(model: Classifier, channels: int = 1) -> Classifier:
    """Give BatchNorm non-trivial running statistics (one training-mode pass), then switch to eval."""
    model.train()
    with torch.no_grad():
        model.logits(torch.rand(16, channels, 32, 32, generator=torch.Generator().manual_seed(3)))
    return model.eval()


@pytest.fixture
def tiny_cnn() -> Classifier:
    torch.manual_seed(0)
    return _with_running_stats(Classifier("cnn", width=4))


@pytest.fixture
def toy() -> tuple[torch.Tensor, np.ndarray]:
    """Two separable classes: dark images (label 0) and bright images (label 1), as uint8."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(64) % 2
    base = 0.2 + 0.6 * labels.float()[:, None, None, None]
    x = (base + 0.15 * torch.randn(64, 1, 32, 32, generator=g)).clamp(0, 1)
    return (x * 255).round().to(torch.uint8), labels.numpy()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("channels", [1, 3])
def test_every_arch_gives_logits_and_hookable_layers(arch, channels):
    model = Classifier(arch, in_channels=channels, width=2).eval()
    with torch.no_grad():
        assert model.logits(torch.rand(3, channels, 32, 32)).shape == (3, 10)
    modules = dict(model.named_modules())
    sets = model.layer_sets()
    assert next(iter(sets)) == "all" and sets["all"][-1] == "head"
    assert all(type(modules[n]) in (nn.Conv2d, nn.Linear) for n in sets["all"])
    assert sets["convs"] == sets["all"][:-1]


def test_layer_counts_follow_the_standard_configs():
    counts = {arch: len(Classifier(arch, width=2).rose_layers()) for arch in ARCHS}
    # convolutions + the one linear head; ResNet-18 adds three 1×1 shortcut convs to its 17 convs
    assert counts == {"cnn": 5, "vgg11": 9, "vgg13": 11, "vgg16": 14, "vgg19": 17, "resnet18": 21}
    assert Classifier("vgg11", width=64).head.in_features == 512
    assert Classifier("resnet18", width=8).head.in_features == 64


def test_rose_loss_is_cross_entropy_with_the_predicted_label(tiny_cnn, images):
    with torch.no_grad():
        logits = tiny_cnn.logits(images)
        loss = tiny_cnn.rose_loss(images)
    torch.testing.assert_close(loss, F.cross_entropy(logits, logits.argmax(1), reduction="none"))
    torch.testing.assert_close(tiny_cnn.nll(images), -logits.softmax(1).amax(1).log())


@pytest.mark.parametrize(("arch", "layers"), [("cnn", ["features.4", "head"]), ("resnet18", None)])
def test_per_sample_gradients_match_an_autograd_loop(arch, layers, images):
    torch.manual_seed(0)
    model = _with_running_stats(Classifier(arch, width=2))
    names = layers or ["features.0", "features.4.0.shortcut.0", "features.6.1.conv2"]
    x = images[:4]
    grads = LayerGradients(model, names)(model.rose_loss, x)
    modules = dict(model.named_modules())
    for n in range(x.shape[0]):
        for name in names:
            m = modules[name]
            params = [m.weight] if m.bias is None else [m.weight, m.bias]
            expected = torch.autograd.grad(model.rose_loss(x[n : n + 1]).sum(), params)
            flat = torch.cat([g.reshape(g.shape[0], -1) for g in expected], 1).flatten()
            torch.testing.assert_close(grads[name].flat()[n], flat, rtol=1e-4, atol=1e-6)


def test_training_separates_a_toy_problem_and_checkpoints(toy, tmp_path):
    x, y = toy
    torch.manual_seed(0)
    model = Classifier("cnn", num_classes=2, width=4)
    model, history = train_classifier(
        model, x, y, epochs=3, batch_size=16, lr=1e-2, checkpoint=tmp_path / "c.pt", progress=False
    )
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert history[-1]["accuracy"] >= 0.95
    with torch.no_grad():
        accuracy = (model.logits(x.float() / 255).argmax(1).numpy() == y).mean()
    assert accuracy >= 0.95 and not model.training
    loaded, obj = load_checkpoint(tmp_path / "c.pt")
    assert obj["train_state"]["epoch"] == 3 and model_fingerprint(loaded) == model_fingerprint(model)


def test_resume_continues_an_interrupted_run(toy, tmp_path):
    x, y = toy
    kwargs = {"batch_size": 16, "lr": 1e-2, "progress": False, "seed": 1}
    torch.manual_seed(0)
    full, _ = train_classifier(
        Classifier(num_classes=2, width=2), x, y, epochs=2, checkpoint=tmp_path / "a", **kwargs
    )
    torch.manual_seed(0)
    train_classifier(Classifier(num_classes=2, width=2), x, y, epochs=1, checkpoint=tmp_path / "b", **kwargs)
    resumed, history = train_classifier(
        Classifier(num_classes=2, width=2), x, y, epochs=2, checkpoint=tmp_path / "b", resume=True, **kwargs
    )
    assert [h["epoch"] for h in history] == [1, 2]
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_existing_output_and_mismatched_resume_are_refused(toy, tmp_path):
    x, y = toy
    path = tmp_path / "c.pt"
    train_classifier(Classifier(num_classes=2, width=2), x, y, epochs=1, checkpoint=path, progress=False)
    with pytest.raises(RoseError, match="exists"):
        train_classifier(Classifier(num_classes=2, width=2), x, y, epochs=1, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match="other settings"):
        train_classifier(
            Classifier(num_classes=2, width=2), x, y, epochs=2, lr=0.1, checkpoint=path, resume=True
        )
    with pytest.raises(CheckpointError, match="other settings"):
        train_classifier(Classifier(num_classes=2, width=4), x, y, epochs=2, checkpoint=path, resume=True)


def test_save_load_round_trip(tmp_path, images):
    model = _with_running_stats(Classifier("vgg11", width=2))
    save_model(model, tmp_path / "m.pt")
    loaded = load_model(tmp_path / "m.pt")
    assert isinstance(loaded, Classifier) and loaded.config() == model.config()
    assert FAMILIES["classifier"].cls is Classifier
    torch.testing.assert_close(loaded.rose_loss(images), model.rose_loss(images))


def test_a_classifier_checkpoint_loads_without_the_bench(tmp_path):
    """The family was registered by roseood.bench, so ``rose score`` on a classifier checkpoint failed
    unless something had imported the bench first; a fresh interpreter now loads it by its kind."""
    import subprocess
    import sys

    save_model(Classifier("cnn", width=2), tmp_path / "m.pt")
    code = (
        "import sys; from roseood.models import load_model; m = load_model(sys.argv[1]); "
        "assert 'roseood.bench' not in sys.modules; print(type(m).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.pt")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Classifier"


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        (np.zeros(63, dtype=np.int64), "64 labels"),
        (np.zeros((64, 1), dtype=np.int64), "64 labels"),
        (np.zeros(64, dtype=np.float32), "integers"),
        (np.full(64, 2), r"\[0, 2\)"),
        (np.full(64, -1), r"\[0, 2\)"),
        ([0] * 64, "array or tensor"),
    ],
)
def test_bad_labels_are_clear_errors(toy, labels, match, tmp_path):
    with pytest.raises(DataError, match=match):
        train_classifier(
            Classifier(num_classes=2, width=2), toy[0], labels, epochs=1, checkpoint=tmp_path / "c"
        )


def test_bad_settings_are_clear_errors(tiny_cnn, images):
    with pytest.raises(RoseError, match="unknown classifier architecture 'vgg8'"):
        Classifier("vgg8")
    with pytest.raises(RoseError, match="image_size"):
        Classifier(image_size=16)
    with pytest.raises(RoseError, match="train_classifier"):
        tiny_cnn.train_loss(images)


def test_rose_scores_every_layer_of_a_classifier(tiny_cnn, images):
    det = ROSE(tiny_cnn, fisher="diag", layers="all", batch_size=8).fit(images[:16], held_out=images[16:])
    scores = det.layer_scores(images[:5])
    assert scores.shape == (5, len(tiny_cnn.rose_layers("all"))) and (scores > 0).all()
    assert det.score(images[:5]).shape == (5,)
