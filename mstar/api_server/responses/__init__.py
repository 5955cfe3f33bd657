"""OpenAI's Responses API (POST /v1/responses), served by translating each request into a chat
request: one generation path for every API."""
