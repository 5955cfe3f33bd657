"""The walk graph as the engine's one capability declaration: its vocabulary (node and edge
kinds, room for several language models and loops), the registry entries that carry it (no torch
import), what is derived from it (modalities, content-part types, a request's prefill walk and
its checks, the runner's encoder nodes), and media parts on the wire and in block hashes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.walks import part_nodes
from mstar.graph import Edge, EdgeKind, Node, NodeKind, Walk, WalkGraph, text_only
from mstar.graph.chunks import every_token, frame_windows
from mstar.graph.walk_graph import Emit, cross_attention_encoder, with_encoder
from mstar.models.audio.inputs import AudioInput
from mstar.models.loading.registry import (
    AUDIO_CROSS_ATTENTION,
    AUDIO_PLACEHOLDERS,
    VISION,
    accepted_modalities,
    entry_for,
    supported_architectures,
)
from mstar.models.vision.inputs import ImageInput


def _audio(key: str, positions=()) -> AudioInput:
    return AudioInput(key, {"input_features": torch.ones(1, 2, 3)}, tuple(positions), 0.5)


def _image(key: str, positions) -> ImageInput:
    return ImageInput(key, {"pixel_values": torch.ones(1, 3)}, tuple(positions))


def test_edges_say_what_they_carry():
    assert VISION.edge_from("vision_encoder").kind is EdgeKind.PLACEHOLDER_EMBEDDINGS
    assert AUDIO_PLACEHOLDERS.edge_from("audio_encoder").kind is EdgeKind.PLACEHOLDER_EMBEDDINGS
    whisper = cross_attention_encoder()
    assert whisper == AUDIO_CROSS_ATTENTION
    assert whisper.edge_from("audio_encoder").kind is EdgeKind.CROSS_ATTENTION
    assert whisper.modalities() == ("text", "audio")
    assert whisper.prefill_walk({"text", "audio"}).nodes == ("audio_encoder", "language_model")
    assert whisper.encoder_for("audio").name == "audio_encoder"
    with pytest.raises(KeyError, match="no encoder takes 'image'"):
        whisper.encoder_for("image")


def test_the_data_leaves_room_for_several_language_models_and_loops():
    """A talker after the thinker and a codec after it, the walk looping back to the talker until
    its finish signal: the structure holds it; the engine runs the first walk's first language
    model (``language_model``), the chain the later ones (test_speech_graph.py has the rules)."""
    thinker = Node("thinker", NodeKind.LANGUAGE_MODEL)
    talker = Node("talker", NodeKind.LANGUAGE_MODEL)
    codec = Node("codec", NodeKind.CODEC)
    graph = WalkGraph(
        (thinker, talker, codec),
        (Edge("hidden", "thinker", "talker", EdgeKind.STREAM, every_token()),
         Edge("codes", "talker", "codec", EdgeKind.STREAM, frame_windows(4, 2)),
         Edge("audio", "codec", "talker")),
        (Walk("speak", ("thinker", "talker", "codec", "talker", "codec"), finish="talker"),),
        (Emit("thinker", "text"), Emit("codec", "audio")))
    assert [n.name for n in graph.language_models] == ["thinker", "talker"]
    assert graph.language_model.name == "thinker"
    image = Node("image", NodeKind.ENCODER, "image")
    with pytest.raises(ValueError, match="visits no language model"):
        WalkGraph((thinker, image), (Edge("x", "image", "image"),), (Walk("w", ("image",)),))
    with pytest.raises(ValueError, match="same modality"):
        WalkGraph((thinker, image, Node("image2", NodeKind.ENCODER, "image")), (), ())


def test_registry_entries_carry_graphs_and_modalities_come_from_them():
    assert accepted_modalities(["LlamaForCausalLM"]) == ("text",)
    assert accepted_modalities(["LlavaForConditionalGeneration"]) == ("text", "image")
    for arch in ("Qwen2AudioForConditionalGeneration", "VoxtralForConditionalGeneration",
                 "WhisperForConditionalGeneration"):
        assert accepted_modalities([arch]) == ("text", "audio")
    assert accepted_modalities(["NoSuchModel"]) == accepted_modalities(None) == ("text",)
    whisper = entry_for(["WhisperForConditionalGeneration"])
    assert (whisper.module, whisper.cls) == ("mstar.models.audio.whisper",
                                             "WhisperForConditionalGeneration")
    assert entry_for(["Gemma3ForConditionalGeneration"]).bidirectional_image_attention
    assert entry_for(["Qwen2_5_VLForConditionalGeneration"]).rope_position_table
    flagged = [a for a in supported_architectures()
               if entry_for([a]).bidirectional_image_attention or entry_for([a]).rope_position_table]
    assert flagged == ["Gemma3ForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"]
    with pytest.raises(ValueError, match="unsupported model architecture"):
        entry_for(["NoSuchModel"])


def test_the_registry_imports_no_torch():
    code = ("import sys, mstar.models.loading.registry as r, mstar.api_server.media.model; "
            "r.accepted_modalities(['Qwen2AudioForConditionalGeneration']); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_prefill_walk_checks_each_part_against_its_edge():
    assert part_nodes(AUDIO_PLACEHOLDERS, (_audio("a", [3, 4]),)) == ("audio_encoder",)
    assert part_nodes(AUDIO_CROSS_ATTENTION, (_audio("a"),)) == ("audio_encoder",)
    assert part_nodes(VISION, (_image("i", [1]), _image("j", [2]))) == ("vision_encoder",) * 2
    assert part_nodes(text_only(), ()) == ()
    cases = [(text_only(), (_audio("a", [1]),), "takes text; not audio"),
             (VISION, (_audio("a", [1]),), "takes text, image; not audio"),
             (AUDIO_PLACEHOLDERS, (_image("i", [1]),), "not image"),
             (AUDIO_PLACEHOLDERS, (_audio("a"),), r"part 0 \(audio\) must have placeholder"),
             (AUDIO_CROSS_ATTENTION, (_audio("a", [2]),), "must have no placeholder")]
    for graph, parts, message in cases:
        with pytest.raises(RequestRejected, match=message) as err:
            part_nodes(graph, parts)
        assert err.value.param == "messages"


def test_the_runner_takes_encoder_nodes_by_the_graphs_names():
    from mstar.engine.runner.encoder_cache import EncoderCache
    from mstar.engine.runner.encoder_nodes import EncoderNodes
    from mstar.engine.schedule.scheduler_output import EncoderCounts

    class Model:
        def __init__(self, nodes):
            self.nodes = nodes

        def encoder_nodes(self):
            return self.nodes

    cache = EncoderCache(1 << 20, torch.device("cpu"))
    rows = EncoderNodes(AUDIO_PLACEHOLDERS, Model({"audio_encoder": lambda t: torch.ones(2, 4)}),
                        cache)
    counts = EncoderCounts()
    assert rows.output(_audio("a", [5, 6]), "audio_encoder", counts).shape == (2, 4)
    assert counts.misses == 1
    assert rows.feeds == {"audio_encoder": EdgeKind.PLACEHOLDER_EMBEDDINGS}
    with pytest.raises(ValueError, match=r"encoder nodes \['vision_encoder'\] are not"):
        EncoderNodes(AUDIO_PLACEHOLDERS, Model({"vision_encoder": None}), cache)
    assert EncoderNodes(text_only(), None, cache).calls == {}  # a text model is never asked


def test_media_parts_condition_the_blocks_they_touch():
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.engine.request.sequence import Sequence

    placed = Sequence("r", list(range(12)), SamplingParams(), None,
                      parts=(_image("i", [1, 2]), _audio("a", [6, 7, 8])),
                      part_nodes=("vision_encoder", "audio_encoder"))
    assert placed.part_hashes_in(0, 4) == ("i",)
    assert placed.part_hashes_in(4, 8) == ("a",)
    assert placed.part_hashes_in(9, 12) == ()
    memory = Sequence("w", list(range(12)), SamplingParams(), None, parts=(_audio("m"),),
                      part_nodes=("audio_encoder",))
    assert all(memory.part_hashes_in(s, s + 4) == ("m",) for s in (0, 4, 8))  # every block


def test_an_audio_part_crosses_the_wire_typed_and_checked():
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.ipc import messages as m
    from mstar.ipc.inbox_checks import InboxBounds, Invalid, check
    from mstar.prompt.value import Prompt
    from mstar.settings import WorkerSettings

    audio = AudioInput("h2", {"input_features": torch.arange(6.0).view(1, 2, 3),
                              "feature_attention_mask": torch.ones(1, 3, dtype=torch.int32)},
                       (1, 2), 1.25)
    image = _image("h1", [3])
    sent = m.AddRequest.of("r", Prompt([7, 9, 9, 8, 5], (audio, image)), SamplingParams())
    back = m.decode(m.encode(sent))
    bounds = dataclasses.replace(InboxBounds.of(WorkerSettings()), vocab_size=16,
                                 max_model_len=64)
    check(back, bounds)
    got_audio, got_image = back.prompt().parts
    assert isinstance(got_audio, AudioInput) and isinstance(got_image, ImageInput)
    assert (got_audio.content_hash, got_audio.positions, got_audio.seconds) == ("h2", (1, 2), 1.25)
    for name, tensor in audio.tensors.items():
        assert torch.equal(got_audio.tensors[name], tensor)
    bad = m.decode(m.encode(m.AddRequest.of(
        "r", Prompt([7, 9, 9], (AudioInput("h", {}, (1,), float("nan")),)), SamplingParams())))
    with pytest.raises(Invalid, match="parts.0.seconds"):
        check(bad, bounds)


def test_the_api_admits_the_part_types_of_the_graph():
    from mstar.api_server.context.running import RunningSettings
    from mstar.api_server.context.served import ServedModel
    from mstar.settings import WorkerSettings

    running = RunningSettings(WorkerSettings())
    audio = ServedModel("m", 64, running, AUDIO_PLACEHOLDERS.modalities())
    assert audio.part_types == ("text", "input_audio") and audio.takes("audio")
    assert not audio.takes_images
    assert ServedModel("m", 64, running, VISION.modalities()).part_types == ("text", "image_url")
    assert ServedModel("m", 64, running).part_types == ("text",)


def test_model_media_loads_an_audio_models_processor(tmp_path, tiny_tokenizer):
    import json

    import transformers as tf

    from mstar.api_server.media.model import model_media

    processor = tf.Qwen2AudioProcessor(feature_extractor=tf.WhisperFeatureExtractor(),
                                       tokenizer=tiny_tokenizer)
    processor.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen2AudioForConditionalGeneration"], "model_type": "qwen2_audio"}))
    media = model_media(tmp_path)
    assert media.modalities == ("text", "audio")
    assert media.processor.feature_extractor.sampling_rate == 16_000
    with_encoder("x", "audio", "t")  # the factory makes the same shape for any modality


def test_the_encoder_budget_is_per_node():
    """An image and a clip starting in one chunk: each spends its own node's budget, so the
    vision node's spent budget does not hold back the audio node's clip."""
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.engine.request.sequence import Sequence
    from mstar.engine.schedule.image_cuts import encoder_cut

    seq = Sequence("r", list(range(20)), SamplingParams(), None,
                   parts=(_image("i", range(2, 6)), _audio("a", range(8, 14))),
                   part_nodes=("vision_encoder", "audio_encoder"))
    assert encoder_cut(seq, 0, 20, {}, 6) == (20, {"vision_encoder": 4, "audio_encoder": 6})
    # vision has 1 row left: the image waits, the chunk stops before it
    assert encoder_cut(seq, 0, 20, {"vision_encoder": 1}, 6) == (2, {})
    # audio has 5 rows left (not fresh): the clip waits, the image runs
    assert encoder_cut(seq, 0, 20, {"audio_encoder": 5}, 6) == (8, {"vision_encoder": 4})
    # a node's first part larger than its whole budget still runs
    assert encoder_cut(seq, 6, 14, {}, 3) == (14, {"audio_encoder": 6})
