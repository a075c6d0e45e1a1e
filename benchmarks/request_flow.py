"""How an evaluation's request passes through the package: the roseood modules it stops in, in order.

Runs one small ``evaluate`` (the shipped demo VAE, Fashion-MNIST in-distribution, one OOD set, ROSE-diag
and the NLL, no cache: the first-time fit path) under ``sys.setprofile`` and follows it through the code.

Definitions (used for every number printed):

- **call tree**: each call of a function defined in a ``roseood.*`` module is a node, a child of the
  innermost roseood function on the stack (torch, numpy and Python frames in between are skipped;
  module bodies run by an import are left out). A function a node calls again (a loop over batches,
  sets or methods) is merged into its first call, subtrees merged the same way: the code is followed
  once, as a reader follows it, whatever the loop counts are.
- **stop**: the walk of that tree visits a node's module on entering it and again after each child
  that is followed by more children (control back in the caller with work left to do); consecutive
  visits to one module collapse into one stop.
- **climb back up**: a stop whose module is already on the call path above it: a return into a
  caller's module followed by a further call down, or a call into a module still waiting on the stack
  (a cycle).

Three views are printed: the **request layers** (the tree without the calls into modules outside
``roseood.evaluation`` and ``roseood.data``, where a request is split, loaded and checked: a detector's
fit or score is left out with all it calls), the whole package followed once, and the whole package
with every call (no merging). Run from the repository root:

    python benchmarks/request_flow.py [--test 48] [--fit 32] [--stats 16] [--tree]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from roseood.demo import demo_model
from roseood.evaluation.evaluate import evaluate
from roseood.evaluation.splits import EvalSpec
from roseood.machine import machine_description

PACKAGE = "roseood"
LAYERS = ("evaluation", "data")  # where a request is split, loaded and checked


@dataclass
class Node:
    """One roseood function's call (repeated calls from one caller merged into it)."""

    module: str
    function: str
    children: list[Node] = field(default_factory=list)

    def child(self, module: str, function: str, merge: bool) -> Node:
        """The child for a call of ``module.function``: the earlier one when ``merge``, else a new one."""
        if merge:
            for c in self.children:
                if (c.module, c.function) == (module, function):
                    return c
        node = Node(module, function)
        self.children.append(node)
        return node


class Tracer:
    """Builds the call tree of roseood functions from profile events, every call a node of its own."""

    def __init__(self) -> None:
        self.root = Node("<request>", "<request>")
        self.stack: list[tuple[FrameType, Node]] = []
        self.skipped: set[int] = set()  # ids of the frames of module bodies (imports) being run

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            self.skipped.discard(id(frame))
            if self.stack and self.stack[-1][0] is frame:
                self.stack.pop()
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "<module>":
            self.skipped.add(id(frame))
        if self.skipped or not (module == PACKAGE or module.startswith(PACKAGE + ".")):
            return
        parent = self.stack[-1][1] if self.stack else self.root
        self.stack.append((frame, parent.child(module, frame.f_code.co_qualname, merge=False)))


def merged(node: Node, into: Node | None = None) -> Node:
    """``node``'s tree with each function a node calls again merged into its first call (recursively)."""
    out = into or Node(node.module, node.function)
    for c in node.children:
        merged(c, out.child(c.module, c.function, merge=True))
    return out


def pruned(node: Node, layers: tuple[str, ...]) -> Node:
    """``node``'s tree without the calls into modules outside ``layers`` (and all they call)."""
    out = Node(node.module, node.function)
    out.children = [pruned(c, layers) for c in node.children if short(c.module).startswith(layers)]
    return out


def walk(node: Node, path: list[str], stops: list[tuple[str, bool]]) -> None:
    """Append ``node``'s stops (module, whether it climbs back up) to ``stops``: see the docstring."""
    _visit(node.module, path, stops, climb_if_new=node.module in path)
    below = [*path, node.module]
    for i, c in enumerate(node.children):
        walk(c, below, stops)
        if i < len(node.children) - 1:
            _visit(node.module, below, stops, climb_if_new=True)


def _visit(module: str, path: list[str], stops: list[tuple[str, bool]], climb_if_new: bool) -> None:
    if stops and stops[-1][0] == module:
        return
    stops.append((module, climb_if_new))


def flow(root: Node) -> list[tuple[str, bool]]:
    """The stops of a request, from the root's children (the request's entry points)."""
    stops: list[tuple[str, bool]] = []
    for c in root.children:
        walk(c, [], stops)
    return stops


def tree(node: Node, depth: int = 0) -> str:
    """``node``'s calls as an indented outline, one ``module.function`` per line (the root left out)."""
    lines = [] if depth == 0 else [f"{'  ' * (depth - 1)}{short(node.module)}.{node.function}"]
    lines += [tree(c, depth + 1) for c in node.children]
    return "\n".join(lines)


def short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test", type=int, default=48, help="test images per set")
    parser.add_argument("--fit", type=int, default=32, help="Fisher images")
    parser.add_argument("--stats", type=int, default=16, help="held-out statistics images")
    parser.add_argument(
        "--tree", action="store_true", help="also print the request layers' call tree, followed once"
    )
    args = parser.parse_args()
    spec = EvalSpec(
        in_data="fashion_mnist",
        ood=["mnist"],
        methods=["rose-diag", "nll"],
        fit_samples=args.fit,
        stats_samples=args.stats,
        test_samples=args.test,
        batch_size=64,
        seed=2021,
    )
    print(
        f"settings: in fashion_mnist, ood mnist, methods rose-diag + nll, {args.fit} Fisher + "
        f"{args.stats} statistics images, {args.test} test images per set, batch 64, seed 2021, no "
        f"cache; the shipped demo VAE (the authors' Fashion-MNIST VAE, ngf 32, nz 100); "
        f"{machine_description()}"
    )
    model = demo_model()
    tracer = Tracer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sys.setprofile(tracer)
        try:
            result = evaluate(model, spec, progress=False)
        finally:
            sys.setprofile(None)
    once = merged(tracer.root)
    if args.tree:
        print("\nrequest layers' call tree, followed once (module.function):")
        print(tree(pruned(once, LAYERS)))
    views = {
        f"request layers ({', '.join(LAYERS)}), followed once": flow(pruned(once, LAYERS)),
        "all roseood modules, followed once": flow(once),
        "all roseood modules, every call": flow(tracer.root),
    }
    for label, stops in views.items():
        print(f"\n{label}: stops (* = climbs back up)")
        print("  ".join(f"{i}{'*' if climb else ''}:{short(m)}" for i, (m, climb) in enumerate(stops, 1)))
        distinct = list(dict.fromkeys(m for m, _ in stops))
        print(f"modules in order of first entry ({len(distinct)}): {' → '.join(short(m) for m in distinct)}")
    print()
    for label, stops in views.items():
        n_modules = len({m for m, _ in stops})
        print(f"{label}: {len(stops)} stops, {sum(c for _, c in stops)} climbs back up, {n_modules} modules")
    metrics = result.metrics()
    auroc = ", ".join(f"{m} {metrics[m]['mnist']['auroc']:.6f}" for m in spec.methods)
    print(f"AUROC against mnist: {auroc}; compression: {result.settings['compression']}")


if __name__ == "__main__":
    main()
