"""Engine exceptions that callers are expected to handle."""


class RequestRejected(ValueError):
    """A request that can never be served (too long for the model or for the whole KV cache)."""
