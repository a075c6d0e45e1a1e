"""The ``rose`` command line: one module per command group; commands parse, call the library and print."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from roseood import __version__
from roseood.cli import bench, detect, evaluate, info, models
from roseood.cli.common import Parser, apply_preset
from roseood.errors import RoseError
from roseood.plugins import load_plugins
from roseood.serialization import NAME_ERRORS

COMMAND_GROUPS = (info, detect, evaluate, models, bench)  # as `rose --help` lists them: first steps first
PLUGGED = (detect, evaluate, models)  # the groups whose commands take what a plug-in may register


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``rose`` parser. Without ``argv`` every command is built in full; with it, only the group of
    the command ``argv`` names, the others listing their commands by name and help only, so that
    ``rose --help`` and a command's bad argument are answered without importing what other commands
    need (model families and detectors import torch)."""
    parser = Parser(
        prog="rose",
        description="Out-of-distribution detection with deep generative models (ROSE).",
        epilog="Start with `rose demo` (offline, about 3 minutes); each command's options: rose COMMAND "
        "--help; the guides: docs/getting-started.md.",
    )
    parser.add_argument("--version", action="version", version=f"roseood {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    command = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    if argv is None or any(command in group.COMMANDS for group in PLUGGED):
        load_plugins()  # their methods, families and detector files are offered as the built-in ones
    for group in COMMAND_GROUPS:
        if argv is None or command in group.COMMANDS:
            group.register(sub)
        else:
            for name, text in group.COMMANDS.items():
                sub.add_parser(name, help=text)
    return parser


def _quiet_stdout() -> None:
    """After a closed pipe (``rose datasets | head``), send the rest of stdout nowhere, so Python's own
    flush at exit prints no BrokenPipeError either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


class _ReaderMayLeave:
    """``sys.stdout`` while a command runs: once its reader has gone (``rose evaluate ... | head``) the
    rest goes nowhere and the command goes on, so the files it was asked for are still written."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            _quiet_stdout()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            _quiet_stdout()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: the stream's own
        return getattr(self._stream, name)


def main(
    argv: Sequence[str] | None = None,
    parser_of: Callable[[Sequence[str]], argparse.ArgumentParser] = build_parser,
) -> int:
    """Run one command; returns the exit status (2: bad input, 130: interrupted). Under torchrun
    (``torchrun --nproc-per-node N -m roseood ...``) every process runs it on its share of the work and only
    rank 0 prints and writes files. ``parser_of``: the parser for ``argv`` (``python -m research`` gives
    its own, so its errors, warnings and exit codes are the ``rose`` command's)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = parser_of(argv)
        args = apply_preset(parser, argv, parser.parse_args(argv))
    except SystemExit as exc:  # --help (0) or a bad option (2, already reported on one line)
        return exc.code if isinstance(exc.code, int) else 2
    except RoseError as exc:  # a plug-in that cannot be imported
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from roseood import distributed
    from roseood.memory import set_memory
    from roseood.progress import show_warnings_as_notes

    show_warnings_as_notes()
    for stream in (sys.stdout, sys.stderr):  # file names that are not UTF-8 print as \xNN, never fail
        if isinstance(stream, io.TextIOWrapper):  # not a capture (tests) or a replaced stream
            with contextlib.suppress(ValueError):  # a closed one
                stream.reconfigure(errors=NAME_ERRORS)
    where = f" (rank {distributed.rank()})" if distributed.launched() else ""
    joined = not distributed.active()  # leave at the end only a process group this call joined
    try:
        set_memory(getattr(args, "memory", None))
        distributed.init()
        where = f" (rank {distributed.rank()})" if distributed.active() else ""
        with contextlib.ExitStack() as stack:
            stack.enter_context(contextlib.redirect_stdout(_ReaderMayLeave(sys.stdout)))
            if not distributed.is_main():
                stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            args.func(args)
        if joined:
            distributed.barrier()  # finish together before leaving the group (see finally)
    except RoseError as exc:
        print(f"error{where}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    finally:
        set_memory(None)  # the budget is this command's, never a later call's in the same process
        if joined:
            distributed.shutdown()
    return 0


def run() -> NoReturn:
    """The ``rose`` console command: exits with ``main()``'s status. A process torchrun started leaves
    by ``os._exit`` once its output is flushed: its work, files and process-group teardown are done, and
    the interpreter's own exit can still abort in gloo's threads (SIGABRT, "terminate called without an
    active exception"), which would turn a finished run into a failed one."""
    from roseood.launch import launched  # not roseood.distributed: torch is for the commands to import

    code = main()
    if launched():
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    sys.exit(code)


__all__ = ["build_parser", "main", "run"]
