"""The knob groups WorkerSettings is made of, one file per concern (see mstar.settings.schema)."""
