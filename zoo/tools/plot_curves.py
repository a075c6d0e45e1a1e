"""Plot the zoo's learning curves (each folder's curve.csv: held-out ε-MSE and bound in bits/dim against
training seconds) into one PNG: `python zoo/tools/plot_curves.py docs/img/zoo/curves.png`."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

here = Path(__file__).resolve().parents[1]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for folder in sorted(here.glob("ddpm-*")):
    rows = list(csv.DictReader((folder / "curve.csv").open()))
    minutes = [float(r["seconds"]) / 60 for r in rows]
    style = "-" if "cifar10" in folder.name else "--"
    for ax, key in zip(axes, ("held_out_eps_mse", "held_out_bits_per_dim"), strict=True):
        ax.plot(minutes, [float(r[key]) for r in rows], style, marker=".", label=folder.name)
for ax, title in zip(axes, ("held-out ε-MSE per pixel", "held-out bound, bits/dim"), strict=True):
    ax.set_xlabel("training minutes (H100, shared by 3-6 runs)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
axes[1].legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[1] if len(sys.argv) > 1 else "curves.png", dpi=110)
