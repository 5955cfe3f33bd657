"""Checks of a whole configuration before anything loads, from files only (no torch): preflight,
the speculative-decoding methods, the image budget."""
