"""Maps ``config.architectures[0]`` to its entry: the model class (imported only when used), its
walk graph and the features the engine must provide for it. The entry is the one place a model
declares what it takes; nothing here imports torch, so the API server reads it at start."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from mstar.graph import WalkGraph, cross_attention_encoder, text_only, with_encoder
from mstar.graph.speech import CSM, OMNI_TALKER, QWEN3_OMNI

TEXT = text_only()
VISION = with_encoder("vision_encoder", "image", "image_embeds")
# Qwen2-Audio, Voxtral
AUDIO_PLACEHOLDERS = with_encoder("audio_encoder", "audio", "audio_embeds")
AUDIO_CROSS_ATTENTION = cross_attention_encoder("audio_encoder", "audio", "encoder_hidden_states")


@dataclass(frozen=True)
class ModelEntry:
    module: str
    cls: str
    graph: WalkGraph = TEXT
    # An image's tokens attend to each other both ways in prefill (Gemma 3): the attention
    # backend must support it, and a prompt's image runs must fit one step (a preflight check).
    bidirectional_image_attention: bool = False
    # Prompt positions are a per-request table (M-RoPE, Qwen2.5-VL): the model's
    # ``rope_positions(prompt_ids, images)`` gives it.
    rope_position_table: bool = False
    # Qwen3-Omni's thinker: a request may ask for the rows its talker reads
    # (SamplingParams.thinker_rows; mstar.engine.runner.thinker_rows).
    thinker_rows: bool = False
    # The part of the checkpoint's config the model is built from (its sub-config's attribute
    # name; None: the whole config). Qwen3-Omni's talker: ``talker_config``.
    config_part: str | None = None
    # The audio-out walk (Qwen3-Omni: thinker -> talker -> code2wav): the registry entry of the
    # second language-model node, built from the same checkpoint (``mstar.engine.chain``). A
    # request with ``SamplingParams.speaker`` walks it; None: the model speaks no reply.
    talker: str | None = None


def _text(module: str, cls: str) -> ModelEntry:
    return ModelEntry(f"mstar.models.families.{module}", cls)


def _vision(module: str, cls: str, **features: bool) -> ModelEntry:
    return ModelEntry(f"mstar.models.vision.{module}", cls, VISION, **features)


_MODELS = {
    "LlamaForCausalLM": _text("llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": _text("qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": _text("qwen3", "Qwen3ForCausalLM"),
    "Qwen3MoeForCausalLM": _text("qwen3_moe", "Qwen3MoeForCausalLM"),
    "MistralForCausalLM": _text("mistral", "MistralForCausalLM"),
    "Gemma3ForCausalLM": _text("gemma3", "Gemma3ForCausalLM"),
    "Phi3ForCausalLM": _text("phi3", "Phi3ForCausalLM"),
    "Olmo2ForCausalLM": _text("olmo2", "Olmo2ForCausalLM"),
    "SmolLM3ForCausalLM": _text("smollm3", "SmolLM3ForCausalLM"),
    "Qwen3_5ForCausalLM": _text("qwen3_5", "Qwen3_5ForCausalLM"),
    "Idefics3ForConditionalGeneration": _vision("idefics3", "Idefics3ForConditionalGeneration"),
    "SmolVLMForConditionalGeneration": _vision("idefics3", "SmolVLMForConditionalGeneration"),
    "LlavaForConditionalGeneration": _vision("llava", "LlavaForConditionalGeneration"),
    "Qwen2_5_VLForConditionalGeneration": _vision("qwen2_5_vl",
                                                  "Qwen2_5_VLForConditionalGeneration",
                                                  rope_position_table=True),
    "Gemma3ForConditionalGeneration": _vision("gemma3", "Gemma3ForConditionalGeneration",
                                              bidirectional_image_attention=True),
    "Qwen2AudioForConditionalGeneration": ModelEntry(
        "mstar.models.audio.qwen2_audio", "Qwen2AudioForConditionalGeneration",
        AUDIO_PLACEHOLDERS),
    "VoxtralForConditionalGeneration": ModelEntry(
        "mstar.models.audio.voxtral", "VoxtralForConditionalGeneration", AUDIO_PLACEHOLDERS),
    "WhisperForConditionalGeneration": ModelEntry(
        "mstar.models.audio.whisper", "WhisperForConditionalGeneration", AUDIO_CROSS_ATTENTION),
    # Qwen3-Omni: text and audio in, text and audio out (graph.speech's QWEN3_OMNI: audio
    # encoder -> thinker -> talker -> code2wav). Its engine runs the thinker (the graph's first
    # walk); the worker chains the talker (``talker``) and code2wav beside it. No vision encoder
    # node: images are refused by name.
    "Qwen3OmniMoeForConditionalGeneration": ModelEntry(
        "mstar.models.audio.qwen3_omni_thinker", "Qwen3OmniThinker", QWEN3_OMNI,
        thinker_rows=True, talker="Qwen3OmniMoeTalkerForConditionalGeneration"),
    # Speech out: the backbone runs in the engine, its frames stream to the codec node
    # (docs/speech.rst); the depth decoder is the runner's frame head.
    "CsmForConditionalGeneration": ModelEntry(
        "mstar.models.speech.csm_backbone", "CsmBackbone", CSM),
    # Qwen3-Omni's talker by itself: a checkpoint whose config names this architecture; it
    # reads the request's embedding rows and the code predictor is its frame head.
    "Qwen3OmniMoeTalkerForConditionalGeneration": ModelEntry(
        "mstar.models.speech.omni_talker_model", "OmniTalker", OMNI_TALKER,
        config_part="talker_config"),
}
# Sequence-classification heads on decoder families (mstar.models.families.sequence_classification):
# they classify, score and rerank, and generate nothing.
_CLASSIFIERS = {f"{family}ForSequenceClassification": ModelEntry(
    "mstar.models.families.sequence_classification", f"{family}ForSequenceClassification", TEXT)
    for family in ("Llama", "Qwen2", "Qwen3")}
_MODELS |= _CLASSIFIERS


def classifies(architectures: list[str] | None) -> bool:
    """Whether the model is a sequence classifier (no torch import)."""
    return (architectures or [""])[0] in _CLASSIFIERS


def supported_architectures() -> list[str]:
    return sorted(_MODELS)


def entry_for(architectures: list[str] | None) -> ModelEntry:
    """The entry of ``config.architectures`` (its first name); a ValueError names the rest."""
    archs = architectures or []
    if not archs or archs[0] not in _MODELS:
        raise ValueError(
            f"unsupported model architecture {archs[:1] or 'missing'}; "
            f"supported: {', '.join(supported_architectures())}"
        )
    return _MODELS[archs[0]]


def model_entry(config) -> ModelEntry:
    """The entry of a transformers config."""
    return entry_for(getattr(config, "architectures", None))


def accepted_modalities(architectures: list[str] | None) -> tuple[str, ...]:
    """What requests to a model may carry, from its graph (no torch import)."""
    return _graph_of(architectures).modalities()


def output_modalities(architectures: list[str] | None) -> tuple[str, ...]:
    """What a model's graph emits to the client ("text"; "audio" where a codec node emits it),
    no torch import."""
    return _graph_of(architectures).output_modalities()


def speaks_replies(architectures: list[str] | None) -> bool:
    """Whether a request may ask for its reply spoken (``SamplingParams.speaker``): the entry
    names a talker (``ModelEntry.talker``, Qwen3-Omni: the worker runs the chained walk), so its
    speech is a chat reply; a model whose graph emits audio and names no talker (CSM) speaks
    its own frames from a turn of its own. No torch import: the API server asks it."""
    try:
        return entry_for(architectures).talker is not None
    except ValueError:
        return False


def _graph_of(architectures: list[str] | None) -> WalkGraph:
    """The architecture's walk graph; an unknown one's is text only (its worker refuses it at
    start, by name)."""
    try:
        return entry_for(architectures).graph
    except ValueError:
        return TEXT


def node_config(config, architecture: str | None = None):
    """The config the architecture's model is built from: ``config``, or its part the entry
    names (``config_part``), which takes ``config``'s architectures. ``architecture``: another
    entry's node in the same checkpoint (a chained walk's talker); None: the config's own."""
    if architecture is not None:
        config.architectures = [architecture]
    part = model_entry(config).config_part
    if part is None:
        return config
    sub = getattr(config, part)
    sub.architectures = config.architectures
    return sub


def get_model_class(config) -> type:
    entry = model_entry(config)
    return getattr(importlib.import_module(entry.module), entry.cls)
