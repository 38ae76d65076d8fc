"""Replay of a packed-sequence run for the web (docs/PRETRAINING.md): each rank's batch as rows of
sequences, each with its documents (address, token range [start, stop), offset in the sequence,
a link to the document's Sample page), the tokens decoded per document with the field's stored
tokenizer (ids without one), the padding and loss-masked tokens, the digest; the fingerprint per rank.

A link may name any packed batch: more than MAX_PACKED_TOKENS tokens per page (and, checked by
replay.py as for rows, MAX_REPLAY_SAMPLES sequences) are refused before anything is read, and the
documents read are held to replay.py's MAX_REPLAY_BYTES (`replay_packed(max_bytes=)`).
`packed_html` lays a batch out as HTML in which every text from the data is escaped and every URL
built by urlencode: nothing stored becomes markup."""

from __future__ import annotations

import html
from typing import Any, Callable
from urllib.parse import urlencode

import numpy as np

from dsinspect.errors import UserError
from dsinspect.inspect.packed import decode_ids, packed_vocab, short_address
from dsinspect.loaders.audit.bounds import BatchTooLarge
from dsinspect.loaders.audit.packed_replay import replay_packed
from dsinspect.loaders.order.spec import RunSpec
from dsinspect.loaders.read.packed_batch import PackedBatch
from dsinspect.loaders.records.runlog import spec_for_step
from dsinspect.loaders.store.catalog import Catalog

__all__ = ["packed_replay_model", "packed_html", "check_tokens", "sample_href", "MAX_PACKED_TOKENS", "PACKED_CLASS"]

MAX_PACKED_TOKENS = 1 << 20  # tokens one page shows (sequences × width): ~4 MB of decoded text at most
TOO_LARGE_HINT = ("a page replays at most this much: pick one rank, or use `dsinspect replay --spec RUN.json "
                  "--step N` on the command line")
PACKED_CLASS = "dsi-packed"
_DOC_COLOURS = ("#dfe7fd", "#fff1c1")  # documents alternate between these, in the text and the list
_STYLE = (f"<style>.{PACKED_CLASS}{{border-collapse:collapse;width:100%;font-size:0.85rem}}"
          f".{PACKED_CLASS} th,.{PACKED_CLASS} td{{border:1px solid rgba(128,128,144,0.3);padding:0.3rem 0.5rem;"
          "vertical-align:top;text-align:left}"
          f".{PACKED_CLASS} .dsi-text{{font-family:'Source Code Pro',monospace;white-space:pre-wrap;"
          "overflow-wrap:anywhere;line-height:1.7;width:60%}"
          f".{PACKED_CLASS} .dsi-digest{{font-family:'Source Code Pro',monospace;font-size:0.75rem;"
          "word-break:break-all;max-width:9rem}"
          f".{PACKED_CLASS} .dsi-docs{{white-space:nowrap;font-family:'Source Code Pro',monospace}}"
          f".{PACKED_CLASS} .dsi-doc{{color:#1f1f1f;border-radius:3px;padding:0 2px}}"
          + "".join(f'.{PACKED_CLASS} .dsi-doc[data-d="{i}"]{{background:{c}}}' for i, c in enumerate(_DOC_COLOURS))
          + f".{PACKED_CLASS} .dsi-masked{{opacity:0.55;font-style:italic}}"
          f".{PACKED_CLASS} .dsi-pad{{color:#555;background:repeating-linear-gradient(45deg,#e4e4e4 0 4px,"
          "#f4f4f4 4px 8px);border-radius:3px;padding:0 2px}"
          f".{PACKED_CLASS} .dsi-damaged{{outline:2px solid #d33;color:#a00}}</style>")


def packed_replay_model(catalog: Catalog, specs: list[RunSpec], step: int, rank: str,
                        max_bytes: int) -> dict[str, Any]:
    """The packed batch of (step, rank or "all") as the page shows it, with the keys the row replay's
    model has for the page's header (`rows` empty: no row table). Refused before anything is read
    past MAX_PACKED_TOKENS; `max_bytes` bounds the documents read (the caller checks the sequences
    per page: replay.py's `check_size`)."""
    check_tokens(spec_for_step(specs, int(step)), rank)
    try:
        result = replay_packed(specs, int(step), rank, catalog, max_bytes=max_bytes)
    except BatchTooLarge as e:
        raise e.hinted(TOO_LARGE_HINT) from None
    spec = result.spec
    seq = spec.sequences
    decode, tokenizer = _decoder(catalog, spec)
    damaged = {(r, slot, address) for r, slot, address in result.damaged}
    return {"packed": True, "spec_hash": spec.hash, "epoch": result.epoch,
            "step": result.step, "ranks": [b.rank for b in result.batches], "world_size": spec.world_size,
            "batch_size": spec.batch_size, "sources": [f"{s.name}@{s.version[:12]}" for s in spec.sources],
            "fingerprints": {str(r): fp for r, fp in result.fingerprints.items()},
            "unverified": len(result.damaged),
            "damaged": [{"rank": r, "slot": slot, "document": a} for r, slot, a in result.damaged],
            "record_end": result.record_end, "tokenizer": tokenizer,
            "sequences": {"field": seq.field, "length": seq.length, "width": seq.width, "labels": seq.labels,
                          "eos": seq.eos, "packing": seq.packing.value, "pad": seq.pad_token},
            "batches": [_batch(b, decode, damaged) for b in result.batches],
            "rows": [], "stored": [], "fed": None, "transform": None, "transformed_fingerprints": {},
            "transform_error": None}


def check_tokens(spec: RunSpec, rank: str) -> None:
    """Refuse, before anything is read, a packed batch of more than MAX_PACKED_TOKENS tokens on one page
    (its sequences, times the world size for rank "all", times the sequence width)."""
    ranks = spec.world_size if str(rank).strip().lower() == "all" else 1
    sequences = spec.batch_size * ranks
    tokens = sequences * spec.sequences.width
    if tokens > MAX_PACKED_TOKENS:
        raise UserError(f"this batch holds {tokens:,} tokens ({sequences:,} sequences of {spec.sequences.width:,}); "
                        f"a page shows at most {MAX_PACKED_TOKENS:,}: pick one rank, or use `dsinspect replay "
                        "--spec RUN.json --step N` on the command line")


def sample_href(address: str) -> str:
    """The Sample page's link for a document `dataset@version:index` (the version id cut to 12
    characters, as the row replay's sample links have it)."""
    return "sample?" + urlencode({"address": short_address(address)})


def _batch(batch: PackedBatch, decode: Callable[[np.ndarray], str], damaged: set) -> dict[str, Any]:
    """One rank's sequences: per slot its name, documents (with their text), padding and digest."""
    width = batch.tokens.shape[1]
    mask = batch.loss_mask
    sequences = []
    for i, s in enumerate(batch.sequences):
        held = int(batch.held[i])
        segments = [{"address": g.address, "start": g.start, "stop": g.stop, "offset": g.offset,
                     "href": sample_href(g.address), "damaged": (batch.rank, i, g.address) in damaged,
                     "masked": not bool(mask[i, g.offset:g.offset + g.stop - g.start].all()),
                     "text": decode(batch.tokens[i, g.offset:g.offset + g.stop - g.start])}
                    for g in batch.segments(i)]
        sequences.append({"slot": i, "sequence": f"e{s.source_epoch}:{s.sequence}", "padding": bool(s.padding),
                          "source": batch.sources[s.source], "digest": bytes(batch.digests[i]).hex(), "held": held,
                          "pad_tokens": width - held, "masked_tokens": int(width - mask[i].sum()),
                          "segments": segments})
    return {"rank": batch.rank, "fingerprint": batch.fingerprint, "sequences": sequences}


def _decoder(catalog: Catalog, spec: RunSpec) -> tuple[Callable[[np.ndarray], str], str | None]:
    """Tokens -> text through the packed field's stored tokenizer (the first source's), else the ids
    joined by spaces; and the tokenizer's name (None: ids)."""
    vocab = packed_vocab(catalog, spec)
    return (lambda tokens: decode_ids(vocab, tokens.tolist())), (vocab.name if vocab is not None else None)


def _escaped(text: str) -> str:
    """Every character inert in one line of HTML (newlines as &#10;: no blank line lets Markdown in)."""
    return html.escape(str(text), quote=True).replace("\r", "&#13;").replace("\n", "&#10;")


def packed_html(batch: dict[str, Any], pad_token: int) -> str:
    """One rank's sequences (a `packed_replay_model` batch) as one line of HTML: a row per slot, each
    document's list entry a link to its sample and its text on the background of its document
    (alternating), the padding after a best_fit or pad sequence's documents hatched, loss-masked tokens faded."""
    rows = ["<tr><th>slot</th><th>sequence</th><th>documents [tokens taken) → at</th><th>text</th>"
            "<th>digest</th></tr>"]
    for s in batch["sequences"]:
        docs, text = [], []
        for j, g in enumerate(s["segments"]):
            cls = "dsi-doc" + (" dsi-damaged" if g["damaged"] else "") + (" dsi-masked" if g["masked"] else "")
            flag = " ⚠ damaged" if g["damaged"] else ""
            where = f"[{g['start']}, {g['stop']}) → {g['offset']}"
            docs.append(f'<a class="{cls}" data-d="{j % 2}" href="{_escaped(g["href"])}" target="_self" '
                        f'title="open {_escaped(g["address"])}">{_escaped(short_address(g["address"]))}</a>'
                        f' {_escaped(where + flag)}')
            title = _escaped(f"{g['address']} {where}")
            text.append(f'<span class="{cls}" data-d="{j % 2}" title="{title}">{_escaped(g["text"])}</span>')
        if s["pad_tokens"]:
            title = f"{s['pad_tokens']} pad tokens (id {pad_token}), masked from the loss"
            text.append(f'<span class="dsi-pad" title="{_escaped(title)}">‹pad ×{s["pad_tokens"]}›</span>')
        name = _escaped(s["sequence"]) + (" <b>pad</b>" if s["padding"] else "")
        rows.append(f'<tr data-slot="{s["slot"]}"><td>{s["slot"]}</td><td>{name}</td>'
                    f'<td class="dsi-docs">{"<br>".join(docs)}</td><td class="dsi-text">{"".join(text)}</td>'
                    f'<td class="dsi-digest">{s["digest"]}</td></tr>')
    return f'{_STYLE}<table class="{PACKED_CLASS}">{"".join(rows)}</table>'
