"""The browser pages: the playground at ``/`` and the operator's page at ``/operator``, plain HTML,
CSS and JavaScript from ``static/`` (no build step, nothing from a CDN). MSTAR_PLAYGROUND=off
serves neither.

The pages are static and hold no data, so they load without the API key: ``PagesMiddleware`` sits
outside the admission middleware, answers only GET/HEAD of the exact paths below, and counts
nothing. Every API call the pages make goes through admission like any client's and carries the key
the user typed into the page (kept in the tab's sessionStorage). A strict Content-Security-Policy
(scripts and styles from this server only, no inline script) backs the pages' own rule: whatever
they render (model output included) is set as text, never parsed as HTML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC = Path(__file__).parent / "static"
PAGES = {"/": "playground.html", "/operator": "operator.html"}
ASSET_PREFIX = "/ui/"  # every other file of static/: /ui/<name>
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self' data: blob:; media-src 'self' data: blob:; base-uri 'none'; "
       "form-action 'none'; frame-ancestors 'none'")


def page_files(static: Path = STATIC) -> dict[str, Path]:
    """URL path -> file: the two pages, and each other file of ``static`` under ASSET_PREFIX."""
    files = {url: static / name for url, name in PAGES.items()}
    pages = set(PAGES.values())
    files.update({ASSET_PREFIX + p.name: p for p in sorted(static.iterdir())
                  if p.suffix in CONTENT_TYPES and p.name not in pages})
    return files


def _headers(path: Path, size: int) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", CONTENT_TYPES[path.suffix].encode()),
            (b"content-length", str(size).encode()),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
            (b"content-security-policy", CSP.encode())]


class PagesMiddleware:
    """Answers GET and HEAD of the pages' paths from memory (the files are read once, at start);
    passes everything else on."""

    def __init__(self, app: Any, files: dict[str, Path]) -> None:
        self.app = app
        self.pages = {url: path.read_bytes() for url, path in files.items()}
        self.headers = {url: _headers(path, len(self.pages[url])) for url, path in files.items()}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path")
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD") or path not in self.pages:
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": self.headers[path]})
        body = self.pages[path] if scope["method"] == "GET" else b""
        await send({"type": "http.response.body", "body": body})
