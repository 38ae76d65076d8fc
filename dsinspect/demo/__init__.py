"""Deterministic generators for the bundled demo catalog (text tokens, images, video, RL).

They draw images with Pillow, encode video with PyAV and train a tokenizer: without the `media` and
`tokenizers` extras, one line says so (an installed wheel generates this catalog on first use)."""

from dsinspect.extras import require_installed

require_installed((("PIL", "media"), ("av", "media"), ("tokenizers", "tokenizers")), "the sample catalog")
