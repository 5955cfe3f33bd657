"""The model runner and what it owns: the persistent input batch, compilation, pooling, the encoder cache."""
