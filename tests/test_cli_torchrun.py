"""Every option of every ``rose`` command survives torchrun's own parser: torchrun takes an abbreviation of
its options anywhere on the line (``--n`` was an ambiguous prefix of ``--nnodes``/``--nproc-per-node``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest
from torch.distributed.run import get_args_parser

from roseood.cli import build_parser


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str]]:
    """(command words, option) for every option of every command and family: (("train", "vae"), "--ngf")."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))
        elif path:
            yield from ((path, option) for option in action.option_strings)


OPTIONS = sorted(set(commands(build_parser())))
TORCHRUN = get_args_parser()


def test_every_command_and_family_has_options_to_check() -> None:
    words = {path for path, _ in OPTIONS}
    assert {("train", "vae"), ("train", "glow"), ("fit",), ("score",), ("evaluate",), ("bench",)} <= words
    assert (("score",), "--subset") in OPTIONS and (("evaluate",), "-q") in OPTIONS


@pytest.mark.parametrize(("words", "option"), OPTIONS, ids=[" ".join([*w, o]) for w, o in OPTIONS])
def test_torchrun_claims_no_option_of_ours(words: tuple[str, ...], option: str) -> None:
    # a longer torchrun option that starts with ours is what torchrun's abbreviation matching claims
    # (an identical one, --help, is left to the script, as the parse below checks)
    claimed = [t for t in TORCHRUN._option_string_actions if t.startswith(option) and t != option]
    assert not claimed, f"torchrun reads {option} as an abbreviation of {claimed}"
    line = [*words, option, "1"]
    args = TORCHRUN.parse_args(["--nproc-per-node", "2", "-m", "roseood", *line])
    assert args.training_script == "roseood" and args.training_script_args == line
