"""`dsinspect show` as a person and a script use it: content a person recognises, --field, --raw,
--json, a loud row-hash mismatch (also from a real process: its exit code as a shell sees it), and
one-line errors for mistakes. The rest run the command in this process (tests/cli_inprocess.py)."""

import json
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest
from cli_inprocess import run_cli
from conftest import forge_rl_version

from dsinspect.defaults import BUNDLED
from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog

UNSET = ("DSINSPECT_CATALOG", "FORCE_COLOR", "COLUMNS")


def show(*args, catalog=None):
    """`dsinspect show ARGS`, run in this process: a CompletedProcess."""
    return run_cli(*(["--catalog", str(catalog)] if catalog else []), "show", *args, unset=UNSET)


def show_process(*args, catalog=None):
    """`dsinspect show ARGS` in a real process."""
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    cmd = [sys.executable, "-m", "dsinspect", *(["--catalog", str(catalog)] if catalog else []), "show", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def ok(*args, **kwargs):
    done = show(*args, **kwargs)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def assert_one_line_error(done, code, *fragments):
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsinspect: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def bundled():
    return Catalog(str(BUNDLED))


def test_show_text_prints_the_decoded_text_and_tokens(bundled):
    row = bundled.resolve("demo-text@v1").row(0)
    out = ok("demo-text@v1:0")
    assert row["text"][:60] in out
    assert "tokenizer.json" in out and f"{len(row['tokens'])} tokens" in out
    assert "decoded: " + row["text"][:40] in out
    assert "✓ matches the hash recomputed from the data" in out
    assert "ids " + " ".join(map(str, row["tokens"][:8])) in out


def test_show_image_prints_its_size_format_and_pixels(bundled):
    row = bundled.resolve("demo-images@v1").row(0)
    out = ok("demo-images@v1:0")
    assert f"{row['format'].upper()} {row['width']}x{row['height']}" in out
    assert row["caption"] in out and "▀" * 16 in out


def test_show_video_prints_codec_frames_and_a_strip(bundled):
    row = bundled.resolve("demo-video@v1").row(0)
    out = ok("demo-video@v1:0", "--frame", "5")
    assert f"h264 {row['width']}x{row['height']}" in out and f"{row['num_frames']} frames" in out
    assert "keyframes [0, 12]" in out and f"#{row['num_frames'] - 1} " in out and "frame 5 ·" in out
    assert row["caption"] in out and "▀" in out


def test_show_rl_prints_the_episode_its_return_and_steps(bundled):
    row = bundled.resolve("demo-rl@v1").row(0)
    out = ok("demo-rl@v1:0")
    assert f"episode: {row['length']} steps · return {row['episode_return']:.6g}" in out
    assert f"terminated at step {row['length'] - 1}" in out
    assert "reward  " in out and any(c in out for c in "▁▂▃▄▅▆▇█")
    assert "observation" in out and "terminated" in out and row["env"] in out


def test_field_shows_one_field_with_honest_byte_spans():
    out = ok("demo-text@v1:17", "--field", "tokens")
    assert "── text" not in out and "tokens · tokens" in out
    assert "part of a character" in out and "e3 83" in out and "0-2" in out and "2-3" in out
    assert "│" in out  # piece boundaries without colour


def test_raw_adds_hex_panels_of_raw_and_canonical_bytes():
    out = ok("demo-images@v1:0", "--raw", "--field", "image")
    assert "image: raw bytes" in out and "image: canonical bytes" in out
    assert "00000000  89 50 4e 47 0d 0a 1a 0a" in out and "│.PNG........IHDR│" in out
    page2 = ok("demo-images@v1:0", "--raw", "--field", "image", "--page", "2")
    assert "00000100" in page2 and "page 2/" in page2


def test_json_carries_views_and_hashes(bundled):
    data = json.loads(ok("demo-rl@v1:0", "--json"))
    row = bundled.resolve("demo-rl@v1").row(0)
    assert data["kind"] == "sample" and data["row_hash"]["ok"] and data["index"] == 0
    fields = {f["name"]: f for f in data["fields"]}
    traj = fields["trajectory"]["view"]
    assert traj["kind"] == "trajectory" and traj["length"] == row["length"]
    assert traj["episode_return"] == pytest.approx(row["episode_return"], abs=1e-5)
    assert len(fields["trajectory"]["hash"]) == 32
    video = json.loads(ok("demo-video@v1:0", "--json", "--field", "video", "--raw"))["fields"]
    assert [f["name"] for f in video] == ["video"] and video[0]["view"]["frame_count"] == 20
    assert video[0]["raw_hex"]["lines"][0]["hex"].startswith("00 00 00 20 66 74 79 70")
    text = json.loads(ok("demo-text@v1:0", "--json", "--field", "tokens"))["fields"][0]["view"]
    assert text["text"].startswith(bundled.resolve("demo-text@v1").row(0)["text"])


def test_another_tokenizer():
    out = ok("demo-text@v1:0", "--field", "tokens", "--tokenizer", "cl100k_base")
    assert "tokenizer cl100k_base (100,277 ids)" in out



def test_a_row_hash_mismatch_is_loud(tmp_path):
    shutil.copytree(BUNDLED / "datasets" / "demo-rl", tmp_path / "catalog" / "datasets" / "demo-rl")
    forge_rl_version(tmp_path / "catalog", tmp_path)
    done = show_process("demo-rl@forged:3", catalog=tmp_path / "catalog")  # exit 1 as a shell sees it
    assert_one_line_error(done, 1, "stored row hash", "does not match")
    assert done.stdout.count("ROW HASH MISMATCH") == 2  # at the top and again at the bottom
    assert "recomputed" in done.stdout and "trajectory-return-mismatch" in done.stdout
    data = json.loads(show("demo-rl@forged:3", "--json", catalog=tmp_path / "catalog").stdout)
    assert data["row_hash"]["ok"] is False and data["findings"][0]["code"] == "row-hash-mismatch"
    assert show("demo-rl@forged:2", catalog=tmp_path / "catalog").returncode == 0


@pytest.mark.parametrize("args, code, fragments", [
    (("demo-text@v1",), 2, ("names no sample", ":INDEX")),
    (("demo-text@v1:999",), 2, ("out of range",)),
    (("demo-text@v1:0", "--field", "nope"), 2, ("no field 'nope'",)),
    (("nope@v1:0",), 2, ("no dataset 'nope'",)),
])
def test_mistakes_are_one_line(args, code, fragments):
    assert_one_line_error(show(*args), code, *fragments)


def x264_faststart(path, frames=20):
    """A real H.264 MP4 with its index (moov) before the frames, so a cut file still lists them."""
    import av
    import numpy as np

    with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"}) as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(frames):
            picture = np.zeros((32, 32, 3), np.uint8)
            picture[:, :(i + 1) * 32 // frames] = 200
            out.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        out.mux(stream.encode(None))
    return path.read_bytes()


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Catalog `clips`: row 0 a whole 20-frame video, row 1 the same cut inside its 12th packet
    (the index lists frames whose bytes are gone)."""
    import av

    from dsinspect.inspect import ErrorView, video_view

    tmp = tmp_path_factory.mktemp("clips")
    whole = x264_faststart(tmp / "whole.mp4")
    with av.open(str(tmp / "whole.mp4")) as c:
        packets = sorted((p.pos, p.size) for p in c.demux(c.streams.video[0]) if p.size)
    cut = whole[:packets[11][0] + packets[11][1] // 2]
    view = video_view(cut)
    assert isinstance(view.frame(view.frame_count - 1), ErrorView)  # the case under test: listed, not decodable
    catalog = Catalog(str(tmp / "c"))
    fields = [Field("clip", pa.binary(), "video"), Field("caption", pa.string(), "text")]
    catalog.write_version("clips", [{"clip": whole, "caption": "whole"}, {"clip": cut, "caption": "cut"}], fields)
    return tmp / "c", view.frame_count


def test_frame_past_the_end_is_one_line_naming_the_field_and_its_frames(clips):
    catalog, listed = clips
    assert "frame 19 ·" in ok("clips:0", "--frame", "19", catalog=catalog)
    for n in ("20", "999", "-1", "-21"):
        assert_one_line_error(show("clips:0", "--field", "clip", "--frame", n, catalog=catalog), 2,
                              "clips@", ":0 field 'clip'", f"no frame {n}", "it has 20 frames (--frame 0 to 19)")
    assert_one_line_error(show("clips:0", "--field", "caption", "--frame", "3", catalog=catalog), 2,
                          "--frame 3 needs a video field", "caption", "video fields: clip")
    assert_one_line_error(show("demo-text@v1:0", "--frame", "0"), 2, "--frame 0 needs a video field", "demo-text")
    # listed in the cut file's index, but its bytes are gone: how many decode, not a traceback
    done = show("clips:1", "--frame", str(listed - 1), catalog=catalog)
    assert_one_line_error(done, 2, ":1 field 'clip'", f"frame {listed - 1} does not decode",
                          f"of its {listed} frames do (--frame 0 to ")
    assert done.stdout == ""
    decodable = int(done.stderr.split(" does not decode: ")[1].split(" of its")[0])
    assert 0 < decodable < listed
    assert f"frame {decodable - 1} ·" in ok("clips:1", "--frame", str(decodable - 1), catalog=catalog)
    # past the end: the same account, never a range that names frames which do not decode
    past = show("clips:1", "--frame", str(listed + 9), catalog=catalog)
    assert_one_line_error(past, 2, f"no frame {listed + 9}: {decodable} of its {listed} frames do "
                                   f"(--frame 0 to {decodable - 1}; the file is damaged or truncated)")


def test_data_cannot_drive_the_terminal(tmp_path):
    """Escape sequences inside values are shown as \\x1b, never written to the terminal."""
    catalog = Catalog(str(tmp_path / "c"))
    evil = "title\x1b]0;pwned\x07 clear\x1b[2J c1\x9b31m"
    fields = [Field("name", pa.string(), "scalar"), Field("body", pa.string(), "text"),
              Field("tokens", pa.list_(pa.int64()), "tokens",
                    options={"tokenizer": {"kind": "tiktoken", "name": "cl100k_base"}}),
              Field("doc", pa.string(), "json")]
    catalog.write_version("evil", [{"name": evil, "body": evil, "tokens": [27, 58, 17, 41],
                                    "doc": json.dumps({"k": evil})}], fields)
    done = show("evil:0", catalog=tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout
    assert "title\\x1b]0;pwned" in done.stdout and "⟨U+001B <control>⟩" in done.stdout


def test_render_building_blocks():
    import numpy as np

    from dsinspect.term.render import half_blocks, sparkline
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1.0, None, float("nan"), 1.0]) == "▁  ▁" and sparkline([]) == ""
    assert len(sparkline(list(range(1000)), width=50)) == 50
    art = half_blocks(np.zeros((5, 4, 3), np.uint8))
    assert art.plain == "\n".join(["▀" * 4] * 3)


def test_tokenizer_choices_match_the_core():
    from dsinspect.cli.show_cmd import TOKENIZERS
    from dsinspect.inspect import TOKENIZER_CHOICES

    assert TOKENIZERS == TOKENIZER_CHOICES
