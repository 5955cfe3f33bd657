"""The error for a model that cannot be served."""


class ModelError(Exception):
    """The configured model cannot be served; the message names the path, what is wrong, and the fix."""
