"""Whether the server takes new requests: the one owner of the in-flight count and the draining
flag. The middleware counts requests in and out; ``server.serve`` drains; /health and the
middleware ask ``unavailable_reason``."""

from __future__ import annotations

from collections.abc import Callable


class Admission:
    def __init__(self, failure: Callable[[], str | None]) -> None:
        self._failure = failure  # the engine client's fault, if it has one (it owns it)
        self._in_flight = 0
        self._draining = False

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def enter(self) -> None:
        self._in_flight += 1

    def leave(self) -> None:
        self._in_flight -= 1

    def drain(self) -> None:
        """From now on new requests are refused (503)."""
        self._draining = True

    def unavailable_reason(self) -> str | None:
        """Why new generation requests are refused right now, if they are."""
        failure = self._failure()
        if failure is not None:
            return f"server is stopping after a fault: {failure}"
        if self._draining:
            return "server is shutting down"
        return None
