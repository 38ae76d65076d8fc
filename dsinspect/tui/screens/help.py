"""The help screen: what each screen shows and the keys that drive it."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

__all__ = ["HelpScreen", "HELP"]

HELP = """\
# dsinspect — terminal UI

Addresses are `NAME[@REF][:INDEX]`, e.g. `demo-text@v1:17`: REF is a tag or a version-id prefix,
INDEX a row number (digits 0-9 only: no sign, no spaces).

A run record (a `record_dir` a job wrote: `specs/`, `fingerprints/`) opens with `dsinspect tui RUN`
(its path, or its name in `<catalog>/runs`), with `r` on a replay of it, or from the command palette
("Open a run record"): its segments, gaps and a grid of steps × ranks (█ kept, ✗ gap, ░ only
superseded lines, ! the check's first divergence; a long run is bucketed, a bucket with any gap step
is a gap). A stream learner's record (`learner-specs/`, e.g. `dsinspect tui demo-learner`) opens alike; a
cell opens the learner step: the rollouts that rank consumed, read back from the stream, each with its
staleness (✗ beyond the bound, `newer` when negative), and the fingerprint recorded beside the recomputed.

A run that packs documents into sequences (its spec has `sequences`) replays as a row per sequence
(`e<epoch>:<index>`, then `pad` and dimmed for a repeat filling the epoch's last batch): its documents
decoded with the stored tokenizer and set apart, best_fit or pad padding as `‹pad ×n›`. Enter on a row opens
the sequence's segments (each document's address, token range and place in the sequence); enter on a
segment opens that document as a sample.

In a field (the replay form, the filter box) every printable key is text, `D` `R` `[` `]` included:
escape leaves a field, and then the screen's keys act; tab moves between fields (replay: spec → step →
rank → transform → log). The replay step takes digits only: anything else is refused with a message.

The dataset screen's filter box (`/`) takes the syntax of `dsinspect query --where`: an SQL condition
over the view `v` (`_index`, the stored fields, derived values such as `tokens_len`, `text_chars`,
`image_width`, `image_orientation`, `video_frames`, `trajectory_return`), e.g.
`tokens_len > 100 AND lang = 'en'`. Enter runs it; the matches page like the full table, enter opens one.

| key | where | does |
|---|---|---|
| `g` | anywhere | go to an address |
| `ctrl+p` | anywhere | command palette (datasets, screens, go to) |
| `?` / `f1` | anywhere | this help |
| `D` | anywhere | diff two versions |
| `d` | dataset | diff this version against its parent |
| `R` | anywhere | replay: spec file, step, rank or `all` → the batch |
| `]` / `[` | replay | next / previous step |
| `r` | replay of a run record | open the run: steps × ranks, segments, gaps |
| `R` | run | replay the highlighted (step, rank), the run filled in |
| `enter` | packed replay | a sequence's segments; on a segment, that document |
| `enter` | run grid | replay that (step, rank) (a bucket: its first gap, else first step), checked against the record |
| `enter` / `R` | learner's run grid | the rollouts that (step, rank) consumed, with their staleness |
| `k` | run | check the whole record against the catalog (progress shown; marks the divergence) |
| `k` | learner's run | check the record against its stream (the selection run again; marks the divergence) |
| `]` / `[` | learner step | next / previous step |
| `a` | learner step | all ranks, or back to the rank the step was opened on |
| `enter` | learner step | open the rollout in the rollout view (the stream as that step read it) |
| `z` / `Z` | run | zoom into the highlighted bucket / back to the whole run |
| `n` / `p` | run with more than 64 ranks | next / previous 64 ranks |
| `escape` | any screen | back |
| `q` | anywhere | quit |
| `up` `down` `pgup` `pgdn` `home` `end` | sample table | move; rows load by row group as you scroll |
| `enter` / double click | lists and tables | open |
| `s` `m` `S` `h` | dataset | samples, schema, shards, history tabs |
| `t` | dataset | statistics per field: counts, nulls, value bars, histograms (token counts, sizes, returns) |
| `t` | diff | both versions' statistics side by side, numbers on shared bins |
| `/` | dataset | filter the samples (below); escape or an empty box: the full table |
| `tab` | sample | next field list / view |
| `left` `right` | token view | move the token cursor (its id and bytes are shown) |
| `n` / `p` | sample | next / previous sample; opened from a filter's matches: the next / previous match |
| `.` / `,` | video field | next / previous frame |
| `up` `down` `pgup` `pgdn` `home` `end` | trajectory steps (`tab` into them) | any step; ▲ marks it on the sparklines |
| `x` | sample | show or hide raw hex |
| `left` `right` | rollout view (LLM rollouts) | move the token cursor: its id, piece, every value and findings |
| `v` | rollout view, group | colour the tokens by the next value (gap, sampler, learner, ref, advantage, mask) |
| `f` / `F` | rollout view | next / previous token with a finding |
| `G` | rollout view | the rollout's group side by side: `left` `right` pick, `enter` opens one |
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Markdown(HELP)
