"""``python -m research NAME [NAME ...]`` from the repository's root: the experiments beyond the paper, with
``rose bench``'s options (``--profile``, ``--out``, ``--models``, ``--datasets``, ...) and runner."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from research import EXPERIMENTS
from research.profiles import get_profile
from roseood.cli import main
from roseood.cli.bench import add_bench_options, run_bench
from roseood.cli.common import Parser


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command's parser: ``rose bench``'s options, these experiments and their profiles."""
    parser = Parser(prog="python -m research", description=__doc__.split("\n\n")[0])
    add_bench_options(parser)
    parser.set_defaults(func=lambda args: run_bench(args, EXPERIMENTS, "python -m research", get_profile))
    return parser


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], build_parser))
