"""Weight-only quantized linear layers for CPU (MSTAR_QUANTIZATION)."""
