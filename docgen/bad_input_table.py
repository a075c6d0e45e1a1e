"""Print the "bad input → outcome" table: every case of ``tests/test_cli_bad_input.py`` run through the
``rose`` command in a fresh working folder, with its exit status, the error line, and whether every
file stayed byte-identical; ``files``: the cases of ``tests/test_cli_bad_files.py`` (diffusers folders and
numbers read from files) instead.

    python -m docgen.bad_input_table > bad_inputs.md
    python -m docgen.bad_input_table files
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import tests.test_cli_bad_files as bad_files
import tests.test_cli_bad_input as bad_input
from tests.test_cli_bad_input import RECORDED_UNDER, run_case, shown, snapshot


def main(table: str = "input") -> None:
    """Run every case of one table and print one Markdown row per case."""
    cases, make_workdir = {
        "input": (bad_input.CASES, bad_input.make_workdir),
        "files": (bad_files.CASES, bad_files.make_workdir),
    }[table]
    with tempfile.TemporaryDirectory() as tmp:
        root = make_workdir(Path(tmp) / "w")
        data = str(root / "data")
        import os

        os.environ["ROSEOOD_DATA"] = data
        os.chdir(root)
        print(RECORDED_UNDER.format(*sys.version_info[:2]))  # argparse's wording follows Python's version
        print("| # | bad input | exit | stderr (the one error line) | files unchanged |")
        print("|---|---|---|---|---|")
        for i, case in enumerate(cases, 1):
            before = snapshot(root)
            code, err = run_case(case, root)
            line = shown(err, root)
            same = "yes" if snapshot(root) == before else "**no**"
            print(f"| {i} | `{case.what}` | {code} | {line} | {same} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
