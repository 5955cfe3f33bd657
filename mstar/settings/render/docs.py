"""Generates docs/environment_variables.rst from the schema, so no knob can lack a row."""

from __future__ import annotations

import difflib
from pathlib import Path

from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.env_file import MAX_ENV_FILE_BYTES
from mstar.settings.parse import FALSE_WORDS, TRUE_WORDS, describe_range

DOCS_PATH = Path(__file__).resolve().parents[3] / "docs" / "environment_variables.rst"

_INTRO = """\
Environment variables
=====================

.. This file is generated from mstar/settings/schema.py by ``mstar config docs``; do not edit it.
   CI runs ``mstar config docs --check`` and fails when it is stale.

Every runtime knob of mstar is an ``MSTAR_*`` variable declared in one schema
(``mstar/settings/schema.py``). The settings are built once, when a ``mstar`` command (or
``mstar.LLM``) starts and before anything heavy loads, then frozen and handed to every component and
process. ``mstar config show`` prints the effective values with their sources;
``mstar config validate`` checks a configuration without loading anything.

Sources, lowest precedence first: the defaults below, env files (``--env-file FILE``, repeatable,
later files win), the process environment, command-line flags (``--launch-wait-ms 5`` etc.; see
``mstar serve --help``), and keyword arguments passed in code (``LLM(max_num_seqs=8)``).

How bad values are handled
--------------------------

* **Malformed** values are rejected with one warning naming the variable, the rejected value and the
  value used instead: the value the knob would have without the bad entry (the default, unless a
  lower-precedence source set it). Malformed means: not a number; for decimal knobs also ``nan`` and
  ``inf``; for whole-number knobs also ``1e3`` and ``16.0``; for on/off knobs anything other than
  {bools}; for knobs with choices anything outside them (matching ignores case); for lists any bad
  element; for paths a ``~user`` that cannot be expanded (``~nosuchuser/x``).
* **Numbers** are plain decimal ASCII: the digits ``0-9``, a leading sign and, for decimal knobs, a
  point and an exponent (``2.5``, ``1e-3``). The same rule holds for every numeric knob: ``_``
  separators (``1_000``), ``0x`` prefixes and non-ASCII digits (``５``, ``٨٠٨٠``) are malformed. A
  number of any length is handled by the rule (never an error of Python's own): one past a bound is
  clamped to it, however many digits it has.
* **Out of range**: below the minimum, the minimum is used; above the maximum, the maximum; both with a
  warning. Where the bound is exclusive (``> 0``) there is no minimum to use, so the value counts as
  malformed.
* **Empty or whitespace-only** values count as unset, silently (templated env files often leave
  blanks): the value from the lower-precedence sources stands.
* **Unknown** ``MSTAR_*`` names in the environment or an env file warn and suggest the closest known
  name ("did you mean MSTAR_LAUNCH_WAIT_MS?"). So do names that differ from a knob only in case,
  spaces or invisible characters (``mstar_port``, a name starting with a byte-order mark).
* **Security settings fail closed.** For a security setting (today ``MSTAR_API_KEY``) a lenient
  fallback could switch a protection off, so every problem with it is an error in every mode, not
  only in strict mode: a malformed value (an API key must be visible ASCII without spaces and not
  wrapped in quotes), a value that is set but empty (unset the variable to turn authentication
  off), a name that may have been meant for it (``MSTAR_APIKEY``, ``mstar_api_key``,
  ``\\ufeffMSTAR_API_KEY``), and an env-file line for it that is not used (one that cannot be
  parsed, or a second line for it). ``mstar serve`` and ``mstar config validate`` then exit with
  status 1 and name the variable.
* Every value that parsed and is in range is used exactly as given.
* **Strict mode** (``MSTAR_CONFIG_STRICTNESS=strict`` or ``--strict``): every problem above is an
  error; all of them are listed at once and the command exits with status 1 before anything loads.

The **Reload** column marks the knobs a running server applies when it receives SIGHUP
(re-reading its env files); every other change needs a restart. See :doc:`operations`.

Warnings are structured log events (``setting_rejected`` with ``variable``, ``value``, ``used``,
``reason`` and ``source``; ``setting_problem`` for unknown names and env-file lines).

Env files
---------

``--env-file FILE`` lines are parsed by python-dotenv's parser, the library pydantic-settings
uses; docker compose's ``env_file`` treats these cases alike. Blank lines and ``#`` comments are
skipped; a leading UTF-8 byte-order mark is ignored; ``export`` followed by any spaces or tabs is
allowed; values may be single-quoted (taken literally) or double-quoted (``\\n``, ``\\"`` and the
like are escapes); an inline comment after a value is dropped when a space precedes the ``#``,
quoted or not (``KEY="v"  # note`` and ``KEY=v # note`` both give ``v``, ``KEY=v#1`` gives
``v#1``). ``${VAR}`` is not expanded.

Each line that is not used warns with ``file:line`` and the rest of the file still applies: a line
that is not ``KEY=value``, a key containing a space, an unterminated quote, and a key given twice
(the later line wins).

Only regular files are read, of at most {max_env_file} bytes (1 MiB). A missing file, a directory,
a FIFO or a device (``/dev/zero``), a larger file, and text that is not UTF-8 are usage errors:
the command exits with status 2 and says why, before reading anything else.

"""


def portable(value: object) -> object:
    """A default as generated files show it: a path under the home directory as ``~/...``, so
    that the files do not depend on who generates them."""
    if isinstance(value, Path):
        home = Path.home()
        return "~/" + str(value.relative_to(home)) if value.is_relative_to(home) else str(value)
    return value


def _literal(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    text = ",".join(str(v) for v in value) if isinstance(value, list) else str(portable(value))
    return f"``{text}``" if text else "empty"  # an empty literal is not valid reStructuredText


def bounds_text(knob: Knob) -> str:
    if knob.choices:
        return " | ".join(knob.choices)
    if knob.minimum is None and knob.maximum is None:
        return ""
    prefix = "each " if knob.kind.value == "int list" else ""
    return prefix + describe_range(knob) + (" | auto" if knob.auto else "")


def describe(knob: Knob) -> str:
    """The knob's description, led by "No effect since ..." for a knob that does nothing now."""
    if knob.no_effect:
        return f"No effect since {knob.no_effect}. {knob.description}"
    return knob.description


def _row(knob: Knob) -> str:
    cells = [f"``{knob.env}``", _literal(knob.default), knob.unit or "",
             bounds_text(knob), "yes" if knob.reloadable else "",
             describe(knob).replace("*", "\\*")]
    first, *rest = cells
    return "   * - " + first + "\n" + "".join(f"     - {c}".rstrip() + "\n" for c in rest)


def render() -> str:
    intro = _INTRO.replace("{bools}", ", ".join(f"``{w}``" for w in TRUE_WORDS + FALSE_WORDS))
    parts = [intro.replace("{max_env_file}", str(MAX_ENV_FILE_BYTES))]
    categories = list(dict.fromkeys(k.category for k in KNOBS))
    for category in categories:
        parts.append(f"\n{category}\n{'-' * len(category)}\n\n")
        parts.append(".. list-table::\n   :header-rows: 1\n   :widths: 26 13 8 15 7 31\n\n"
                     "   * - Variable\n     - Default\n     - Unit\n     - Bounds\n"
                     "     - Reload\n     - Meaning\n")
        parts.extend(_row(k) for k in KNOBS if k.category == category)
    return "".join(parts)


def check(path: Path = DOCS_PATH) -> str:
    """Return a unified diff between the file and the schema ('' when in sync)."""
    return drift(path, render())


def drift(path: Path, generated: str) -> str:
    """A unified diff from the file's text to the generated text ('' when they agree)."""
    current = path.read_text(encoding="utf-8") if path.exists() else ""
    return "".join(difflib.unified_diff(
        current.splitlines(keepends=True), generated.splitlines(keepends=True),
        fromfile=str(path), tofile="generated from the schema"))
