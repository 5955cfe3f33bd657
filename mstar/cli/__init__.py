"""The ``mstar`` command. Subcommands import their heavy dependencies only when they run."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module providing add_parser(subparsers); each sets func=run(args) -> exit code.
SUBCOMMANDS = {"config": "mstar.cli.config_cmd", "keys": "mstar.cli.keys_cmd",
               "serve": "mstar.cli.serve_cmd", "worker": "mstar.cli.worker_cmd"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` just that subcommand (so ``mstar config`` stays fast)."""
    parser = argparse.ArgumentParser(
        prog="mstar", description="A serving engine for language models.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        if only in (None, name):
            importlib.import_module(module).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(chosen).parse_args(argv)
    return args.func(args)
