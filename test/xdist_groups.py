"""How pytest-xdist shares the suite out (scripts/test.sh: ``-n 2 --dist loadfile``).

Each test module runs whole on one worker, so its module-scoped server starts once, as with
``--dist loadfile``; and the modules that use the same session-scoped server (SHARED_SERVERS, of
test/conftest.py) run on the same worker, so that server starts once too. Those groups are the
longest, so they are queued first. xdist's own ``--dist loadgroup`` cannot do this on pytest 9
(it renames node ids, which pytest 9 no longer allows), and its controller sees node ids only:
a module's group is read from its source (a test that uses a fixture names it).

After the groups, the queue is test/cpu-core.txt's order: the modules longest first (as measured
by ``--durations=0`` on a full run), so the two workers run out of work at about the same time.
A new module goes where its duration puts it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

SHARED_SERVERS = ("builtin_server", "builtin_server_bf16", "api_server", "speech_server")


@functools.cache
def shared_server_of(module: Path) -> str | None:
    """The first session server of SHARED_SERVERS the module names, if any."""
    source = module.read_text()
    for name in SHARED_SERVERS:
        if re.search(rf"\b{name}\b", source):
            return name
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServerScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return shared_server_of(config.rootpath / module) or module

    config.option.loadscopereorder = False  # the workers' collection order (below) is the queue's
    return SharedServerScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """In an xdist worker, the modules that share a server come first (a stable sort)."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item) -> int:
        name = shared_server_of(item.path)
        return SHARED_SERVERS.index(name) if name else len(SHARED_SERVERS)

    items.sort(key=rank)
