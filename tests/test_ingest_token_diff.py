"""Issue #33: `dsinspect diff` of two tokenized corpora, ingested from a pretraining format with no flags,
names the one document that changed and its changed token stretch. Rows are keyed by `id` (`FILE:INDEX`)
and hold no token offset (token_streams.py): a document that grows moves no other row."""

from __future__ import annotations

import json

import numpy as np

EOT = 50256  # nanoGPT's end of text (GPT-2)


def write_bin(path, docs) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.concatenate(docs).astype(np.uint16).tofile(path)


def test_a_document_that_grew_is_the_one_change_with_its_stretch(tmp_path, cli):
    rng = np.random.default_rng(0)
    docs = [np.append(rng.integers(1, 50_000, int(n)), EOT).astype(np.uint16) for n in rng.integers(1, 300, 200)]
    write_bin(tmp_path / "a" / "train.bin", docs)
    docs[17] = np.concatenate([docs[17][:10], [7, 7, 7], docs[17][10:]]).astype(np.uint16)
    write_bin(tmp_path / "b" / "train.bin", docs)
    catalog = str(tmp_path / "catalog")
    for tag in "ab":
        code, _, err = cli("ingest", tmp_path / tag, "corpus", "--tag", tag, "--catalog", catalog)
        assert code == 0, err
    code, out, err = cli("diff", "corpus@a", "corpus@b", "--json", "--catalog", catalog)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert (rows["matched_by"], rows["key"]) == ("key", "id")
    assert rows["counts"] == {"added": 0, "removed": 0, "changed": 1, "moved": 0} and rows["fields"] == {"tokens": 1}
    [change] = rows["changed"]
    tokens = change["details"]["tokens"]
    assert change["key"] == "train.bin:17" and tokens["tokens"] == [len(docs[17]) - 3, len(docs[17])]
    assert tokens["first_diff"] == 10 and tokens["change"]["added"] == [7, 7, 7] and tokens["change"]["removed"] == []
