"""Audio-in families (Whisper, Qwen2-Audio, Voxtral) and the audio part a prompt carries."""
