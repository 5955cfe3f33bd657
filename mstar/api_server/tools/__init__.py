"""Tool calling on /v1/chat/completions: request models, what reaches the chat template, the
parsers that read calls back out of the model's text (hermes, llama3_json, mistral, pythonic,
qwen3_coder; ``registry``), and the grammars that constrain calls (``grammar``, planned by
``plan``, with response_format where both are given).

Nothing here is imported until a request uses tools, except the pydantic models (``schema``).
"""
