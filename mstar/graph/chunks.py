"""How a streaming edge cuts what its source makes into what its target takes: a chunk policy.

Two shapes cover the reference system:

- **every token** (thinker -> talker): each new token goes on at once, with its last hidden
  state when the target conditions on it (``with_hidden``);
- **N frames with L frames of left context** (talker or backbone -> codec): a codec decoder
  sounds right only with the frames just before the ones it decodes, so each chunk decodes
  ``L + N`` frames and keeps the samples of the last ``N``. At the source's finish signal the
  frames left over go as one shorter chunk.

The policy is data; ``windows`` is its one rule, a pure function of how many frames were sent,
how many exist and whether the source finished, so the stream's state is two integers and the
frames the next window still needs (at most ``left_context + frames``: the codec node's bounded
per-request state).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Decode frames ``[context_start, end)``; keep what frames ``[start, end)`` make."""

    context_start: int
    start: int
    end: int

    @property
    def context(self) -> int:
        """Frames decoded again only for continuity (their samples are dropped)."""
        return self.start - self.context_start


@dataclass(frozen=True)
class ChunkPolicy:
    frames: int = 1  # N: new frames (tokens) per chunk
    left_context: int = 0  # L: frames before them decoded again, their output dropped
    with_hidden: bool = False  # each token travels with the source's last hidden state

    def __post_init__(self) -> None:
        if self.frames < 1 or self.left_context < 0:
            raise ValueError(f"a chunk policy takes frames >= 1 and left_context >= 0, not "
                             f"{self.frames} and {self.left_context}")

    @property
    def held_frames(self) -> int:
        """The most frames a target keeps per request between chunks (its state bound)."""
        return self.left_context + self.frames

    def windows(self, sent: int, available: int, finished: bool) -> tuple[Window, ...]:
        """The chunks ready now, after ``sent`` frames went and ``available`` exist: each full
        run of ``frames`` new ones, and once ``finished``, the rest as one shorter chunk."""
        if not 0 <= sent <= available:
            raise ValueError(f"sent {sent} frames of {available}")
        out = []
        start = sent
        while available - start >= self.frames or (finished and start < available):
            end = min(start + self.frames, available)
            out.append(Window(max(0, start - self.left_context), start, end))
            start = end
        return tuple(out)


def every_token(with_hidden: bool = True) -> ChunkPolicy:
    """Each token on at once (thinker -> talker carries the hidden state with it)."""
    return ChunkPolicy(1, 0, with_hidden)


def frame_windows(frames: int, left_context: int) -> ChunkPolicy:
    """``frames`` new codec frames per chunk, decoded after ``left_context`` earlier ones."""
    return ChunkPolicy(frames, left_context)
