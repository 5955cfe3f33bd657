"""From a validated request to engine outputs, in no API's shapes: prompts (``prompts``,
``image_prompt``), sub-requests and their run (``run``), what each choice accumulates
(``choice``), the messaging to the engine processes (``engine_client``) and the facade the routes
call (``facade.Generation``). Nothing here imports an API package (openai, anthropic, ...)."""
