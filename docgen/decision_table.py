"""The decision table "which detector for my model and my kind of OOD data": one source for README.md,
docs/detectors.md and docs/diffusion.md, so that the three cannot disagree.

Its rows are ``docs/generated/decisions.json`` (each row a verdict of ``rose bench`` with the measurement
behind it and a link into the docs); a row that names a model ``family`` (and ``variety``) takes its
method from the catalogue, the default ``rose fit`` and ``rose evaluate`` use, so the table and the code
cannot disagree either. Each page holds the table between two marker lines; ``tests/test_docs.py`` checks
that every page holds exactly what this renders.

    python -m docgen.decision_table           # print the table
    python -m docgen.decision_table --write   # rewrite it in the three pages
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from roseood.catalogue import TRAIN_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "docs" / "generated" / "decisions.json"
PAGES = {"README.md": "docs/", "docs/detectors.md": "", "docs/diffusion.md": ""}  # page -> link prefix
BEGIN = "<!-- decision-table: python -m docgen.decision_table --write -->"
END = "<!-- /decision-table -->"


def rows() -> list[dict[str, str]]:
    """The recorded verdicts, in the table's order."""
    loaded: list[dict[str, str]] = json.loads(ROWS.read_text(encoding="utf-8"))
    return loaded


def _rows(prefix: str) -> list[tuple[str, str, str, str]]:
    """Each row's cells: model, OOD data, the method to use, and what it measured with its link."""
    cells = []
    for row in rows():
        use = row.get("use", "")
        if "family" in row:  # the catalogue's method: the family's, or its variety's where a rule set one
            opts, variety = TRAIN_OPTIONS[row["family"]], row.get("variety", "")
            method = opts.method_for(variety)
            whose = "these models" if variety in opts.varieties else "this family"
            use = f"`{method}` (the default for {whose})" + (f"; {use}" if use else "")
        link = f" ([{row['link_text']}]({prefix}{row['link']}))" if row.get("link") else ""
        cells.append((row["model"], row["ood"], use, row["measured"] + link))
    return cells


def render(prefix: str = "", measured: bool = True) -> str:
    """The table as Markdown; ``prefix`` goes before every link (the docs folder, seen from the page);
    without ``measured``, the choices alone (README.md's, which links to the measured table)."""
    head = ["model", "OOD data", "use", "measured (AUROC)"][: 4 if measured else 3]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells[: len(head)]) + " |" for cells in _rows(prefix)]
    return "\n".join(lines)


def block(page: str) -> str:
    """The whole marked block of ``page`` (its markers included)."""
    return f"{BEGIN}\n\n{render(PAGES[page], measured=page != 'README.md')}\n\n{END}"


def current(text: str, begin: str = BEGIN, end: str = END) -> str | None:
    """The block a page holds now between the marker lines ``begin`` and ``end``, or None without them."""
    if begin not in text or end not in text:
        return None
    start = text.index(begin)
    return text[start : text.index(end, start) + len(end)]


def rewrite(page: str, new: str, begin: str = BEGIN, end: str = END) -> None:
    """Replace the marked block of ``page`` (which must hold the markers already) with ``new``."""
    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    old = current(text, begin, end)
    if old is None:
        raise SystemExit(f"{page} has no markers {begin} ... {end}")
    path.write_text(text.replace(old, new), encoding="utf-8")
    print(f"wrote {begin} into {page}")


def write() -> None:
    """Rewrite the block of every page (each must hold the markers already)."""
    for page in PAGES:
        rewrite(page, block(page))


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(render())
