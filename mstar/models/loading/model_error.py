"""The error for a model that cannot be served."""


class ModelError(Exception):
    """The configured model cannot be served; the message names the path, what is wrong, and the fix."""

    exit_code = 1  # of `mstar serve`


class HubModelError(ModelError):
    """A Hugging Face hub id that is neither cached nor downloadable (``hub``): a usage error."""

    exit_code = 2
