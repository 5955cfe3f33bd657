"""Model families: one decoder per file, each token-exact with transformers."""
