"""From a model setting to a loaded model: resolution, the built-in model, safetensors and GGUF
loading, the architecture registry."""
