"""What one CSM utterance is asked as, with no torch import: one rule for ``Voice`` (offline,
``LLM.speak``) and the API server's ``/v1/audio/speech``, which builds the prompt there."""

from __future__ import annotations

# Frames a request may make when it names no bound; Mimi makes 12.5 a second, so 30 s.
DEFAULT_MAX_FRAMES = 375
# The speaker ids a request may name (CSM's turn ``[speaker]text``; its checkpoints are trained
# on conversations with few speakers, 0 and 1 mostly): ``voice`` "0" .. "9".
CSM_SPEAKERS = 10


def csm_turn(text: str, speaker: int) -> str:
    """CSM's prompt text for ``text`` said by ``speaker``."""
    return f"[{speaker}]{text}"


def check_max_frames(max_frames: int) -> None:
    if max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, not {max_frames}")
