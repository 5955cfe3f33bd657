"""The output path above the engine: token ids in, text out.

Incremental detokenization, stop strings and the exact bytes of each token live here, so the
engine deals in token ids only. Both the API server (``mstar.api_server.generation``) and the
offline ``mstar.LLM`` use it; it sits right above ``engine`` in the import layers.
"""
