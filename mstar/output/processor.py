"""Engine outputs (token ids) -> text outputs: incremental detokenization and stop strings.

The engine deals in token ids only; this runs where the text is wanted (the API server, on its
event loop as each batch arrives; ``mstar.LLM``, in process). A stop string ends the request here: the output
that completes it is the last one handed out, cut before the stop string, and the caller aborts
the request in the engine (``ends_in_engine``). Outputs the engine still sends for a request that
ended here are dropped.
"""

from __future__ import annotations

from mstar.engine.request.outputs import RequestOutput
from mstar.engine.request.sampling_params import SamplingParams
from mstar.output.detokenizer import IncrementalDetokenizer


class TextOutput(RequestOutput, array_like=True):
    """An engine output with its text delta (never any part of a stop string)."""

    new_text: str = ""


class RequestText:
    """One live request's text state; only the thread that turns its outputs into text writes it."""

    def __init__(self, tokenizer, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self.detokenizer = IncrementalDetokenizer(tokenizer, params.stop, prompt_token_ids)
        self.ended = False  # its last output was handed out

    def to_text(self, out: RequestOutput) -> TextOutput | None:
        """The output with its text; None once the request ended."""
        if self.ended:
            return None
        tokens = out.new_token_ids
        kept, text_count = len(tokens), text_tokens(out)
        stopped = False
        for k, token in enumerate(tokens[:text_count]):
            if self.detokenizer.append(token):
                kept = text_count = k + 1
                stopped = True
                break
        finished = out.finished or stopped
        self.ended = finished
        logprobs = out.logprobs[:text_count] if out.logprobs is not None else None
        return TextOutput(
            request_id=out.request_id, new_token_ids=tokens[:kept], finished=finished,
            finish_reason="stop" if stopped else out.finish_reason,
            num_prompt_tokens=out.num_prompt_tokens,
            num_output_tokens=out.num_output_tokens - (len(tokens) - kept), logprobs=logprobs,
            num_cached_tokens=out.num_cached_tokens, embedding=out.embedding,
            no_speech_prob=out.no_speech_prob, new_audio=out.new_audio,
            new_text=self.detokenizer.take_delta(finished=finished))


def text_tokens(out: RequestOutput) -> int:
    """How many of an output's tokens make its text (and have logprobs, whose ``bytes`` then join
    to the text): all but the stop token (EOS, or one of ``stop_token_ids``) the engine ended the
    request on. That token still counts as output (``num_output_tokens``: usage)."""
    on_stop_token = out.finished and out.finish_reason == "stop" and out.new_token_ids
    return len(out.new_token_ids) - 1 if on_stop_token else len(out.new_token_ids)


def ends_in_engine(text: TextOutput, out: RequestOutput) -> bool:
    """Whether a stop string ended a request the engine still runs (so it must be aborted)."""
    return text.finished and not out.finished


def to_texts(work: list[tuple[RequestText, RequestOutput]]) -> list[TextOutput | None]:
    """Each (request, output) pair's text output, in order; one call per received batch."""
    return [request.to_text(out) for request, out in work]
