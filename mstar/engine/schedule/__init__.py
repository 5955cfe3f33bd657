"""The scheduler, the immutable step plan it emits, and the overlap policy."""
