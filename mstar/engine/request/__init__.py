"""What one request is to the engine: its sampling parameters, its sequence state, its outputs,
the limits it is checked against and the errors that refuse it."""
