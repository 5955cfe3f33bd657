"""Building blocks the decoders share: norms, MLPs, mixers, CPU linears and fused ops."""
