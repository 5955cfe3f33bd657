"""Who a request is: its presented key matched against MSTAR_API_KEY (a single admin key) and the
keys file's hashed keys, and whether that identity's scopes cover the path.

Every comparison is constant-time (``hmac.compare_digest``) and every stored key is compared, so
the time taken says nothing about which key, or how much of one, matched. The keys file stores
only ``sha256:<hex>`` of each key; the presented key is hashed the same way before comparing.
"""

from __future__ import annotations

import hashlib
import hmac

from mstar.api_server.context.caller import ADMIN, ANONYMOUS_IDENTITY, Identity
from mstar.settings import WorkerSettings
from mstar.settings.keys_file import HASH_PREFIX, KeyTable

# the admin scope's routes (reload is SIGHUP); /v1/admin/: loading and unloading models
ADMIN_PATHS = ("/v1/config", "/v1/admin/")
ANY_SCOPE_PATHS = frozenset({"/v1/models", "/metrics", "/openapi.json"})
ANY_SCOPE_PREFIX = "/v1/models/"


def bearer_token(authorization: bytes) -> bytes | None:
    """The credentials of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    scheme, _, token = authorization.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else None


def presented_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The API key a request presents: ``Authorization: Bearer <key>`` (OpenAI's clients) or
    ``x-api-key: <key>`` (Anthropic's)."""
    given = bearer_token(headers.get(b"authorization", b""))
    if given is None and b"x-api-key" in headers:
        given = headers[b"x-api-key"].strip()
    return given


def identify(headers: dict[bytes, bytes], settings: WorkerSettings,
             keys: KeyTable | None) -> Identity | None:
    """The identity of the presented key; None when authentication is on and no key matches.
    Without MSTAR_API_KEY and a keys file, every request is ``ANONYMOUS_IDENTITY``."""
    admin = settings.api_key
    if admin is None and keys is None:
        return ANONYMOUS_IDENTITY
    given = presented_key(headers)
    if given is None:
        return None
    found = None
    if keys is not None:
        digest = (HASH_PREFIX + hashlib.sha256(given).hexdigest()).encode()
        for key in keys.keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, key.hash.encode()):
                found = Identity.of(key)
    if admin is not None and hmac.compare_digest(given, admin.get_secret_value().encode()):
        found = ADMIN
    return found


def required_scope(path: str) -> str | None:
    """The scope a path needs (None: any authenticated key may read it)."""
    if path.startswith(ADMIN_PATHS):
        return "admin"
    if path in ANY_SCOPE_PATHS or path.startswith(ANY_SCOPE_PREFIX):
        return None
    return "inference"
