"""LoRA adapters on the base model, many per step (docs/lora.rst).

``adapter``: reads a PEFT adapter and maps it onto the model's (fused) linears. ``linear``: the
LoRA-capable linear wrapped around each projection, with its device slots. ``slots``: which
adapter sits in which slot (LRU), and each step's token groups.
"""
