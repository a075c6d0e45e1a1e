"""ROSE's cost against forward-only NLL, the per-sample loop, nngeometry and kronfluence, in one run.

Part 1, on one model and one test batch: forward-only NLL, the loss's forward + backward (the floor of
a gradient score), ROSE scoring throughput with each Fisher, ROSE-EKFAC as the authors computed it (one
backward per image), and the saved EKFAC detector's footprint.

Part 2, the EKFAC Fisher of the same layers, images and per-sample loss fitted by roseood, by nngeometry's
``PMatEKFAC`` and by kronfluence's EKFAC (``pip install -e ".[bench]"``), each in a fresh process: fit time
and peak memory, scoring time and peak memory for the test batch (each computes the same per-layer
``gᵀ (F + λ)⁻¹ g``), and how close each library's layer scores are to roseood's. Peak memory is the rise
of the process's resident memory (Linux: its high-water mark, reset just before the step; glibc is told
to return every block of 64 KiB or more to the system when freed, so that memory freed earlier and kept
by malloc does not hide a later peak) or, on a GPU, of ``torch.cuda.max_memory_allocated``. Times come
from a second fit and its scores with malloc as a user's process runs it (``malloc_returns_freed``). Run:

    python benchmarks/speed.py [--model MODEL] [--batch 64] [--fit 512] [--repeats 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import multiprocessing
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import spearmanr
from torch import Tensor

from roseood.curvature import FactoredGrad
from roseood.demo import demo_images, demo_model
from roseood.detectors import ROSE
from roseood.machine import machine_description
from roseood.memory import c_library
from roseood.models import load_model
from roseood.models.base import GenerativeModel, RoseModel, model_config


def per_sample_loop_scores(det: ROSE, x: Tensor) -> Tensor:
    """ROSE as the authors computed it: for each image, backward once and read ``weight.grad``."""
    modules, fishers = dict(det.model.named_modules()), det.fishers_
    assert fishers is not None, "fit the detector first"
    out = []
    for i in range(x.shape[0]):
        for param in det.model.parameters():
            param.grad = None
        det.model.rose_loss(x[i : i + 1]).sum().backward()
        row = []
        for name in det.layers:
            m = modules[name]
            weight, bias = m.weight.grad, m.bias.grad if m.bias is not None else None
            assert isinstance(weight, Tensor)
            g = (
                torch.cat([weight.flatten(1), bias[:, None]], 1)
                if isinstance(bias, Tensor)
                else weight.flatten(1)
            )
            lg = FactoredGrad.formed(g[None], positions=1, width_in=g.shape[1])
            row.append(fishers[name].quad(lg))
        out.append(torch.cat(row))
    return torch.stack(out)


class RoseoodEKFAC:
    """roseood's EKFAC Fisher of the layers, fitted and scored like the two libraries below."""

    def __init__(self, model: GenerativeModel, layers: list[str], damping: float, batch: int) -> None:
        self.det = ROSE(
            model, fisher="ekfac", layers=layers, damping=damping, batch_size=batch, progress=False
        )

    def fit(self, x: Tensor) -> None:
        self.det.fit_fisher(x)

    def layer_scores(self, x: Tensor) -> Tensor:
        return self.det.layer_scores(x)


class RoseoodEKFACRecomputed(RoseoodEKFAC):
    """roseood's EKFAC with the second pass running the model again (``grad_cache_bytes = 0``)."""

    def __init__(self, model: GenerativeModel, layers: list[str], damping: float, batch: int) -> None:
        super().__init__(model, layers, damping, batch)
        self.det.grad_cache_bytes = 0


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
        cpu = next(model.parameters()).device.type == "cpu"
        self.analyzer = Analyzer("rose", wrapped, task, cpu=cpu, disable_tqdm=True, output_dir=self.workdir)
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


# name shown, package that must be installed, adapter
LIBRARIES: list[tuple[str, str, type]] = [
    ("roseood EKFAC", "roseood", RoseoodEKFAC),
    ("roseood EKFAC, 2nd pass recomputed", "roseood", RoseoodEKFACRecomputed),
    ("nngeometry PMatEKFAC", "nngeometry", NNGeometryEKFAC),
    ("kronfluence EKFAC", "kronfluence", KronfluenceEKFAC),
]


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def malloc_returns_freed(on: bool) -> None:
    """glibc: with ``on``, every freed block of 64 KiB or more goes back to the system at once, so that
    memory freed earlier and kept by malloc can't hide a later peak (each page is then faulted in again
    when next used, which slows code with many large temporaries); off, blocks up to 32 MiB are kept for
    reuse, where a long-running process's malloc settles (its dynamic threshold's ceiling). Elsewhere:
    nothing."""
    libc = c_library()
    if not sys.platform.startswith("linux") or libc is None:
        return
    m_mmap_threshold, m_trim_threshold = -3, -1
    libc.mallopt(m_mmap_threshold, 2**16 if on else 2**25)
    libc.mallopt(m_trim_threshold, 2**16 if on else 2**26)


def measured(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float, float, int]:
    """``fn()``, its wall time, its CPU time (all threads of this process: on a shared machine, the
    work done, whatever else runs), and the peak memory it added: GPU memory allocated by torch on CUDA,
    else the process's resident memory (Linux: high-water mark reset before ``fn``; elsewhere the peak
    of the whole process, an upper bound)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
            base = _status_bytes("VmRSS")
        except OSError:
            base = 0
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base
    elif base:
        peak = _status_bytes("VmHWM") - base
    else:
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    return result, seconds, cpu_seconds, peak


def images(n_fit: int, n_test: int) -> tuple[Tensor, Tensor, Tensor]:
    """Fisher images, held-out statistics images (128) and the test batch, all Fashion-MNIST."""
    imgs = demo_images()
    train = torch.from_numpy(imgs["fashion_mnist_train"]).float() / 255
    test = torch.from_numpy(imgs["fashion_mnist_test"][:n_test]).float() / 255
    return train[:n_fit], train[n_fit : n_fit + 128], test


def fit_and_score(index: int, args: argparse.Namespace, layers: list[str], damping: float) -> dict[str, Any]:
    """In a fresh process: fit library ``index``'s EKFAC, score the test batch; times, peaks and scores."""
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=FutureWarning)  # kronfluence's deprecated GradScaler
    device = torch.device(args.device)
    model = (load_model(args.model) if args.model else demo_model()).to(device).eval()
    fit, _, x = (t.to(device) for t in images(args.fit, args.batch))
    model.rose_loss(x[:8]).sum().backward()  # the same one-off warm-up for every library
    for param in model.parameters():
        param.grad = None
    lib = LIBRARIES[index][2](model, layers, damping, args.batch)
    malloc_returns_freed(True)  # peaks: a block freed earlier can't hide a later peak
    _, _, _, fit_peak = measured(lambda: lib.fit(fit), device)
    scores, _, _, score_peak = measured(lambda: lib.layer_scores(x), device)
    malloc_returns_freed(False)  # times: the fit again and its scores, as malloc runs in a user's process
    _, fit_s, fit_cpu_s, _ = measured(lambda: lib.fit(fit), device)
    _, first_s, _, _ = measured(lambda: lib.layer_scores(x), device)
    _, score_s, score_cpu_s, _ = measured(lambda: [lib.layer_scores(x) for _ in range(args.repeats)], device)
    return {
        "fit_s": fit_s,
        "fit_cpu_s": fit_cpu_s,
        "fit_peak": fit_peak,
        "score_s": score_s / args.repeats,
        "score_cpu_s": score_cpu_s / args.repeats,
        "first_score_s": first_s,
        "score_peak": score_peak,
        "scores": scores.cpu().numpy(),
    }


def agreement(ours: np.ndarray, theirs: np.ndarray) -> dict[str, str]:
    """How close another library's layer scores are to roseood's, layer by layer."""
    rel = np.abs(theirs - ours) / np.abs(ours)
    rho = [spearmanr(ours[:, j], theirs[:, j]).statistic for j in range(ours.shape[1])]
    pearson = [np.corrcoef(ours[:, j], theirs[:, j])[0, 1] for j in range(ours.shape[1])]
    return {
        "Spearman": ", ".join(f"{r:.4f}" for r in rho),
        "Pearson": ", ".join(f"{r:.4f}" for r in pearson),
        "median rel. diff": ", ".join(f"{v:.1e}" for v in np.median(rel, 0)),
        "max rel. diff": ", ".join(f"{v:.1e}" for v in rel.max(0)),
    }


def saved_footprint(det: ROSE, model: RoseModel, x: Tensor) -> dict[str, str]:
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


def throughput(args: argparse.Namespace, model: RoseModel) -> ROSE:
    """Part 1: NLL, ROSE with each Fisher (diag, KFAC, KFAC-Tikhonov: the double sum where cheaper, EKFAC)
    and the per-sample loop on the test batch; returns the EKFAC detector."""
    fit, stats, x = images(args.fit, args.batch)
    dets = {
        f"ROSE-{label} (batched hooks)": ROSE(model, fisher=fisher, batch_size=args.batch, progress=False)
        for label, fisher in (
            ("diag", "diag"),
            ("KFAC", "kfac"),
            ("KFAC-Tikhonov", "kfac-tikhonov"),
            ("EKFAC", "ekfac"),
        )
    }
    ekfac_name = "ROSE-EKFAC (batched hooks)"
    ekfac = dets[ekfac_name]
    t: dict[str, float] = {}
    fit_s: dict[str, float] = {}
    for name, det in dets.items():
        t0 = time.perf_counter()
        det.fit(fit, held_out=stats)
        fit_s[name] = time.perf_counter() - t0
    footprint = saved_footprint(ekfac, model, x)
    loop = per_sample_loop_scores(ekfac, x[:8])
    torch.testing.assert_close(loop, ekfac.layer_scores(x[:8]), rtol=1e-3, atol=1e-6)

    def nll() -> object:
        with torch.no_grad():
            return model.rose_loss(x)

    def loss_backward() -> object:
        params = [p for p in model.parameters() if p.requires_grad]
        return torch.autograd.grad(model.rose_loss(x).sum(), params)

    t["forward-only NLL (z = mu)"] = timed(nll, args.repeats)
    t["ROSE's loss, forward + backward"] = timed(loss_backward, args.repeats)
    for name, det in dets.items():
        t[name] = timed(functools.partial(det.score, x), args.repeats)
    t["ROSE-EKFAC per-sample loop"] = timed(lambda: per_sample_loop_scores(ekfac, x), 1)
    base = t["forward-only NLL (z = mu)"]
    print(f"{'method':<36}{'images/s':>10}{'cost vs NLL':>13}{'detector fit s':>16}")
    for name, sec in t.items():
        fs = f"{fit_s[name]:>16.1f}" if name in fit_s else ""
        print(f"{name:<36}{args.batch / sec:>10.1f}{sec / base:>12.2f}x{fs}")
    floor = t["ROSE's loss, forward + backward"]
    print(f"ROSE-EKFAC / its loss's forward + backward (every parameter): {t[ekfac_name] / floor:.2f}x")
    print("(detector fit: the Fisher and the layer statistics on 128 held-out images; the per-sample loop's")
    print(" layer scores were checked equal to the batched ones on 8 images)")
    print("saved ROSE-EKFAC detector: " + ", ".join(f"{k} {v}" for k, v in footprint.items()))
    return ekfac


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="roseood model checkpoint (default: the shipped FMNIST VAE)")
    p.add_argument("--batch", type=int, default=64, help="test images, and the batch size of every fit")
    p.add_argument("--fit", type=int, default=512, help="images for the Fisher")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (part 2 only)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model) if args.model else demo_model()
    ekfac = throughput(args, model)
    print(
        "settings:",
        {
            "model": model_config(model),
            "batch": args.batch,
            "repeats": args.repeats,
            "fisher_fit_images": args.fit,
        }
        | {"layers": ekfac.layers, "damping": ekfac.damping, "part 2 device": args.device}
        | machine_description(),
    )
    results: dict[str, dict[str, Any]] = {}
    spawn = multiprocessing.get_context("spawn")
    mib = 2**20
    print(
        f"{'EKFAC Fisher':<36}{'fit s':>8}{'fit CPU s':>11}{'fit peak MiB':>14}"
        f"{'score s':>9}{'score CPU s':>13}{'1st score s':>13}{'score peak MiB':>16}"
    )
    for index, (name, package, _) in enumerate(LIBRARIES):
        if importlib.util.find_spec(package) is None:
            print(f"{package} not installed (pip install -e '.[bench]'): skipped")
            continue
        with spawn.Pool(1) as pool:
            r = results[name] = pool.apply(fit_and_score, (index, args, ekfac.layers, ekfac.damping))
        print(
            f"{name:<36}{r['fit_s']:>8.1f}{r['fit_cpu_s']:>11.1f}{r['fit_peak'] / mib:>14.0f}"
            f"{r['score_s']:>9.2f}{r['score_cpu_s']:>13.2f}{r['first_score_s']:>13.2f}"
            f"{r['score_peak'] / mib:>16.0f}",
            flush=True,
        )
    ours = results[LIBRARIES[0][0]]["scores"]
    for name, r in list(results.items())[1:]:
        close = agreement(ours, r["scores"])
        print(f"{name} vs roseood EKFAC, per layer: " + "; ".join(f"{k} {v}" for k, v in close.items()))


if __name__ == "__main__":
    main()
