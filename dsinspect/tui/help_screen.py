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

| key | where | does |
|---|---|---|
| `g` | anywhere | go to an address |
| `ctrl+p` | anywhere | command palette (datasets, screens, go to) |
| `?` / `f1` | anywhere | this help |
| `D` | anywhere | diff two versions |
| `d` | dataset | diff this version against its parent |
| `R` | anywhere | replay: spec file, step, rank or `all` → the batch |
| `]` / `[` | replay | next / previous step |
| `escape` | any screen | back |
| `q` | anywhere | quit |
| `up` `down` `pgup` `pgdn` `home` `end` | sample table | move; rows load by row group as you scroll |
| `enter` / double click | lists and tables | open |
| `s` `m` `h` | dataset | samples, schema, history tabs |
| `tab` | sample | next field list / view |
| `left` `right` | token view | move the token cursor (its id and bytes are shown) |
| `n` / `p` | sample | next / previous sample |
| `.` / `,` | video field | next / previous frame |
| `up` `down` `pgup` `pgdn` `home` `end` | trajectory steps (`tab` into them) | any step; ▲ marks it on the sparklines |
| `x` | sample | show or hide raw hex |
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Markdown(HELP)
