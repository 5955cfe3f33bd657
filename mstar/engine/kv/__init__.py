"""The paged KV cache: block ids per request (the block manager), the tensors, the hybrid state slots."""
