"""Images/s of forward-only NLL, ROSE-diag, ROSE-EKFAC and a per-sample-loop ROSE on one model and batch.

The per-sample loop is the authors' approach (batch size 1, one backward per image); ours takes every
per-sample gradient from one batched backward pass with forward hooks. Run:

    python benchmarks/throughput.py [--model MODEL] [--batch 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from roseood.curvature import LayerGrad
from roseood.demo import demo_images, demo_model
from roseood.detectors import ROSE
from roseood.evaluation.evaluate import machine_description
from roseood.models import load_model


def per_sample_loop_scores(det: ROSE, x: torch.Tensor) -> torch.Tensor:
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


def timed(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", help="roseood model checkpoint (default: the shipped authors' FMNIST VAE)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--fit", type=int, default=512, help="images for the Fisher (only needed to score)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    model = load_model(args.model) if args.model else demo_model()
    imgs = demo_images()
    fit = torch.from_numpy(imgs["fashion_mnist_train"][: args.fit]).float() / 255
    stats = torch.from_numpy(imgs["fashion_mnist_train"][args.fit : args.fit + 128]).float() / 255
    x = torch.from_numpy(imgs["fashion_mnist_test"][: args.batch]).float() / 255
    diag = ROSE(model, fisher="diag", batch_size=args.batch).fit(fit, stats_images=stats)
    ekfac = ROSE(model, fisher="ekfac", batch_size=args.batch).fit(fit, stats_images=stats)
    loop = per_sample_loop_scores(ekfac, x[:8])
    torch.testing.assert_close(loop, ekfac.layer_scores(x[:8]), rtol=1e-3, atol=1e-6)

    def nll() -> object:
        with torch.no_grad():
            return model.rose_loss(x)

    t = {
        "forward-only NLL (z = mu)": timed(nll, args.repeats),
        "ROSE-diag (batched hooks)": timed(lambda: diag.score(x), args.repeats),
        "ROSE-EKFAC (batched hooks)": timed(lambda: ekfac.score(x), args.repeats),
        "ROSE-EKFAC per-sample loop": timed(lambda: per_sample_loop_scores(ekfac, x), 1),
    }
    print(
        "settings:",
        {"model": model.config(), "batch": args.batch, "repeats": args.repeats, "fisher_fit_images": args.fit}
        | machine_description(),
    )
    base = t["forward-only NLL (z = mu)"]
    print(f"{'method':<30}{'images/s':>10}{'cost vs NLL':>14}")
    for name, sec in t.items():
        print(f"{name:<30}{args.batch / sec:>10.1f}{sec / base:>13.2f}x")
    print("(the per-sample loop's layer scores were checked equal to the batched ones on 8 images)")


if __name__ == "__main__":
    main()
