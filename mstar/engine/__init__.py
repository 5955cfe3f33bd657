"""Inference engine core: scheduler, paged KV cache, model runner and sampler."""
