"""Vision-language models: stateless image encoders feeding mstar's paged language models."""
