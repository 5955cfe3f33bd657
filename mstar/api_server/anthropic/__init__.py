"""Anthropic's Messages API (POST /v1/messages), served by translating each request into a chat
request: one generation path for every API. Errors on this route take Anthropic's shape."""
