"""Write the demo catalog: five datasets, two versions each, byte-for-byte the same on every run.

v2 of each of the first four (`EDITED`) updates, removes and adds rows relative to v1 through
copy-on-write derivation; `demo-rollouts` is a stream of LLM RL rollouts (demo/rollouts.py) appended by
four samplers in 12 commits, v1 and v2 its snapshots after 6 and 12, read by a demo learner whose run
record is `runs/demo-learner` (demo/learner.py). What v2 changed is recorded in
`<catalog>/sample-data.json` so tests can hold diffs to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa

from dsinspect.loaders.format.manifest import Field
from dsinspect.loaders.store.catalog import Catalog
from dsinspect.loaders.store.derive import derive_version
from dsinspect.loaders.store.storage import join, write_atomic
from dsinspect.loaders.store.writer import WriteOptions

__all__ = ["GENERATOR_VERSION", "write_sample_catalog", "DATASETS", "EDITED", "STREAMED"]

GENERATOR_VERSION = "4"
CREATED = {"v1": "2026-01-05T09:00:00+00:00", "v2": "2026-02-16T09:00:00+00:00"}
SEED = 20260105


@dataclass(frozen=True)
class DemoDataset:
    name: str
    key: str
    count: int
    options: WriteOptions
    fields: Callable[[Catalog], list[Field]]
    rows: Callable[[int, int, int], list[dict]]          # (start_id, count, seed) -> rows
    mutate: Callable[[dict, int], dict]                   # (row, seed) -> changed row, same key
    update: tuple[int, ...]                               # keys changed in v2
    remove: tuple[int, ...]                               # keys removed in v2
    add: int                                              # rows added in v2
    describe: str


def _text_fields(catalog: Catalog) -> list[Field]:
    from dsinspect.demo.tokenizer import tokenizer_bytes

    blob = catalog.put_blob("demo-text", tokenizer_bytes(), ".json")
    return [Field("doc_id", pa.int64(), "scalar", nullable=False), Field("lang", pa.string(), "scalar"),
            Field("text", pa.string(), "text"),
            Field("tokens", pa.list_(pa.int32()), "tokens",
                  options={"tokenizer": {"kind": "huggingface", "blob": blob}})]


def _image_fields(_: Catalog) -> list[Field]:
    return [Field("image_id", pa.int64(), "scalar", nullable=False), Field("image", pa.binary(), "image"),
            Field("format", pa.string(), "scalar"), Field("label", pa.string(), "scalar"),
            Field("caption", pa.string(), "text"), Field("width", pa.int32(), "scalar"),
            Field("height", pa.int32(), "scalar")]


def _video_fields(_: Catalog) -> list[Field]:
    return [Field("clip_id", pa.int64(), "scalar", nullable=False), Field("video", pa.binary(), "video"),
            Field("caption", pa.string(), "text"), Field("fps", pa.int32(), "scalar"),
            Field("num_frames", pa.int32(), "scalar"), Field("width", pa.int32(), "scalar"),
            Field("height", pa.int32(), "scalar"), Field("info", pa.string(), "json")]


TRAJECTORY = pa.struct([("observation", pa.list_(pa.list_(pa.float32()))), ("action", pa.list_(pa.int32())),
                        ("reward", pa.list_(pa.float32())), ("terminated", pa.list_(pa.bool_())),
                        ("truncated", pa.list_(pa.bool_()))])


def _rl_fields(_: Catalog) -> list[Field]:
    return [Field("episode_id", pa.int64(), "scalar", nullable=False), Field("env", pa.string(), "scalar"),
            Field("trajectory", TRAJECTORY, "trajectory"), Field("episode_return", pa.float64(), "scalar"),
            Field("length", pa.int32(), "scalar")]


def _video_info(row: dict) -> dict:
    """Video rows carry a JSON `info` field too, so the demo exercises the json role."""
    info = {"codec": "h264", "container": "mp4", "fps": row["fps"], "num_frames": row["num_frames"],
            "size": [row["width"], row["height"]]}
    return {**row, "info": json.dumps(info, sort_keys=True)}


def _video_rows(start_id: int, count: int, seed: int) -> list[dict]:
    from dsinspect.demo.video import video_rows

    return [_video_info(r) for r in video_rows(start_id, count, seed)]


def _mutate_video(row: dict, seed: int) -> dict:
    from dsinspect.demo.video import mutate_video_row

    return _video_info(mutate_video_row(row, seed))


def _datasets() -> list[DemoDataset]:
    from dsinspect.demo import images, rl, text

    return [
        DemoDataset("demo-text", "doc_id", 240, WriteOptions(shard_rows=60, row_group_rows=16), _text_fields,
                    text.text_rows, text.mutate_text_row, update=(3, 130), remove=(131,), add=3,
                    describe="documents tokenised by a byte-level BPE trained on the shipped corpus"),
        DemoDataset("demo-images", "image_id", 48, WriteOptions(shard_rows=12, row_group_rows=4), _image_fields,
                    images.image_rows, images.mutate_image_row, update=(13, 14), remove=(40, 41), add=4,
                    describe="procedurally drawn JPEG and PNG images with labels and captions"),
        DemoDataset("demo-video", "clip_id", 8, WriteOptions(shard_rows=3, row_group_rows=1), _video_fields,
                    _video_rows, _mutate_video,
                    update=(1,), remove=(6,), add=1, describe="short H.264 MP4 clips of moving shapes"),
        DemoDataset("demo-rl", "episode_id", 40, WriteOptions(shard_rows=10, row_group_rows=5), _rl_fields,
                    rl.episode_rows, rl.mutate_episode_row, update=(2, 7), remove=(5,), add=2,
                    describe="episodes of a small numpy environment under a noisy policy"),
    ]


EDITED = ("demo-text", "demo-images", "demo-video", "demo-rl")  # v2 derived from v1 by edits
STREAMED = ("demo-rollouts",)                                     # v1, v2: snapshots of a stream
DATASETS = EDITED + STREAMED
ROLLOUT_COMMITS, ROLLOUT_SAMPLERS, ROLLOUT_V1_COMMITS = 12, 4, 6
ROLLOUTS_CREATED = "2026-03-02T09:{minute:02d}:00+00:00"  # commit n at minute n


def _rollout_fields(catalog: Catalog) -> list[Field]:
    """The demo rollouts' columns, each with its viewer role and, in its options, its rollout meaning
    (inspect/rollouts.py): declared, so no viewer has to guess them from names; the response tokens' options
also declare what the checks need beyond the rows (pad and EOS ids, special ids, the length limit, the
staleness bound; docs/RL.md)."""
    from dsinspect.demo.rollouts import CHECKS, SCHEMA
    from dsinspect.demo.tokenizer import tokenizer_bytes

    tokenizer = {"kind": "huggingface", "blob": catalog.put_blob("demo-rollouts", tokenizer_bytes(), ".json")}
    roles = {"prompt_text": "text", "response_text": "text", "prompt_tokens": "tokens", "response_tokens": "tokens",
             "sampler_logprobs": "array", "learner_logprobs": "array", "ref_logprobs": "array",
             "loss_mask": "array", "rewards": "json", "turns": "json", "env_output": "text"}
    fields = []
    for f in SCHEMA:
        role = roles.get(f.name, "scalar")
        options: dict[str, Any] = {"tokenizer": tokenizer} if role == "tokens" else {}
        if f.name != "rollout_id":
            options["rollout"] = f.name  # the demo names each column after its meaning
        if f.name == "response_tokens":  # what the checks need beyond the rows, declared with the data
            declared = ("pad_id", "eos_ids", "special_ids", "max_response_tokens", "staleness_bound")
            options["checks"] = {k: list(v) if isinstance(v := CHECKS[k], tuple) else v for k in declared}
        arrow_type = pa.string() if role == "json" else f.type
        fields.append(Field(f.name, arrow_type, role, nullable=f.name != "rollout_id", options=options))
    return fields


def _rollout_rows() -> list[dict]:
    """demo_rollouts() with the struct and list-of-struct columns as JSON text (a role each can hold)."""
    from dsinspect.demo.rollouts import demo_rollouts

    return [{**row, "rewards": json.dumps(row["rewards"], sort_keys=True),
             "turns": json.dumps(row["turns"], sort_keys=True)} for row in demo_rollouts().rows]


def _write_rollout_stream(catalog: Catalog) -> dict[str, Any]:
    """The samplers' commits (a few groups each, round robin) and the two snapshots."""
    from dsinspect.loaders.stream import open_stream, snapshot

    rows = _rollout_rows()
    stream = open_stream(catalog, "demo-rollouts", _rollout_fields(catalog), key="rollout_id")
    per_commit = len(rows) // ROLLOUT_COMMITS
    options = WriteOptions(row_group_rows=4)
    if stream.head() == 0:  # written once: a stream is appended to, never rewritten
        for n in range(ROLLOUT_COMMITS):
            stream.append(rows[n * per_commit:(n + 1) * per_commit], writer=f"sampler-{n % ROLLOUT_SAMPLERS}",
                          message=f"groups {2 * n}-{2 * n + 1}", options=options,
                          created_at=ROLLOUTS_CREATED.format(minute=n))
    v1 = snapshot(stream, ROLLOUT_V1_COMMITS, tags=["v1"], message=f"v1: commits 0..{ROLLOUT_V1_COMMITS - 1}")
    v2 = snapshot(stream, ROLLOUT_COMMITS, tags=["v2"], parent=v1.id,
                  message=f"v2: commits 0..{ROLLOUT_COMMITS - 1}")
    return {"v1": v1.id, "v2": v2.id, "key": "rollout_id", "updated": {}, "removed": [],
            "added": [r["rollout_id"] for r in rows[ROLLOUT_V1_COMMITS * per_commit:]],
            "commits": ROLLOUT_COMMITS}


def write_sample_catalog(url: str, on_rows: Callable[[int], None] | None = None, *,
                         learner_run: bool = True) -> dict[str, Any]:
    """Write (or re-write, as a no-op) the demo catalog at `url`; the record of what v2 changed. With
    `learner_run`, also the demo learner's run record over the rollout stream (`runs/demo-learner`,
    demo/learner.py): not for the source tree's `sample_data/`, whose copies make their own."""
    catalog = Catalog(url)
    record: dict[str, Any] = {"generator": GENERATOR_VERSION, "datasets": {}}
    for i, ds in enumerate(_datasets()):
        seed = SEED + 1000 * i
        fields = ds.fields(catalog)
        v1_rows = list(ds.rows(0, ds.count, seed))
        v1 = catalog.write_version(ds.name, v1_rows, fields, key=ds.key, parent=None, tags=["v1"],
                                   message=f"v1: {ds.count} {ds.describe}", options=ds.options,
                                   created_at=CREATED["v1"], on_rows=on_rows)
        by_key = {r[ds.key]: r for r in v1_rows}
        updates = {k: ds.mutate(by_key[k], seed + k) for k in ds.update}
        added = list(ds.rows(ds.count + 1000, ds.add, seed + 1))
        v2 = derive_version(v1, update=updates, remove=ds.remove, add=added, tags=["v2"], options=ds.options,
                            message=f"v2: {len(updates)} changed, {len(ds.remove)} removed, {len(added)} added",
                            created_at=CREATED["v2"])
        record["datasets"][ds.name] = {
            "v1": v1.id, "v2": v2.id, "key": ds.key,
            "updated": {str(k): sorted(f for f in row if row[f] != by_key[k][f]) for k, row in updates.items()},
            "removed": list(ds.remove), "added": [r[ds.key] for r in added],
        }
    record["datasets"]["demo-rollouts"] = _write_rollout_stream(catalog)
    if learner_run:
        from dsinspect.demo.learner import write_demo_learner

        write_demo_learner(catalog)
    write_atomic(catalog.fs, join(catalog.root, "sample-data.json"),
                 (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return record
