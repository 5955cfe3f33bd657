"""A request's prompt as one value (token ids and typed media parts), and the OpenAI-message
parsing of media parts that the offline API (``mstar.LLM``) and the API server share.

It sits above ``models`` (a part is a model's encoder input) and below ``llm``, ``ipc`` and
``api_server``, which carry the value; it imports neither torch nor transformers at import time.
"""
