"""mkdocs hook: the CLI reference in cli.md, generated from ``roseood.cli.build_parser()`` at build time.

The page holds a marker line; this hook replaces it with one section per command and sub-command (usage,
sub-commands, every option with its default and help), read from the argparse parser itself, so the page
cannot drift from what ``rose --help`` says.
"""

from __future__ import annotations

import argparse
import html
from typing import Any

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Fill the marker, if the page has one."""
    if MARKER not in markdown:
        return markdown
    from roseood.cli import build_parser

    return markdown.replace(MARKER, cli_reference(build_parser()))


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown for ``parser`` and every sub-command below it, depth first."""
    sections: list[str] = []
    _describe(parser, parser.prog, parser.description or "", sections)
    return "\n\n".join(sections) + "\n"


def _describe(parser: argparse.ArgumentParser, path: str, summary: str, out: list[str]) -> None:
    usage = parser.format_usage().removeprefix("usage: ").strip()
    heading = f"## {path} {{#{_anchor(path)}}}"
    part = [heading, _cell(summary.strip()) if summary else "", f"```text\n{usage}\n```"]
    children: list[tuple[str, str, argparse.ArgumentParser]] = []
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            children += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
        elif not isinstance(action, argparse._HelpAction):
            rows.append(_row(parser, action))
    if children:
        part.append("| sub-command | what it does |\n|---|---|")
        part[-1] += "".join(
            f"\n| [`{name}`](#{_anchor(f'{path} {name}')}) | {_cell(text)} |" for name, text, _ in children
        )
    if rows:
        part.append("| option | default | what it does |\n|---|---|---|\n" + "\n".join(rows))
    out.append("\n\n".join(p for p in part if p))
    for name, text, sub in children:
        _describe(sub, f"{path} {name}", text, out)


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = argparse.HelpFormatter(parser.prog)  # the plain one: the default has its own column
    invocation = formatter._format_action_invocation(action)
    text = formatter._expand_help(action) if action.help else ""
    if action.required:
        default = "required"
    elif action.default is None or action.default is False or action.default == argparse.SUPPRESS:
        default = ""
    else:
        default = f"`{action.default}`"
    return f"| `{_cell(invocation, code=True)}` | {default} | {_cell(text)} |"


def _anchor(path: str) -> str:
    return path.replace(" ", "-")


def _cell(text: str, code: bool = False) -> str:
    """One table cell: no line breaks, no column bars, no HTML; Markdown emphasis characters escaped."""
    text = " ".join(text.split())
    if code:
        return text.replace("|", "\\|")
    pieces = text.split("`")  # odd pieces are code spans: kept as they are
    for i in range(0, len(pieces), 2):
        plain = html.escape(pieces[i], quote=False)
        pieces[i] = plain.replace("*", "\\*").replace("_", "\\_")
    return "`".join(pieces).replace("|", "\\|")
