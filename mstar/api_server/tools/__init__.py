"""Tool calling on /v1/chat/completions: request models, what reaches the chat template, the
parsers that read calls back out of the model's text, and the grammar that forces a call.

Nothing here is imported until a request uses tools, except the pydantic models (``schema``).
"""
