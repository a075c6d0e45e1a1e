"""docs/paper.md: the paper's tables as `rose bench` reproduced them, row by row (paper | ours | Δ), from
committed copies of the bench's ``results.json`` files in ``docs/generated/paper/`` (one per experiment,
with the date, machine, profile and run time the bench recorded).

    rose bench table2 --profile cpu --out results/bench
    python -m benchmarks.paper_page --add results/bench/cpu/table2/results.json ["what to say of the run"]
    python -m benchmarks.paper_page --write                                       # rewrite docs/paper.md

``--add`` records the date the bench wrote the file and an optional note (a selection, what a cache
reused), both shown in the section.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "generated" / "paper"
PAGE = ROOT / "docs" / "paper.md"
FLAG = 0.05  # |Δ| above this is bold, as in the bench's own reports

INTRO = """# The paper, reproduced

Each table of the ROSE paper that `rose bench` regenerates, row by row: the paper's number, ours, and
Δ = ours − paper (bold when |Δ| > {flag}; † when the paper's number lies outside our 95 % bootstrap
interval over the test images). Written by `python -m benchmarks.paper_page --write` from the bench's own
`results.json` files committed in `docs/generated/paper/`; each section says when, on what machine, with
which profile and how long it ran. Our CIFAR-10 is decoded JPEG (quality 75, 4:2:0), the paper's is not,
so its CIFAR-10 rows compare unlike data ([results](results.md#cifar-10-judged-on-matched-data)).

**The paper profile** (`rose bench all --profile paper --device cuda`: the paper's epochs and sample
counts) has not run on a GPU for this page yet: no GPU was lent while it was written, so its time on one
GPU is not known; the cpu profile's cuts are stated in each section.
"""


def _cell(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def section(run: dict[str, Any], selection: str = "") -> str:
    """One experiment's section: its settings line and its paper | ours | Δ table; ``selection``: the
    models and data sets of a run that had only some of them (``cifar10-vae``), named in the title."""
    profile, machine = run["profile"], run["machine"]
    tables: dict[str, list[str]] = {}
    for r in run["comparison"]:
        ours, paper, interval = r["ours"], r["paper"], r["interval"]
        delta = "—"
        if ours is not None and paper is not None:
            delta = f"{ours - paper:+.3f}"
            if abs(ours - paper) > FLAG:
                delta = f"**{delta}**"
        outside = interval is not None and paper is not None and not interval[0] <= paper <= interval[1]
        shown = _cell(ours) + (" †" if outside else "")
        row = f"| {' / '.join(r['labels'])} | {_cell(paper)} | {shown} | {delta} | {r['why'] or ''} |"
        tables.setdefault(r.get("table", ""), []).append(row)
    blocks = []
    for table, rows in tables.items():
        heading = [f"### {table}", ""] if table else []
        blocks += [*heading, "| row | paper | ours | Δ | note |", "|---|---|---|---|---|", *rows, ""]
    where = ", ".join(f"{k} {v}" for k, v in machine.items())
    minutes = run["wall_seconds"] / 60
    cached = [m for m, how in run.get("models", {}).items() if isinstance(how, dict) and how.get("reused")]
    reuse = f" (reusing from its cache: {', '.join(cached)})" if cached else ""
    note = f" {run['note']}" if run.get("note") else ""
    return "\n".join(
        [
            f"## {run['title']}" + (f" ({selection.replace('-', ', ')})" if selection else ""),
            "",
            f"`rose bench {run['experiment']} --profile {profile['name']}`, {run.get('date', 'no date')}: "
            f"{minutes:.1f} min{reuse} on {where}.{note} Profile cuts: {profile['cuts']}.",
            "",
            *blocks,
        ]
    ).rstrip()


def render() -> str:
    """The whole page from every committed results file, in the order of the bench's experiments (the
    paper's: Table 2 before Table 11), then by file name."""
    from roseood.bench.experiments import EXPERIMENTS

    order = list(EXPERIMENTS)
    runs = [(json.loads(path.read_text()), path) for path in sorted(RESULTS.glob("*.json"))]
    runs.sort(key=lambda r: order.index(r[0]["experiment"]) if r[0]["experiment"] in order else len(order))
    parts = [INTRO.format(flag=FLAG)]
    for run, path in runs:
        name = path.stem.removesuffix(f"-{run['profile']['name']}")
        parts.append(section(run, name.removeprefix(run["experiment"]).lstrip("-")))
    if len(parts) == 1:
        parts.append("No experiment has been committed yet.")
    return "\n\n".join(parts).rstrip() + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--add"] and len(argv) in (2, 3):
        source = Path(argv[1])
        run = json.loads(source.read_text())
        written = datetime.fromtimestamp(source.stat().st_mtime, UTC)
        run["date"] = written.strftime("%Y-%m-%d %H:%M UTC")
        if len(argv) == 3:
            run["note"] = argv[2]
        RESULTS.mkdir(parents=True, exist_ok=True)
        target = RESULTS / f"{source.parent.name}-{run['profile']['name']}.json"
        target.write_text(json.dumps(run, indent=1) + "\n")
    if argv[:1] in (["--add"], ["--write"]):
        PAGE.write_text(render())
        print(f"wrote {PAGE.relative_to(ROOT)}")
    else:
        print(render(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
