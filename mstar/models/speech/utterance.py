"""What one CSM utterance is asked as, with no torch import: one rule for ``Voice`` (offline,
``LLM.speak``) and the API server's ``/v1/audio/speech``, which builds the prompt there."""

from __future__ import annotations

from mstar.settings.knobs.media import DEFAULT_SPEECH_SECONDS

# CSM's codec (Mimi) makes 12.5 frames a second: the seconds bound (MSTAR_MAX_SPEECH_SECONDS)
# in frames, where the API server has no model config to read it from.
FRAMES_PER_SECOND = 12.5
# The speaker ids a request may name (CSM's turn ``[speaker]text``; its checkpoints are trained
# on conversations with few speakers, 0 and 1 mostly): ``voice`` "0" .. "9".
CSM_SPEAKERS = 10


def csm_turn(text: str, speaker: int) -> str:
    """CSM's prompt text for ``text`` said by ``speaker``."""
    return f"[{speaker}]{text}"


def frames_in(seconds: float) -> int:
    """The whole frames in ``seconds`` of audio (at least one)."""
    return max(1, int(seconds * FRAMES_PER_SECOND))


# Frames an offline request makes when it names no bound (the seconds knob's default: 375).
DEFAULT_MAX_FRAMES = frames_in(DEFAULT_SPEECH_SECONDS)


def check_max_frames(max_frames: int) -> None:
    if max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, not {max_frames}")
