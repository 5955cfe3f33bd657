"""A small Hugging Face hub on loopback (``HF_ENDPOINT``), serving one repository's files at one
commit, so that the download path of hub ids (mstar.models.loading.hub) runs in CI without the
network. It answers what huggingface_hub asks while downloading: the revision's info, the file
tree, and each file (HEAD for its metadata, then GET). ``requested`` keeps every file path GET,
``authorizations`` every request's path and Authorization header (None when it had none)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class HubServer:
    def __init__(self, repo: str, files: dict[str, bytes]) -> None:
        self.repo, self.files = repo, files
        self.requested: list[str] = []
        self.authorizations: list[tuple[str, str | None]] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @classmethod
    def of_dir(cls, repo: str, model_dir: Path, extra: dict[str, bytes]) -> HubServer:
        """The files of a model directory, and ``extra`` ones (what serving must not fetch)."""
        files = {p.relative_to(model_dir).as_posix(): p.read_bytes()
                 for p in sorted(model_dir.rglob("*")) if p.is_file()}
        return cls(repo, {**files, **extra})

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self
        info = re.compile(rf"/api/models/{re.escape(hub.repo)}/revision/[^/]+")
        tree = re.compile(rf"/api/models/{re.escape(hub.repo)}/tree/[^/?]+")
        resolve = re.compile(rf"/{re.escape(hub.repo)}/resolve/[^/]+/(?P<path>.+)")

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, body) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _file(self, send_body: bool) -> None:
                found = resolve.fullmatch(self.path.split("?")[0])
                data = hub.files.get(found["path"]) if found else None
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if send_body:
                    hub.requested.append(found["path"])
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if send_body:
                    self.wfile.write(data)

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
                hub.authorizations.append((self.path, self.headers.get("Authorization")))
                self._file(False)

            def do_GET(self) -> None:  # noqa: N802
                hub.authorizations.append((self.path, self.headers.get("Authorization")))
                path = self.path.split("?")[0]
                if info.fullmatch(path):
                    self._json({"id": hub.repo, "modelId": hub.repo, "sha": COMMIT,
                                "private": False,
                                "siblings": [{"rfilename": f} for f in hub.files]})
                elif tree.match(path):
                    self._json([{"type": "file", "path": f, "size": len(d),
                                 "oid": hashlib.sha1(d).hexdigest()}
                                for f, d in hub.files.items()])
                else:
                    self._file(True)

        return Handler
