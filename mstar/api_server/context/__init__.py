"""The lowest layer of the API server: what one running server knows, each datum with one owner.
``running`` (the settings, replaced only by a reload), ``served`` (the served model: names, length,
modalities), ``admission`` (the in-flight count and the draining flag) and ``metrics``."""
