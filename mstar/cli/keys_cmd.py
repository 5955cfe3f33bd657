"""``mstar keys hash``: the line to put in MSTAR_API_KEYS_FILE for a new key, read from stdin (so
the key appears in no shell history or process list)."""

from __future__ import annotations

import argparse
import sys

from mstar.settings.keys_file import key_hash


def add_parser(subparsers) -> None:
    keys = subparsers.add_parser("keys", help="API keys for MSTAR_API_KEYS_FILE")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    hashed = actions.add_parser(
        "hash", help="print the hash of a key read from stdin (one line; the trailing newline "
        "is not part of the key)")
    hashed.set_defaults(func=run_hash)


def run_hash(args: argparse.Namespace) -> int:
    key = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not key.strip():
        print("mstar: error: no key on stdin", file=sys.stderr)
        return 2
    print(f'hash = "{key_hash(key)}"')
    return 0
