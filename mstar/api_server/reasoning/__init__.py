"""Reasoning output (``<think>...</think>``) on /v1/chat/completions: which models think and how a
request switches it (``plan``), splitting it out of the text into ``reasoning_content``
(``split``), and holding structured output and tool grammars to the text after it (``grammar``).

Public for other routes: ``plan.reasoning_plan`` / ``plan.request_reasoning_plan``,
``split.ReasoningStream`` / ``split.split_reasoning`` and ``grammar.after_reasoning``.
"""
