"""ROSE's cost against forward-only NLL, the per-sample loop, nngeometry and kronfluence, in one run.

On one model and one batch: forward-only NLL, ROSE-diag, ROSE-EKFAC (fit and score), ROSE-EKFAC as the
authors computed it (one backward per image), and — when installed (``pip install -e ".[bench]"``) —
nngeometry's ``PMatEKFAC`` (scores from its per-sample Jacobian) and kronfluence's EKFAC self-influence,
both fitted on the same images and computing the same ``gᵀ (F + λ)⁻¹ g`` per layer. Prints throughput,
cost relative to the NLL, the Spearman correlation of each layer's scores with ROSE-EKFAC, and the saved
EKFAC detector's footprint (file size, load time, first score, agreement with the in-memory detector). Run:

    python benchmarks/speed.py [--model MODEL] [--batch 64] [--fit 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from scipy.stats import spearmanr
from torch import Tensor

from roseood.curvature import LayerGrad
from roseood.demo import demo_images, demo_model
from roseood.detectors import ROSE
from roseood.evaluation.evaluate import machine_description
from roseood.models import load_model
from roseood.models.base import GenerativeModel


def per_sample_loop_scores(det: ROSE, x: Tensor) -> Tensor:
    """ROSE as the authors computed it: for each image, backward once and read ``weight.grad``."""
    modules = dict(det.model.named_modules())
    out = []
    for i in range(x.shape[0]):
        det.model.zero_grad(set_to_none=True)
        det.model.rose_loss(x[i : i + 1]).sum().backward()
        row = []
        for name in det.layers:
            m = modules[name]
            w = m.weight.grad.flatten(1)  # type: ignore[union-attr]
            g = torch.cat([w, m.bias.grad[:, None]], 1) if m.bias is not None else w  # type: ignore[union-attr]
            lg = LayerGrad(a=torch.empty(1, 1, g.shape[1]), d=torch.empty(1, 1, g.shape[0]), g=g[None])
            row.append(det.fishers_[name].quad(lg))
        out.append(torch.cat(row))
    return torch.stack(out)


class NNGeometryEKFAC:
    """nngeometry's PMatEKFAC on the same layers and per-sample loss as ROSE; scores from its Jacobian."""

    def __init__(self, model: GenerativeModel, layers: list[str], damping: float, batch: int) -> None:
        from nngeometry.backend import TorchHooksJacobianBackend
        from nngeometry.layercollection import LayerCollection

        modules = dict(model.named_modules())
        self.lc = LayerCollection()
        for name in layers:
            self.lc.add_layer_from_model(model, modules[name])
        self.gen = TorchHooksJacobianBackend(
            model, function=lambda x: model.rose_loss(x), layer_collection=self.lc
        )
        self.layers, self.damping, self.batch, self.model = layers, damping, batch, model

    def _loader(self, x: Tensor) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=self.batch)

    def fit(self, x: Tensor) -> None:
        from nngeometry.object import PMatEKFAC

        self.fisher = PMatEKFAC(self.gen, examples=self._loader(x))
        self.fisher.update_diag(self._loader(x))

    def layer_scores(self, x: Tensor) -> Tensor:
        from nngeometry.object import PFMapDense

        jac = PFMapDense(generator=self.gen, examples=self._loader(x)).to_torch()[0]  # (N, P)
        evecs, diags = self.fisher.data
        cols = []
        for name in self.layers:
            start, layer = self.lc.p_pos[name], self.lc.layers[name]
            u_a, u_g = evecs[name]
            g = jac[:, start : start + layer.numel()]
            if layer.bias is not None:  # weight entries first, then the bias: as [W | b] rows
                n_w = layer.weight.numel()
                g = torch.cat([g[:, :n_w].view(len(g), u_g.shape[0], -1), g[:, n_w:, None]], 2)
            g = g.view(len(g), u_g.shape[0], u_a.shape[0])
            rotated = u_g.T @ g @ u_a
            cols.append((rotated.pow(2) / (diags[name].view(rotated.shape[1:]) + self.damping)).sum((1, 2)))
        return torch.stack(cols, 1).double()


class KronfluenceEKFAC:
    """kronfluence's EKFAC self-influence ``gᵀ (F + λ)⁻¹ g`` per module, empirical Fisher of the same loss."""

    def __init__(self, model: GenerativeModel, layers: list[str], damping: float, batch: int) -> None:
        from kronfluence.analyzer import Analyzer, prepare_model
        from kronfluence.task import Task

        class RoseTask(Task):
            def compute_train_loss(
                self, batch: list[Tensor], model: torch.nn.Module, sample: bool = False
            ) -> Tensor:
                return model.rose_loss(batch[0]).sum()  # type: ignore[operator]

            def compute_measurement(self, batch: list[Tensor], model: torch.nn.Module) -> Tensor:
                return model.rose_loss(batch[0]).sum()  # type: ignore[operator]

            def get_influence_tracked_modules(self) -> list[str]:
                return layers

        self.workdir = tempfile.mkdtemp(prefix="kronfluence-")
        task = RoseTask()
        wrapped = prepare_model(copy.deepcopy(model), task)
        self.analyzer = Analyzer("rose", wrapped, task, cpu=True, disable_tqdm=True, output_dir=self.workdir)
        self.layers, self.damping, self.batch = layers, damping, batch

    def fit(self, x: Tensor) -> None:
        from kronfluence.arguments import FactorArguments

        args = FactorArguments(strategy="ekfac", use_empirical_fisher=True)
        data = torch.utils.data.TensorDataset(x)
        self.analyzer.fit_all_factors(
            "ekfac", data, per_device_batch_size=self.batch, factor_args=args, overwrite_output_dir=True
        )

    def layer_scores(self, x: Tensor) -> Tensor:
        from kronfluence.arguments import ScoreArguments

        args = ScoreArguments(damping_factor=self.damping, compute_per_module_scores=True)
        data = torch.utils.data.TensorDataset(x)
        self.analyzer.compute_self_scores(
            "self",
            "ekfac",
            data,
            per_device_train_batch_size=self.batch,
            score_args=args,
            overwrite_output_dir=True,
        )
        scores = self.analyzer.load_self_scores("self")
        assert scores is not None
        return torch.stack([scores[name] for name in self.layers], 1).double()


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def saved_footprint(det: ROSE, model: GenerativeModel, x: Tensor) -> dict[str, str]:
    """Save the fitted detector, load it back: file size, load time, first score (rebuilds what the compact
    file leaves out) and the largest relative difference from the in-memory detector's scores."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rose-ekfac.pt"
        det.save(path)
        t0 = time.perf_counter()
        loaded = ROSE.load(path, model)
        load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        scores = loaded.layer_scores(x)
        first_s = time.perf_counter() - t0
        ref = det.layer_scores(x)
        return {
            "size": f"{path.stat().st_size / 2**20:.1f} MiB",
            "load": f"{load_s:.3f} s",
            "first score of the batch": f"{first_s:.2f} s",
            "max relative layer-score difference": f"{float(((scores - ref).abs() / ref.abs()).max()):.1e}",
        }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", help="roseood model checkpoint (default: the shipped authors' FMNIST VAE)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--fit", type=int, default=512, help="images for the Fisher")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    model = load_model(args.model) if args.model else demo_model()
    imgs = demo_images()
    fit = torch.from_numpy(imgs["fashion_mnist_train"][: args.fit]).float() / 255
    stats = torch.from_numpy(imgs["fashion_mnist_train"][args.fit : args.fit + 128]).float() / 255
    x = torch.from_numpy(imgs["fashion_mnist_test"][: args.batch]).float() / 255
    diag = ROSE(model, fisher="diag", batch_size=args.batch)
    ekfac = ROSE(model, fisher="ekfac", batch_size=args.batch)
    t: dict[str, float] = {}
    fit_s: dict[str, float] = {}
    for name, det in (("ROSE-diag (batched hooks)", diag), ("ROSE-EKFAC (batched hooks)", ekfac)):
        t0 = time.perf_counter()
        det.fit(fit, held_out=stats)
        fit_s[name] = time.perf_counter() - t0
    footprint = saved_footprint(ekfac, model, x)
    loop = per_sample_loop_scores(ekfac, x[:8])
    torch.testing.assert_close(loop, ekfac.layer_scores(x[:8]), rtol=1e-3, atol=1e-6)

    def nll() -> object:
        with torch.no_grad():
            return model.rose_loss(x)

    t["forward-only NLL (z = mu)"] = timed(nll, args.repeats)
    t["ROSE-diag (batched hooks)"] = timed(lambda: diag.score(x), args.repeats)
    t["ROSE-EKFAC (batched hooks)"] = timed(lambda: ekfac.score(x), args.repeats)
    t["ROSE-EKFAC per-sample loop"] = timed(lambda: per_sample_loop_scores(ekfac, x), 1)
    ours = ekfac.layer_scores(x).numpy()
    agreement: dict[str, list[float]] = {}
    for name, package, cls in (
        ("nngeometry PMatEKFAC", "nngeometry", NNGeometryEKFAC),
        ("kronfluence EKFAC", "kronfluence", KronfluenceEKFAC),
    ):
        if importlib.util.find_spec(package) is None:
            print(f"{package} not installed (pip install -e '.[bench]'): skipped")
            continue
        lib = cls(model, ekfac.layers, ekfac.damping, args.batch)
        t0 = time.perf_counter()
        lib.fit(fit)
        fit_s[name] = time.perf_counter() - t0
        t[name] = timed(lambda lib=lib: lib.layer_scores(x), args.repeats)
        theirs = lib.layer_scores(x).numpy()
        agreement[name] = [float(spearmanr(ours[:, j], theirs[:, j]).statistic) for j in range(ours.shape[1])]
    print(
        "settings:",
        {"model": model.config(), "batch": args.batch, "repeats": args.repeats, "fisher_fit_images": args.fit}
        | {"layers": ekfac.layers, "damping": ekfac.damping, "threads": torch.get_num_threads()}
        | machine_description(),
    )
    base = t["forward-only NLL (z = mu)"]
    print(f"{'method':<30}{'images/s':>10}{'cost vs NLL':>13}{'fit s':>9}")
    for name, sec in t.items():
        fs = f"{fit_s[name]:>9.1f}" if name in fit_s else ""
        print(f"{name:<30}{args.batch / sec:>10.1f}{sec / base:>12.2f}x{fs}")
    for name, rho in agreement.items():
        print(f"Spearman per layer, {name} vs ROSE-EKFAC: " + ", ".join(f"{r:.4f}" for r in rho))
    print("(the per-sample loop's layer scores were checked equal to the batched ones on 8 images)")
    print("saved ROSE-EKFAC detector: " + ", ".join(f"{k} {v}" for k, v in footprint.items()))


if __name__ == "__main__":
    main()
