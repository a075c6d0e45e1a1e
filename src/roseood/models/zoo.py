"""The reference zoo: models trained here, shipped in the repository's ``zoo/`` folder and installable
from it as the distribution ``roseood-zoo`` (``pip install ./zoo``), named family-data-seed: the DDPMs
``ddpm-fmnist-s0`` … ``ddpm-cifar10-s2`` (``rose train diffusion``, diffusers folders), the VAEs
``vae-cifar10-s0`` … ``-s2`` (``rose train vae``, a roseood checkpoint ``model.pt`` in their folder), and
Fashion-MNIST models of newer kinds (``ZOO_FEWER_SEEDS``: the seeds trained so far): ``fm-fmnist-sN``
(flow matching), ``cddpm-fmnist-sN`` (class-conditional), ``dit-fmnist-sN`` (a DiT), ``ldm-fmnist-sN``
(latent: a VQ-VAE and a UNet) and ``sd-fmnist-s0`` (text-conditioned latent, Stable Diffusion's layout,
with a sneaker LoRA inside).

A name loads wherever a model path is taken (``--model ddpm-fmnist-s0``, ``load_model("vae-cifar10-s1")``)
once its folder's files match ``zoo/SHA256SUMS``; ``$ROSEOOD_ZOO`` points to another copy of the folder.
``zoo/README.md`` lists each model's size, training and quality, each folder's ``README.md`` is its model
card (``rose zoo NAME``), and ``zoo/build.sh`` rebuilds it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from roseood.errors import CheckpointError, RoseError
from roseood.serialization import file_digest

ZOO_DATA = {"fmnist": "fashion_mnist", "cifar10": "cifar10"}  # name part -> training data set
ZOO_SEEDS = (0, 1, 2)  # the training seeds of a family trained three times
# family -> the data sets it has: DDPMs and VAEs; a flow-matching UNet, a class-conditional UNet, a DiT,
# a latent model (VQ-VAE + UNet) and a text-conditioned latent one, the newer kinds trained on the CPU
ZOO_FAMILIES = {
    "ddpm": ("fmnist", "cifar10"),
    "vae": ("cifar10",),
    "fm": ("fmnist",),
    "cddpm": ("fmnist",),
    "dit": ("fmnist",),
    "ldm": ("fmnist",),
    "sd": ("fmnist",),
}
# what each family is, as its cards and `rose zoo` say
ZOO_KINDS = {
    "ddpm": "denoising diffusion model (DDPM)",
    "vae": "variational autoencoder (the paper's convolutional VAE, 256-way pixel likelihood)",
    "fm": "flow-matching model (rectified flow)",
    "cddpm": "class-conditional DDPM (judged by the marginal over its 10 classes)",
    "dit": "class-conditional diffusion transformer (DiT, judged at its null label)",
    "ldm": "latent diffusion model (a VQ-VAE, then a DDPM on its latents)",
    "sd": "text-conditioned latent diffusion model (Stable Diffusion 1.x/2.x's layout, CPU-sized)",
}
# the newer kinds' seeds trained so far (CPU runs, one at a time); every other family has ZOO_SEEDS
ZOO_FEWER_SEEDS = {"fm": (0, 1, 2), "cddpm": (0, 1, 2), "dit": (0, 1, 2), "ldm": (0, 1, 2), "sd": (0,)}


def family_seeds(family: str) -> tuple[int, ...]:
    """The training seeds the zoo has of ``family``."""
    return ZOO_FEWER_SEEDS.get(family, ZOO_SEEDS)


def zoo_names() -> tuple[str, ...]:
    """Every zoo model's name, family-data-seed."""
    return tuple(
        f"{family}-{short}-s{seed}"
        for family, shorts in ZOO_FAMILIES.items()
        for short in shorts
        for seed in family_seeds(family)
    )


ZOO_NAMES = zoo_names()
CHECKPOINT = "model.pt"  # a zoo folder's roseood checkpoint (families that are not diffusers folders)
SUMS = "SHA256SUMS"
CARD = "README.md"  # a zoo folder's model card (Hugging Face convention, written by zoo/tools/cards.py)


INSTALLED = "roseood_zoo"  # the package ``pip install ./zoo`` makes of the folder
# how to get the zoo where it is missing, for every message that finds it so
HOW = (
    "the zoo is a distribution of its own: pip install ./zoo from a clone, or set $ROSEOOD_ZOO to a copy "
    "of its zoo/ folder"
)


def zoo_dir() -> Path:
    """The zoo folder: ``$ROSEOOD_ZOO``; else ``zoo/`` of the checkout this package runs from; else the
    installed ``roseood_zoo`` package (found, not imported); else the checkout's path, which is missing."""
    env = os.environ.get("ROSEOOD_ZOO")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[3] / "zoo"
    if (checkout / SUMS).is_file():
        return checkout
    spec = importlib.util.find_spec(INSTALLED)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return checkout


def model_bytes(folder: Path) -> int:
    """The size of a zoo model's folder: every file but its card (which states this size)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and p.name != CARD)


def zoo_data(name: str) -> str:
    """The data set a zoo model was trained on (``ddpm-fmnist-s1`` → ``fashion_mnist``)."""
    check_name(name)
    return ZOO_DATA[name.split("-")[1]]


def zoo_seeds(family: str, data: str) -> list[tuple[int, str]]:
    """(training seed, name) of the zoo's ``family`` models trained on data set ``data``
    (``("ddpm", "fashion_mnist")`` → ``(0, "ddpm-fmnist-s0")`` …); names checked."""
    short = next(k for k, v in ZOO_DATA.items() if v == data)
    found = [(seed, f"{family}-{short}-s{seed}") for seed in family_seeds(family)]
    for _, name in found:
        check_name(name)
    return found


def zoo_named(path: str | Path) -> tuple[str, str] | None:
    """(zoo model, folder inside it or "") that ``path`` names, ``NAME`` or ``NAME/inner`` (the LoRA in
    ``sd-fmnist-s0/sneaker-lora``), where no local file or folder has that path; else None."""
    name, _, inner = Path(path).as_posix().partition("/")
    return (name, inner) if name in ZOO_NAMES and not Path(path).exists() else None


def zoo_model(name: str, inner: str = "") -> Path:
    """What ``load_model`` reads for zoo model ``name`` (checked): its checkpoint file or its diffusers
    folder; with ``inner``, that path inside its folder (an adapter folder)."""
    folder = zoo_path(name)
    if inner:
        target = folder / inner
        if not target.exists() or not target.resolve().is_relative_to(folder.resolve()):
            inside = ", ".join(sorted(p.name for p in folder.iterdir() if p.is_dir())) or "no folders"
            raise CheckpointError(f"zoo model {name} has no {inner!r} inside its folder (it holds {inside})")
        return target
    file = folder / CHECKPOINT
    return file if file.is_file() else folder


def check_name(name: str) -> None:
    if name not in zoo_names():
        raise RoseError(f"unknown zoo model {name!r}; the zoo has {', '.join(zoo_names())}")


def checksums(folder: Path | None = None) -> dict[str, str]:
    """``relative path -> sha256`` of every file the zoo's ``SHA256SUMS`` lists."""
    path = (folder or zoo_dir()) / SUMS
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; the zoo's checksums cannot be checked")
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not a checksum list ({exc}); restore the zoo's SHA256SUMS") from None
    sums = {}
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        if digest and rel:
            sums[rel] = digest
    return sums


def zoo_path(name: str, verify: bool = True) -> Path:
    """The folder of zoo model ``name``; with ``verify``, every file of it checked against
    ``SHA256SUMS`` (a missing, extra or changed file is a one-line ``CheckpointError``)."""
    check_name(name)
    root = zoo_dir()
    folder = root / name
    if not folder.is_dir():
        raise CheckpointError(f"zoo model {name}: {folder} is missing ({HOW})")
    if verify:
        wanted = {rel: d for rel, d in checksums(root).items() if rel.split("/")[0] == name}
        # its bytes would be read from wherever a link points, outside what the checksums vouch for
        if folder.is_symlink():
            raise CheckpointError(f"zoo model {name}: {folder} is a symbolic link, not a plain folder")
        links = sorted(p.relative_to(root).as_posix() for p in folder.rglob("*") if p.is_symlink())
        if links:
            raise CheckpointError(f"zoo model {name}: {links[0]} is a symbolic link, not a plain file")
        present = {p.relative_to(root).as_posix() for p in folder.rglob("*") if p.is_file()}
        if not wanted:
            raise CheckpointError(f"zoo model {name}: {root / SUMS} lists none of its files")
        for rel in sorted(present | set(wanted)):
            if rel not in wanted:
                raise CheckpointError(f"zoo model {name}: {rel} is not in {SUMS} (a file was added)")
            if rel not in present:
                raise CheckpointError(f"zoo model {name}: {rel} is missing")
            if file_digest(root / rel) != wanted[rel]:
                raise CheckpointError(f"zoo model {name}: {rel} does not match its checksum (damaged?)")
    return folder


def model_card(name: str) -> str:
    """Zoo model ``name``'s card (its folder's ``README.md``) without the YAML metadata block, and where
    the folder is."""
    folder = zoo_path(name, verify=False)
    path = folder / CARD
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"zoo model {name}: its card {path} cannot be read ({exc})") from None
    if text.startswith("---\n"):
        text = text.split("\n---\n", 1)[-1]
    return f"{text.strip()}\n\n(folder: {folder})"


def write_checksums(folder: Path | None = None) -> Path:
    """Write ``SHA256SUMS`` for every zoo model folder present (``sha256sum -c`` reads it)."""
    root = folder or zoo_dir()
    rows = [
        f"{file_digest(p)}  {p.relative_to(root).as_posix()}"
        for name in zoo_names()
        if (root / name).is_dir()
        for p in sorted((root / name).rglob("*"))
        if p.is_file()
    ]
    out = root / SUMS
    out.write_text("\n".join(rows) + "\n")
    return out
