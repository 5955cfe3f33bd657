"""A local image host for the media tests, on 127.0.0.1: /drip/<seconds> sends one byte per
interval (forever), /rate/<bytes per s> sends 4 KiB at that rate, any other path a small PNG;
``most`` counts the connections open at once. Allow it with MSTAR_ALLOWED_MEDIA_DOMAINS=127.0.0.1."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_media_inputs import encoded

PNG = encoded("PNG", (8, 6))


class Host(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.open = self.most = 0
        self.lock = threading.Lock()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        host: Host = self.server
        with host.lock:
            host.open += 1
            host.most = max(host.most, host.open)
        try:
            self._answer()
        except OSError:
            pass  # the fetcher gave up
        finally:
            with host.lock:
                host.open -= 1

    def _answer(self) -> None:
        kind, _, arg = self.path.strip("/").partition("/")
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(PNG) if kind not in ("drip", "rate") else 4096))
        self.end_headers()
        if kind == "drip":
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(float(arg))
        elif kind == "rate":
            for _ in range(4096 // 64):
                self.wfile.write(b"x" * 64)
                self.wfile.flush()
                time.sleep(64 / float(arg))
        else:
            self.wfile.write(PNG)


@pytest.fixture(scope="module", name="host")
def host_fixture():
    """The image host, running; import ``host_fixture`` to use the ``host`` fixture."""
    server = Host()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()
