"""Whisper's time units, shared by the features (models) and the transcription logic (prompt):
mel frames (100 per second at 16 kHz, hop 160), 3000 of them per 30 s window, and one encoder
position (a timestamp step of 0.02 s) per 2 frames."""

FRAMES_PER_SECOND = 100
WINDOW_FRAMES = 3000  # 30 s: the encoder's fixed input length
INPUT_STRIDE = 2  # mel frames per encoder position (one timestamp step)
TIME_PRECISION = 0.02  # seconds per timestamp step


def no_speech_id(no_timestamps: int) -> int:
    """<|nospeech|> (<|nocaptions|> in English-only vocabularies): the token just before
    <|notimestamps|>, where transformers' ``_setup_no_speech_detection`` finds it."""
    return no_timestamps - 1
