"""mkdocs hook: the full "bad input → outcome" table of bad-input.md, inserted at build time.

The page holds a marker line; this hook replaces it with ``docs/generated/bad-input-cases.md``, the output
of ``python -m docgen.bad_input_table`` (every case of ``tests/test_cli_bad_input.py`` run through
``rose``: exit status, the one error line, whether every file stayed the same). Running the cases takes
the time of that test file, so the build reads their recorded output; ``tests/test_docs.py`` checks that
its rows are exactly the test's cases, in order, and names the command that regenerates it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.plugins import get_plugin_logger

MARKER = "<!-- bad-input-cases -->"
ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "generated" / "bad-input-cases.md"
REGENERATE = "python -m docgen.bad_input_table > docs/generated/bad-input-cases.md"
log = get_plugin_logger(__name__)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Fill the marker, if the page has one."""
    if MARKER not in markdown:
        return markdown
    if not TABLE.is_file():
        log.warning("%s is missing; write it: %s", TABLE.relative_to(ROOT), REGENERATE)
        return markdown.replace(MARKER, "")
    return markdown.replace(MARKER, TABLE.read_text(encoding="utf-8").strip() + "\n")


def recorded_cases(table: str) -> list[str]:
    """The ``bad input`` column of the recorded table, in order."""
    return re.findall(r"^\| \d+ \| `(.*?)` \|", table, re.MULTILINE)
