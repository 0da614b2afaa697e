"""`python -m needle COMMAND ...` (also the `needle` console script).

Each subcommand is one `add_parser` call in `build_parser` plus one `cmd_*`
function; the work itself lives in `needle.cli.<command>`, importable from Python.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .errors import NeedleError


def cmd_train(args: argparse.Namespace) -> int:
    from .cli import train
    train.run(args)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .cli import compare
    report = compare.run(args)
    return 0 if all(e["agree"] for e in report["workloads"].values()) else 1


def cmd_ir(args: argparse.Namespace) -> int:
    from .cli import ir
    ir.run(args)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from .cli import profile
    profile.run(args)
    return 0


def cmd_viz(args: argparse.Namespace) -> int:
    from .cli import viz
    viz.run(args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .cli import compare, ir, train

    parser = argparse.ArgumentParser(prog="python -m needle",
                                     description="needle: a small lazy deep-learning framework.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser("compare", help="time the built-in workloads eager vs fused",
                            description="Run the built-in workloads in three modes (eager numpy, eager "
                                        "compiled, lazy fused), print a table and check they agree.")
    compare.add_arguments(p)
    p.set_defaults(func=cmd_compare)

    p = commands.add_parser("ir", help="print or draw a compiler stage of a workload",
                            description="Show the IR of a built-in workload at any stage: the op graph, "
                                        "the fused graph, the kernel IR, LLVM IR or CUDA C.")
    ir.add_arguments(p)
    p.set_defaults(func=cmd_ir)

    from .cli import profile
    p = commands.add_parser("profile", help="profile a step of a workload, kernel by kernel",
                            description="Run a built-in workload's step under needle.profile() and print "
                                        "where the time goes: per kernel, its fused ops and source lines.")
    profile.add_arguments(p)
    p.set_defaults(func=cmd_profile)

    p = commands.add_parser("train", help="train a classifier on MNIST-format data",
                            description="Train softmax regression, an MLP or a small CNN on MNIST-format "
                                        "IDX files (MNIST or Fashion-MNIST) and report test accuracy.")
    train.add_arguments(p)
    p.set_defaults(func=cmd_train)

    from .cli import viz
    p = commands.add_parser("viz", help="see a whole step in the browser: every stage, kernel and time",
                            description="Run a script (with NEEDLE_VIZ=1) or a built-in workload, or read a "
                                        "recording, and serve a page on 127.0.0.1 with every schedule it ran: the "
                                        "graph at each stage, why each kernel boundary is there, each kernel's "
                                        "code and time, and your source lines.")
    viz.add_arguments(p)
    p.set_defaults(func=cmd_viz)

    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except (NeedleError, ValueError) as e:
        print(f"needle {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"needle {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
