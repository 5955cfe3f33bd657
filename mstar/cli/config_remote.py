"""``mstar config show --url`` and ``mstar config diff``: settings of running servers and env files.

A server's settings come from ``GET /v1/config`` (stdlib HTTP, so the command stays fast). An env
file's are the file over the defaults: the process environment is not read, so that two files
compare as written. Exit codes of ``diff``: 0 same, 1 different, 2 usage error (including a side
that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mstar.settings import SettingsError, SettingsUsageError, load_settings
from mstar.settings.records import settings_records

TIMEOUT_S = 10.0


def add_url_arguments(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--url", action="append", default=[], metavar="URL",
                        help=f"{help_text}, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None, metavar="KEY",
                        help="bearer key for --url (default: MSTAR_API_KEY of this environment)")


def add_diff_parser(actions) -> None:
    diff = actions.add_parser(
        "diff", help="the knobs that differ between two env files and/or running servers",
        description="Compare two configurations: two env files, an env file and a server "
                    "(--url), or two servers. Exit 0 when they are the same, 1 when they "
                    "differ, 2 on a usage error.")
    diff.add_argument("env_files", nargs="*", metavar="ENV_FILE")
    add_url_arguments(diff, "a running server to compare (repeatable)")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(func=run_diff)


def _api_key(args: argparse.Namespace) -> str | None:
    if args.api_key:
        return args.api_key
    try:
        key = load_settings(strict=False).settings.api_key
    except (SettingsError, SettingsUsageError):
        return None
    return key.get_secret_value() if key is not None else None


def fetch_config(url: str, api_key: str | None) -> dict[str, Any]:
    """The body of GET URL/v1/config; raises SettingsUsageError saying why it failed."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url.rstrip("/") + "/v1/config")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SettingsUsageError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise SettingsUsageError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def remote_records(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The records of the one server named by --url; None (after saying why) when unreadable."""
    if len(args.url) != 1:
        print("mstar: error: give exactly one --url", file=sys.stderr)
        return None
    try:
        return fetch_config(args.url[0], _api_key(args))["settings"]
    except SettingsUsageError as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        return None


def _file_records(path: str) -> list[dict[str, Any]]:
    try:
        loaded = load_settings(env_files=[path], environ={}, strict=False)
    except SettingsError as exc:
        raise SettingsUsageError(f"{path}: {exc}") from None
    for problem in loaded.problems:
        print(f"warning: {problem.message()}", file=sys.stderr)
    # Through JSON, so that values compare as a server's do.
    return json.loads(json.dumps(settings_records(loaded)))


def _sides(args: argparse.Namespace) -> list[tuple[str, list[dict[str, Any]]]]:
    sides = [(path, _file_records(path)) for path in args.env_files]
    key = _api_key(args) if args.url else None
    return sides + [(url, fetch_config(url, key)["settings"]) for url in args.url]


def differences(left: list[dict], right: list[dict]) -> list[dict[str, Any]]:
    """Knobs whose values differ (a knob only one side knows counts as differing)."""
    by_name = {r["name"]: r for r in right}
    names = list(dict.fromkeys([r["name"] for r in left] + list(by_name)))
    left_by_name = {r["name"]: r for r in left}
    found = []
    for name in names:
        a, b = left_by_name.get(name), by_name.get(name)
        if a is None or b is None or a["value"] != b["value"]:
            found.append({"name": name, "left": _cell(a), "right": _cell(b)})
    return found


def _cell(record: dict | None) -> dict[str, Any] | None:
    return None if record is None else {"value": record["value"], "source": record["source"]}


def run_diff(args: argparse.Namespace) -> int:
    if len(args.env_files) + len(args.url) != 2:
        print("mstar: error: config diff compares exactly two configurations "
              "(ENV_FILE ENV_FILE, ENV_FILE --url URL, or --url URL --url URL)", file=sys.stderr)
        return 2
    try:
        (left_name, left), (right_name, right) = _sides(args)
    except SettingsUsageError as exc:
        print(f"mstar: error: {exc}", file=sys.stderr)
        return 2
    found = differences(left, right)
    if args.json:
        print(json.dumps({"left": left_name, "right": right_name, "differences": found},
                         indent=2))
        return 1 if found else 0
    for item in found:
        print(item["name"])
        for side_name, cell in ((left_name, item["left"]), (right_name, item["right"])):
            shown = "(unknown knob)" if cell is None else f"{cell['value']!r} ({cell['source']})"
            print(f"    {side_name}: {shown}")
    print(f"{len(found)} setting{' differs' if len(found) == 1 else 's differ'}" if found
          else "the configurations are the same")
    return 1 if found else 0
