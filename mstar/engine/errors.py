"""Engine exceptions that callers are expected to handle."""


class RequestRejected(ValueError):
    """A request that can never be served (too long for the model or for the whole KV cache).

    ``param`` names the request field to blame, for a 400 that names it.
    """

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param
