"""Tests for the deterministic demo content generators in dsinspect.demo."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image, ImageOps

from dsinspect.demo import images, rl, text, tokenizer, video

REPO = Path(__file__).resolve().parents[1]
SEED = 7


@pytest.fixture(scope="module")
def text_data():
    return text.text_rows(0, 120, SEED)


@pytest.fixture(scope="module")
def image_data():
    return images.image_rows(0, 48, SEED)


@pytest.fixture(scope="module")
def video_data():
    return video.video_rows(0, 6, SEED)


@pytest.fixture(scope="module")
def rl_data():
    return rl.episode_rows(0, 40, SEED)


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: byte-level token character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


# --- determinism -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [text.text_rows, images.image_rows, video.video_rows, rl.episode_rows])
def test_generators_are_deterministic(fn):
    assert fn(3, 4, SEED) == fn(3, 4, SEED)
    assert fn(3, 4, SEED) != fn(3, 4, SEED + 1)


@pytest.mark.parametrize("fn", [text.text_rows, images.image_rows, rl.episode_rows])
def test_rows_do_not_depend_on_batching(fn):
    assert fn(0, 6, SEED)[4] == fn(4, 1, SEED)[0]


def test_video_bytes_identical_in_another_process(video_data):
    here = hashlib.sha256(b"".join(r["video"] for r in video_data)).hexdigest()
    code = ("import hashlib; from dsinspect.demo.video import video_rows; "
            f"print(hashlib.sha256(b''.join(r['video'] for r in video_rows(0, 6, {SEED}))).hexdigest())")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == here


def _x264_log(frames: list[np.ndarray], size: tuple[int, int]) -> list[str]:
    """What libx264 logs while the demo encoder encodes `frames` (its settings, its CPU paths)."""
    import av.logging

    before = av.logging.get_level()
    av.logging.set_level(av.logging.INFO)
    try:
        with av.logging.Capture() as logs:
            video.encode_mp4(frames, size, 12)
    finally:
        av.logging.set_level(before)
    return [message for _, name, message in logs if name == "libx264"]


def test_x264_gets_its_settings_and_uses_no_cpu_specific_code():
    """The encoder's options reach x264 (FFmpeg drops options no one reads, without a word): it
    reports no SIMD paths in use (their output varied between encodes on AVX-512 machines) and
    the fixed GOP, one thread and no B-frames in its settings."""
    spec = video._spec(video._rng(SEED, 4))
    log = _x264_log(video.render_frames(spec["motion"], spec["fg"], spec["bg"], spec["size"], 16), spec["size"])
    assert any("using cpu capabilities: none!" in line for line in log), log
    assert not any("rror" in line for line in log), log
    settings = next(line for line in log if "options:" in line).split("options:")[1].split()
    for wanted in ("threads=1", "bframes=0", f"keyint={video._GOP}", "scenecut=0"):
        assert wanted in settings, (wanted, settings)


def test_video_bytes_identical_across_encodes_in_one_process():
    """Identical frames give identical bytes, encode after encode (on AVX-512 machines x264's
    SIMD code gave 1-3 different byte strings over 6 encodes of the same clip)."""
    from dsinspect.demo.build import SEED as CATALOG_SEED

    for clip_id in range(8):  # the clips of demo-video@v1
        spec = video._spec(video._rng(CATALOG_SEED + 2000, clip_id))
        frames = video.render_frames(spec["motion"], spec["fg"], spec["bg"], spec["size"], spec["n"])
        encodes = {video.encode_mp4(frames, spec["size"], spec["fps"]) for _ in range(6)}
        assert len(encodes) == 1, f"clip {clip_id}: {len(encodes)} different encodes of the same frames"


# --- text and tokenizer ----------------------------------------------------------------------------

def test_corpus_has_multibyte_and_markers():
    corpus = tokenizer.corpus_text()
    assert 25_000 <= len(corpus.encode("utf-8")) <= 60_000
    assert sum(ord(c) > 127 for c in corpus) > 1000
    for needle in ["é", "ß", "ł", "α", "ж", "の", "中", "한", "ع", "👩‍💻", "🇯🇵",
                   *tokenizer.SPECIAL_TOKENS[:1], "<|user|>"]:
        assert needle in corpus, needle
    assert len(tokenizer.documents()) > 50


def test_shipped_tokenizer_has_special_tokens():
    tok = tokenizer.load_tokenizer()
    assert tok.get_vocab_size() == 2048
    assert [tok.token_to_id(t) for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert tokenizer.tokenizer_bytes() == tokenizer.TOKENIZER_PATH.read_bytes()


def test_training_reproduces_shipped_tokenizer():
    # BPE training proved deterministic here (same merges across runs and processes), so we compare ids.
    trained = tokenizer.train_tokenizer(tokenizer.corpus_text())
    shipped = tokenizer.load_tokenizer()
    assert trained.get_vocab() == shipped.get_vocab()
    for doc in tokenizer.documents()[::9]:
        assert trained.encode(doc).ids == shipped.encode(doc).ids


def test_text_rows_shape_and_tokens(text_data):
    tok = tokenizer.load_tokenizer()
    eot, pad = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|pad|>")
    assert [r["doc_id"] for r in text_data] == list(range(120))
    for r in text_data:
        assert set(r) == {"doc_id", "lang", "text", "tokens"}
        assert isinstance(r["lang"], str) and r["text"] and all(isinstance(i, int) for i in r["tokens"])
        assert r["text"] in tok.decode(r["tokens"], skip_special_tokens=False)
        if r["tokens"][-1] == pad:
            assert len(r["tokens"]) % 16 == 0
    lengths = [len(r["tokens"]) for r in text_data]
    assert min(lengths) <= 8 and max(lengths) >= 300
    assert sum(r["tokens"][-1] == eot for r in text_data) >= 10
    assert sum(r["tokens"][-1] == pad for r in text_data) >= 3
    assert {"en", "fr", "ja", "mixed"} <= {r["lang"] for r in text_data}


def test_some_tokens_split_multibyte_characters(text_data):
    tok, dec = tokenizer.load_tokenizer(), _byte_decoder()
    split = 0
    for r in text_data:
        for tid in r["tokens"]:
            piece = tok.id_to_token(tid)
            if piece in tokenizer.SPECIAL_TOKENS:
                continue
            try:
                bytes(dec[c] for c in piece).decode("utf-8")
            except UnicodeDecodeError:
                split += 1
    assert split > 50


def test_mutate_text_row(text_data):
    tok = tokenizer.load_tokenizer()
    for r in text_data[:30]:
        m = text.mutate_text_row(r, 1)
        assert m == text.mutate_text_row(r, 1)
        assert m["doc_id"] == r["doc_id"] and m["text"] != r["text"] and m["tokens"] != r["tokens"]
        assert m["text"] in tok.decode(m["tokens"], skip_special_tokens=False)


# --- images ----------------------------------------------------------------------------------------

def test_images_decode_to_stated_size_and_format(image_data):
    modes = set()
    for r in image_data:
        assert set(r) == {"image_id", "image", "format", "label", "caption", "width", "height"}
        img = Image.open(io.BytesIO(r["image"]))
        img.load()
        assert img.format.lower() == r["format"] and img.size == (r["width"], r["height"])
        assert len(r["image"]) < 8_000 and r["label"] in r["caption"]
        modes.add((r["format"], img.mode))
    assert {("png", "RGBA"), ("png", "P"), ("png", "L"), ("jpeg", "RGB")} <= modes
    assert len({(r["width"], r["height"]) for r in image_data}) >= 5


def test_some_jpegs_carry_exif_orientation(image_data):
    oriented = 0
    for r in image_data:
        img = Image.open(io.BytesIO(r["image"]))
        orient = img.getexif().get(0x0112)
        if orient in (6, 8):
            oriented += 1
            assert r["format"] == "jpeg"
            upright = ImageOps.exif_transpose(img)
            assert upright.size == (r["height"], r["width"])
    assert oriented >= 2


def test_mutate_image_row(image_data):
    for r in image_data[:16]:
        m = images.mutate_image_row(r, 2)
        assert m == images.mutate_image_row(r, 2)
        assert m["image_id"] == r["image_id"] and m["image"] != r["image"] and m["caption"] != r["caption"]
        assert Image.open(io.BytesIO(m["image"])).size == (m["width"], m["height"])


# --- video -----------------------------------------------------------------------------------------

def _decode(data: bytes) -> tuple[list[np.ndarray], av.video.stream.VideoStream]:
    with av.open(io.BytesIO(data)) as c:
        stream = c.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(stream)]
        return frames, stream


def test_videos_decode_to_num_frames(video_data):
    for r in video_data:
        assert set(r) == {"clip_id", "video", "caption", "fps", "num_frames", "width", "height"}
        frames, stream = _decode(r["video"])
        assert len(frames) == r["num_frames"] and 12 <= r["num_frames"] <= 30
        assert stream.codec_context.name == "h264" and stream.codec_context.pix_fmt == "yuv420p"
        assert frames[0].shape == (r["height"], r["width"], 3) and r["fps"] in (12, 24)
        assert not np.array_equal(frames[0], frames[-1])
        assert len(r["video"]) < 10_000


def test_mutate_video_row(video_data):
    r = video_data[0]
    m = video.mutate_video_row(r, 3)
    assert m["clip_id"] == r["clip_id"] and m["video"] != r["video"] and m["caption"] != r["caption"]
    assert len(_decode(m["video"])[0]) == m["num_frames"]


# --- rl --------------------------------------------------------------------------------------------

def _check_episode(r: dict) -> None:
    tr = r["trajectory"]
    n = r["length"]
    assert all(len(tr[k]) == n for k in ("observation", "action", "reward", "terminated", "truncated"))
    assert all(len(o) == rl.OBS_DIM for o in tr["observation"])
    assert tr["terminated"][-1] != tr["truncated"][-1]
    assert not any(tr["terminated"][:-1]) and not any(tr["truncated"][:-1])
    total = 0.0
    for x in tr["reward"]:
        total += x
    assert r["episode_return"] == round(total, 6)
    assert all(float(np.float32(v)) == v for o in tr["observation"] for v in o)
    assert all(float(np.float32(v)) == v for v in tr["reward"])
    assert all(0 <= a < rl.NUM_ACTIONS for a in tr["action"])


def test_episode_invariants(rl_data):
    for r in rl_data:
        assert set(r) == {"episode_id", "env", "trajectory", "episode_return", "length"}
        _check_episode(r)
    lengths = [r["length"] for r in rl_data]
    assert min(lengths) <= 15 and max(lengths) == rl.MAX_STEPS
    assert any(r["trajectory"]["truncated"][-1] for r in rl_data)
    assert any(r["trajectory"]["terminated"][-1] for r in rl_data)


def test_mutate_episode_row(rl_data):
    for r in rl_data[:10]:
        m = rl.mutate_episode_row(r, 4)
        assert m["episode_id"] == r["episode_id"] and m["trajectory"] != r["trajectory"]
        _check_episode(m)


# --- budget ----------------------------------------------------------------------------------------

def test_default_counts_stay_small():
    size = sum(len(t) for r in text.text_rows(0, 240, 0) for t in (r["text"].encode(), r["tokens"]))
    size += sum(len(r["image"]) for r in images.image_rows(0, 48, 0))
    size += sum(len(r["video"]) for r in video.video_rows(0, 8, 0))
    size += sum(r["length"] * (rl.OBS_DIM + 2) * 4 for r in rl.episode_rows(0, 40, 0))
    assert size < 2_000_000
