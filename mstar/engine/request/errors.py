"""Engine exceptions that callers are expected to handle."""


class RequestRejected(ValueError):
    """A request that can never be served (too long for the model or for the whole KV cache).

    ``param`` names the request field to blame, for a 400 that names it; ``status`` is the HTTP
    status the API answers (400, or 408 for a grammar that did not compile in time).
    """

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status
