"""Print the "bad input → outcome" table: every case of ``tests/test_cli_bad_input.py`` run through the
``rose`` command in a fresh working folder, with its exit status, the error line, and whether every
file stayed byte-identical.

    python benchmarks/bad_input_table.py > bad_inputs.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its tests package

from tests.test_cli_bad_input import CASES, make_workdir, run_case, snapshot


def main() -> None:
    """Run every case and print one Markdown row per case."""
    with tempfile.TemporaryDirectory() as tmp:
        root = make_workdir(Path(tmp) / "w")
        data = str(root / "data")
        import os

        os.environ["ROSEOOD_DATA"] = data
        os.chdir(root)
        print("| # | bad input | exit | stderr (the one error line) | files unchanged |")
        print("|---|---|---|---|---|")
        for i, case in enumerate(CASES, 1):
            before = snapshot(root)
            code, err = run_case(case, root)
            line = " / ".join(err.strip().splitlines()).replace(str(root), ".").replace("|", r"\|")
            same = "yes" if snapshot(root) == before else "**no**"
            print(f"| {i} | `{case.what}` | {code} | {line} | {same} |")


if __name__ == "__main__":
    main()
