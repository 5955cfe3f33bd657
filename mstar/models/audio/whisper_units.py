"""Whisper's time units, shared by the features (models) and the transcription logic (prompt):
mel frames (100 per second at 16 kHz, hop 160), 3000 of them per 30 s window, and one encoder
position (a timestamp step of 0.02 s) per 2 frames."""

FRAMES_PER_SECOND = 100
WINDOW_FRAMES = 3000  # 30 s: the encoder's fixed input length
INPUT_STRIDE = 2  # mel frames per encoder position (one timestamp step)
TIME_PRECISION = 0.02  # seconds per timestamp step
