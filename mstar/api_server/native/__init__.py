"""mstar's own endpoints: POST /generate, /tokenize and /detokenize, GET /v1/config."""
