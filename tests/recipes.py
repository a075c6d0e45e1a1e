"""The code blocks of the Markdown pages, as the recipe tests run them: each fenced ``bash`` or ``python``
block with the marker before it, and the sizes shrunk so that a block runs in seconds on tiny data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- not run: (.+?) -->\s*$")
FENCE = re.compile(r"^(\s*)```(bash|python)\s*$")
# big → small: sample counts, epochs and widths as the pages write them, each as a whole word
TINY = {
    "12000": "40",
    "10000": "30",
    "5000": "40",
    "3000": "40",
    "2500": "30",
    "2000": "20",
    "1000": "10",
    "500": "8",
    "300": "3",
    "128": "8",
    "200": "3",
    "--images 16": "--images 2",
    "--epochs 100": "--epochs 1 --ngf 4 --nz 4",  # the paper's VAE at a tiny width: its fits are the cost
    "--epochs 3": "--epochs 1",
    "--epochs 2": "--epochs 1",
    "epochs=3": "epochs=1",
    "--widths 16,32,32": "--widths 8,16",
}


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line its fence opens on, its language and code, and the reason
    given in a ``<!-- not run: REASON -->`` marker on the line before it (None: the tests run it)."""

    page: str
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """Every ``bash`` and ``python`` block of ``page`` (a path relative to the repository), in order."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        found.append(Block(page, i + 1, language, code, marker.group(1) if marker else None))
        i = end + 1
    return found


def tiny(code: str) -> str:
    """``code`` with its sizes shrunk (``TINY``)."""
    for big, small in TINY.items():
        code = re.sub(rf"(?<![\w.]){re.escape(big)}(?![\w.])", small, code)
    return code


def commands(code: str) -> list[str]:
    """The commands of a bash block: comment lines dropped, ``\\`` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def tiny_folders(monkeypatch) -> None:
    """``rose demo --folders`` writing tiny folders: 30 images in ``clothes/`` (the fit and statistics
    images the pages ask for, shrunk), at most 6 in each part of the others."""
    from roseood import demo

    tiny = {
        name: tuple(
            (key, first, min(count, 30 if name == "clothes" else 6), *rest)
            for key, first, count, *rest in parts
        )
        for name, parts in demo.FOLDERS.items()
    }
    monkeypatch.setattr(demo, "FOLDERS", tiny)
