"""Deterministic generators for the bundled demo catalog (text tokens, images, video, RL)."""
