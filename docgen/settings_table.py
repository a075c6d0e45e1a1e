"""ROSE's settings and a diffusion model's per-image loss settings as Markdown tables, rendered from their
one declaration (``roseood.settings``): each setting's keyword, default, ``rose`` option and meaning.
docs/detectors.md holds ROSE's table and docs/diffusion.md the loss's, each between two marker lines;
``tests/test_docs.py`` checks that the pages hold exactly what this renders.

    python -m docgen.settings_table           # print the tables
    python -m docgen.settings_table --write   # rewrite them in docs/detectors.md and docs/diffusion.md
"""

from __future__ import annotations

import sys

from docgen.decision_table import rewrite
from roseood.settings import LOSS_SETTINGS, ROSE_SETTINGS, LossSetting, Setting

PAGE = "docs/detectors.md"
BEGIN = "<!-- rose-settings: python -m docgen.settings_table --write -->"
END = "<!-- /rose-settings -->"
LOSS_PAGE = "docs/diffusion.md"
LOSS_BEGIN = "<!-- loss-settings: python -m docgen.settings_table --write -->"
LOSS_END = "<!-- /loss-settings -->"


def _text(help: str) -> str:
    """A help text as a table cell (its pipes and stars escaped)."""
    return help.replace("|", r"\|").replace("*", r"\*")


def row(s: Setting) -> str:
    """One setting's row: the option only where the detecting commands offer one."""
    option = f"`{s.option}`" if s.flag else ""
    meaning = _text(s.help) + (f" ([more](#{s.see}))" if s.see else "")
    return f"| `{s.name}` | `{s.default!r}` | {option} | {meaning} |"


def loss_row(s: LossSetting) -> str:
    """One loss setting's row: its ``denoising`` keys and their defaults (a range: both ends), its
    ``rose train diffusion`` option, and whether the detecting commands offer it."""
    keys = ", ".join(f"`{k}`" for k in s.keys)
    default = ", ".join(f"`{v!r}`" for v in s.config(s.default).values())
    detecting = "unset: the model's own" if s.detecting else ""
    return f"| {keys} | {default} | `{s.option}` | {detecting} | {_text(s.help)} |"


def render() -> str:
    """ROSE's table as Markdown, in the declaration's order."""
    head = ["| setting | default | `rose fit` / `evaluate` option | meaning |", "|---|---|---|---|"]
    return "\n".join(head + [row(s) for s in ROSE_SETTINGS])


def render_loss() -> str:
    """The loss settings' table as Markdown, in the declaration's order."""
    head = [
        "| `denoising` keys | default | `rose train diffusion` option | `rose fit` / `evaluate` | meaning |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + [loss_row(s) for s in LOSS_SETTINGS])


def block() -> str:
    """ROSE's whole marked block (its markers included)."""
    return f"{BEGIN}\n\n{render()}\n\n{END}"


def loss_block() -> str:
    """The loss settings' whole marked block (its markers included)."""
    return f"{LOSS_BEGIN}\n\n{render_loss()}\n\n{LOSS_END}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        rewrite(PAGE, block(), BEGIN, END)
        rewrite(LOSS_PAGE, loss_block(), LOSS_BEGIN, LOSS_END)
    else:
        print(render(), render_loss(), sep="\n\n")
