"""The tool-call parsers (one model format per file), what they yield, and the registry that picks one."""
