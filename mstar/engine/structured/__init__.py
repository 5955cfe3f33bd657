"""Structured output: grammar limits, the compile pool, the per-request matcher."""
