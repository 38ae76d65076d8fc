"""Command palette entries: screens, go-to, and one "open" command per dataset."""

from __future__ import annotations

from functools import partial
from typing import Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider

__all__ = ["DsinspectCommands"]


class DsinspectCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        out = [
            ("Go to address", app.action_goto, "open NAME[@REF][:INDEX]"),
            ("Catalog", app.action_catalog, "datasets, versions and tags"),
            ("Diff two versions", app.action_diff, "schema, shard and row changes, rows before / after"),
            ("Replay a step", app.action_replay, "the exact batch of (step, rank) from a run spec"),
            ("Open a run record", app.action_run, "steps × ranks, segments, gaps and the check of a run"),
            ("Statistics", app.action_stats, "per field: counts, nulls, value bars, histograms"),
            ("Help", app.action_help, "keys, screens and addresses"),
        ]
        for name in getattr(app, "dataset_names", []):
            out.append((f"Open {name}", partial(app.open_address, name), f"the latest version of {name}"))
        return out

    async def discover(self) -> Hits:
        for text, command, help in self._commands():
            yield DiscoveryHit(text, command, help=help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, command, help in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), command, help=help)
