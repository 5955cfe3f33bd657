"""OpenAI-compatible endpoints: request bodies, routes, response models and response formatting."""
