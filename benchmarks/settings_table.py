"""ROSE's settings as a Markdown table, rendered from their one declaration (``roseood.settings``): each
setting's keyword, default, ``rose`` option and meaning. docs/detectors.md holds it between two marker
lines; ``tests/test_docs.py`` checks that the page holds exactly what this renders.

    python -m benchmarks.settings_table           # print the table
    python -m benchmarks.settings_table --write   # rewrite it in docs/detectors.md
"""

from __future__ import annotations

import sys

from benchmarks.decision_table import rewrite

from roseood.settings import ROSE_SETTINGS, Setting

PAGE = "docs/detectors.md"
BEGIN = "<!-- rose-settings: python -m benchmarks.settings_table --write -->"
END = "<!-- /rose-settings -->"


def row(s: Setting) -> str:
    """One setting's row: the option only where the detecting commands offer one."""
    option = f"`{s.option}`" if s.flag else ""
    meaning = s.help.replace("|", r"\|").replace("*", r"\*") + (f" ([more](#{s.see}))" if s.see else "")
    return f"| `{s.name}` | `{s.default!r}` | {option} | {meaning} |"


def render() -> str:
    """The table as Markdown, in the declaration's order."""
    head = ["| setting | default | `rose fit` / `evaluate` option | meaning |", "|---|---|---|---|"]
    return "\n".join(head + [row(s) for s in ROSE_SETTINGS])


def block() -> str:
    """The whole marked block (its markers included)."""
    return f"{BEGIN}\n\n{render()}\n\n{END}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        rewrite(PAGE, block(), BEGIN, END)
    else:
        print(render())
