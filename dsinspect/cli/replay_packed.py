"""`dsinspect replay` of a packed-sequence run: each sequence of the batch with its documents, the token
range taken from each and where it sits in the sequence, the tokens decoded with the field's stored
tokenizer (segments separated by ` │ `), and each sequence's digest; then the rank's fingerprint. With
--json: every sequence's tokens, segments and whole decoded text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsinspect.cli.output import emit_json, fail, out

if TYPE_CHECKING:
    from rich.table import Table

    from dsinspect.loaders.audit.packed_replay import PackedReplay
    from dsinspect.loaders.audit.replay import SpecSource
    from dsinspect.loaders.store.catalog import Catalog

__all__ = ["replay_packed_cmd"]

_TEXT = 160  # characters of decoded text shown per sequence


def replay_packed_cmd(catalog: Catalog, specs: SpecSource, step: int, rank: str, as_json: bool,
                      max_bytes: int) -> None:
    from dsinspect.loaders.audit.packed_replay import replay_packed

    result = replay_packed(specs, step, rank, catalog, max_bytes=max_bytes)
    if as_json:
        data, decode = result.to_json(), _decoder(catalog, result.spec, limit=None)
        for batch, shown in zip(result.batches, data["batches"]):
            for i, entry in enumerate(shown["sequences"]):
                entry["text"] = decode(batch.tokens[i][:int(batch.held[i])], [g.offset for g in batch.segments(i)])
                entry["held"] = int(batch.held[i])
        emit_json(data)
    else:
        _print(result, catalog)
    if result.damaged:
        rank_, slot, address = result.damaged[0]
        more = f" (and {len(result.damaged) - 1} more)" if len(result.damaged) > 1 else ""
        fail(f"step {step}: rank {rank_} sequence {slot} took tokens from {address}, whose bytes no longer hash to "
             f"its stored row hash{more}", 1)


def _print(result: PackedReplay, catalog: Catalog) -> None:
    spec, seq = result.spec, result.spec.sequences
    ranks = [b.rank for b in result.batches]
    who = "all ranks" if len(ranks) > 1 else f"rank {ranks[0]}"
    labels = (" (+1 shared with the next, for labels)" if seq.overlap else " (+1 for labels)") if seq.labels else ""
    out.print(f"[bold]step {result.step}[/] (epoch {result.epoch}) · {who} of {spec.world_size} · batch "
              f"{spec.batch_size} · sequences of {seq.length:,} tokens{labels} · {seq.packing.value} · spec "
              f"{spec.hash[:12]}")
    decode = _decoder(catalog, spec)
    for batch in result.batches:
        out.print(_table(batch, decode, len(ranks) > 1))
    for rank, slot, address in result.damaged:
        out.print(f"[red]damaged[/]: rank {rank} sequence {slot}: {address} no longer hashes to its stored row hash")
    for rank, fp in result.fingerprints.items():
        out.print(f"fingerprint (stored)       rank {rank}: [bold]{fp}[/]")
    if result.record_end is not None and result.step > result.record_end:
        out.print(f"[yellow]note[/]: the run's record ends at step {result.record_end}; step {result.step} is past "
                  "it: this batch is its spec's, no logged line vouches for it")


def _table(batch, decode, many: bool) -> Table:
    from rich.table import Table
    from rich.text import Text

    from dsinspect.inspect.packed import short_address
    from dsinspect.term.render import clean

    table = Table(title=f"rank {batch.rank}" if many else "sequences", title_justify="left")
    for col in ("slot", "sequence", "documents [tokens taken) → at", "text", "digest"):
        table.add_column(col, justify="right" if col == "slot" else "left", overflow="fold")
    for i, s in enumerate(batch.sequences):
        segments = batch.segments(i)
        where = "\n".join(f"{short_address(g.address)} [{g.start}, {g.stop}) → {g.offset}" for g in segments)
        held = int(batch.held[i])
        text = decode(batch.tokens[i][:held], [g.offset for g in segments])
        if held < batch.tokens.shape[1]:  # best_fit, pad: the room after the documents
            text += f" ‹pad ×{batch.tokens.shape[1] - held}›"
        name = f"e{s.source_epoch}:{s.sequence:,}" + (" pad" if s.padding else "")
        # data, never markup, and never terminal control: a document's text is shown as it is
        table.add_row(str(i), name, Text(where), Text(clean(text)), bytes(batch.digests[i]).hex()[:16])
    return table


def _decoder(catalog: Catalog, spec, limit: int | None = _TEXT):
    """Tokens -> text with ` │ ` at each document boundary (cut to `limit` characters): through the stored
    tokenizer of the packed field (the first source's), else the ids."""
    from dsinspect.inspect.packed import decode_ids, packed_vocab

    vocab = packed_vocab(catalog, spec)

    def decode(tokens, cuts: list[int]) -> str:
        ids = tokens.tolist()
        text = " │ ".join(decode_ids(vocab, ids[a:b]) for a, b in zip(cuts, cuts[1:] + [len(ids)]))
        return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"

    return decode
