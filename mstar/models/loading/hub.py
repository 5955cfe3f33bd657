"""Hugging Face hub ids as models: ``org/name``, ``org/name@revision`` and a chosen GGUF file,
``org/name/file.gguf[@revision]``, resolved through ``huggingface_hub`` to a local snapshot.

Only what serving reads is downloaded (``SERVING_FILES``: config, tokenizer, safetensors weights,
processor and sentence-transformers pooling files; for a GGUF id that one file), into the hub
cache under MSTAR_HF_HOME (HF_HOME) in huggingface_hub's own layout, with its progress bars.

The cache is read first: an id already there is served without asking the hub (so every worker
process, which resolves the model again, finds what the server process downloaded). Only an id
not (completely) cached is downloaded, unless MSTAR_HF_HUB_OFFLINE (HF_HUB_OFFLINE) is set. An id
neither cached nor reachable is a ``HubModelError`` naming the id and the cache directory.
Every Hugging Face setting comes from the settings (MSTAR_HF_*, which also read HF_TOKEN, HF_HOME,
HF_HUB_OFFLINE and HF_ENDPOINT): nothing here reads the environment.

A path that exists locally is never a hub id: ``./org/name`` or an existing ``org/name``
directory is served as the directory it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mstar.models.loading.model_error import HubModelError, ModelError

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

SERVING_FILES = [
    "config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
    "modules.json", "1_Pooling/config.json",
]
CONFIG_FILE = "config.json"
_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:/(?P<gguf>[\w./-]+\.gguf))?"
                 r"(?:@(?P<revision>[\w./-]+))?")


@dataclass(frozen=True)
class HubId:
    repo: str
    revision: str | None = None
    gguf: str | None = None  # a GGUF file in the repository, served instead of safetensors

    def __str__(self) -> str:
        file = f"/{self.gguf}" if self.gguf else ""
        return f"{self.repo}{file}" + (f"@{self.revision}" if self.revision else "")


def hub_id(model: str) -> HubId | None:
    """The hub id ``model`` names, or None (a local path, the built-in model, anything else)."""
    if Path(model).expanduser().exists():
        return None
    found = _ID.fullmatch(model)
    if found is None or ".." in model:
        return None
    return HubId(found["repo"], found["revision"], found["gguf"])


def served_name(model: str) -> str:
    """The name a model is served as: a hub id's repository (``org/name``, as users name it),
    else the file or directory's name."""
    hub = hub_id(model)
    return hub.repo if hub is not None else Path(model).name


def hub_cache(settings: WorkerSettings) -> Path:
    """Where hub ids are cached: MSTAR_HF_HOME/hub (huggingface_hub's layout)."""
    home = settings.hf_home or Path("~/.cache/huggingface")
    return Path(home).expanduser() / "hub"


def _options(settings: WorkerSettings) -> dict[str, Any]:
    token = settings.hf_token.get_secret_value() if settings.hf_token is not None else None
    return {"cache_dir": hub_cache(settings), "endpoint": settings.hf_endpoint, "token": token}


def _fetch(hub: HubId, settings: WorkerSettings, files: list[str] | None,
           local: bool) -> Path:
    """The snapshot folder (or, for a GGUF id, the file) of ``hub``: from the cache only
    (``local``) or downloaded. ``files``: the patterns to fetch (None: SERVING_FILES)."""
    from huggingface_hub import hf_hub_download, snapshot_download

    options = {**_options(settings), "revision": hub.revision, "local_files_only": local}
    if hub.gguf is not None and files is None:
        return Path(hf_hub_download(hub.repo, hub.gguf, **options))
    return Path(snapshot_download(hub.repo, allow_patterns=files or SERVING_FILES, **options))


def _not_available(hub: HubId, settings: WorkerSettings, why: str) -> HubModelError:
    where = f"the Hugging Face cache {str(hub_cache(settings))!r}"
    if settings.hf_hub_offline:
        return HubModelError(f"model {str(hub)!r} is not in {where}, and MSTAR_HF_HUB_OFFLINE "
                             "(HF_HUB_OFFLINE) forbids downloading it; download it once online, "
                             f"or set MSTAR_HF_HOME to the cache that holds it ({why})")
    return HubModelError(f"model {str(hub)!r} is neither in {where} nor downloadable from "
                         f"{settings.hf_endpoint}: {why}")


def resolve_hub(hub: HubId, settings: WorkerSettings,
                validate: Callable[[Path], Path]) -> Path:
    """The local path of ``hub``, checked by ``validate`` (a model directory or GGUF check): the
    cached copy when it passes, else a download (online only)."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return validate(_fetch(hub, settings, None, local=True))
    except (LocalEntryNotFoundError, ModelError) as exc:
        if settings.hf_hub_offline:
            raise _not_available(hub, settings, _reason(exc)) from None
    try:
        path = _fetch(hub, settings, None, local=False)
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
        raise _not_available(hub, settings, _reason(exc)) from None
    return validate(path)


def hub_config(hub: HubId, settings: WorkerSettings) -> Path:
    """Only the config.json of ``hub`` (``mstar config validate --model``): cached, or
    downloaded alone."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    for local in (True, False):
        if not local and settings.hf_hub_offline:
            break
        try:
            found = _fetch(hub, settings, [CONFIG_FILE], local) / CONFIG_FILE
        except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as exc:
            why = _reason(exc)
            continue
        if found.is_file():
            return found
        why = "the snapshot has no config.json"
    raise _not_available(hub, settings, why)


def _reason(exc: BaseException) -> str:
    """The first line of an error, for a message of one line."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
