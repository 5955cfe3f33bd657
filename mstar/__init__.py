"""mstar: a serving engine for language models.

``LLM`` and ``SamplingParams`` load lazily so that ``import mstar.settings`` and ``mstar config``
never pay for torch or transformers.
"""

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams"]


def __getattr__(name: str):
    if name == "LLM":
        from mstar.llm import LLM
        return LLM
    if name == "SamplingParams":
        from mstar.engine.request.sampling_params import SamplingParams
        return SamplingParams
    raise AttributeError(f"module 'mstar' has no attribute {name!r}")
