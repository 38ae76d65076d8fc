"""The dsinspect Textual app: screens, global keys, the go-to prompt and error notifications."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from dsinspect.errors import DsinspectError
from dsinspect.loaders.store.address import parse_address
from dsinspect.tui.adapter import DataSource
from dsinspect.tui.commands import DsinspectCommands
from dsinspect.tui.messages import LoadFailed, Matches, OpenAddress
from dsinspect.tui.screens.catalog import CatalogScreen
from dsinspect.tui.screens.dataset import DatasetScreen
from dsinspect.tui.screens.diff import DiffScreen
from dsinspect.tui.screens.diff_prompt import DiffPrompt
from dsinspect.tui.screens.goto import GoToScreen
from dsinspect.tui.screens.help import HelpScreen
from dsinspect.tui.screens.replay import ReplayScreen
from dsinspect.tui.screens.run import RunScreen
from dsinspect.tui.screens.sample import SampleScreen
from dsinspect.tui.screens.stats import StatsScreen

__all__ = ["DsinspectApp"]


class DsinspectApp(App):
    """Catalog → dataset → sample, with `g` to jump to any address."""

    CSS_PATH = "app.tcss"
    TITLE = "dsinspect"
    COMMANDS = App.COMMANDS | {DsinspectCommands}
    BINDINGS = [
        Binding("g", "goto", "Go to"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("c", "catalog", "Catalog"),
        Binding("D", "diff", "Diff"),
        Binding("R", "replay", "Replay"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, catalog_url: str | None = None, address: str | None = None, source: DataSource | None = None,
                 transform: str | None = None, run: str | None = None):
        super().__init__()
        self.transform = transform or ""  # the run's transform (package.module:function), the replay default
        self.source = source or DataSource(catalog_url)
        self.start_address = address
        self.start_run = run  # a run record directory to open first
        self.dataset_names: list[str] = []

    def on_mount(self) -> None:
        self.push_screen(CatalogScreen())
        if self.start_address:
            self.open_address(self.start_address)
        if self.start_run:
            self.action_run(self.start_run)
        try:
            self.dataset_names = self.source.catalog.datasets()
        except Exception:  # noqa: BLE001 - the palette just lists fewer commands
            self.dataset_names = []

    # -- navigation ---------------------------------------------------------------------------

    def open_address(self, address: str, matches: Matches | None = None) -> None:
        """Push the dataset screen (and the sample screen when the address has an index); `matches`:
        the filter results the sample was opened from (its n/p step through them)."""
        try:
            addr = parse_address(address)
        except DsinspectError as e:
            self.notify(str(e), title="bad address", severity="error", markup=False)
            return
        version = f"{addr.name}@{addr.ref}"
        top = self.screen
        if (isinstance(top, SampleScreen) and addr.index is not None
                and (top.addr.name, top.addr.ref) == (addr.name, addr.ref)):
            top.matches = matches
            if top.sample is None or top.sample.index != addr.index:
                top.load_sample(addr)  # another sample of the same version: stay on this screen
            return
        if not (isinstance(top, DatasetScreen) and (top.address == version or _same_version(top.version, addr))):
            self.push_screen(DatasetScreen(version, cursor=addr.index or 0))
        if addr.index is not None:
            screen = self._sample_screen(f"{version}:{addr.index}")
            screen.matches = matches
            self.push_screen(screen)

    def _sample_screen(self, address: str) -> SampleScreen:
        """The one installed sample screen, reused (composing a screen costs more than reading a
        sample); a fresh one when it is already on the stack."""
        if not self.is_screen_installed("sample"):
            self.install_screen(SampleScreen(address), "sample")
        screen = self.get_screen("sample")
        if screen in self.screen_stack:
            return SampleScreen(address)
        screen.show_address(address)
        return screen

    def on_open_address(self, message: OpenAddress) -> None:
        self.open_address(message.address, message.matches)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's own entries but "Keys": the palette's "Help" shows the keys, and one help is enough."""
        return (c for c in super().get_system_commands(screen) if c.title != "Keys")

    def on_load_failed(self, message: LoadFailed) -> None:
        self.notify(message.text, title="error", severity="error", timeout=8, markup=False)

    def action_goto(self) -> None:
        def done(address: str | None) -> None:
            if address:
                self.open_address(address)
        self.push_screen(GoToScreen(), done)

    def action_diff(self, a: str = "", b: str = "") -> None:
        def done(pair: tuple[str, str] | None) -> None:
            if pair:
                self.open_diff(*pair)
        self.push_screen(DiffPrompt(a, b), done)

    def open_diff(self, a: str, b: str) -> None:
        self.push_screen(DiffScreen(a, b))

    def action_replay(self, spec: str = "", step: int = 0, rank: str = "0", transform: str | None = None,
                      log: str = "") -> None:
        self.push_screen(ReplayScreen(spec, step, rank, self.transform if transform is None else transform, log))

    def action_run(self, path: str = "") -> None:
        """The run record `path` (or a prompt for one): steps × ranks, segments, gaps, the check."""
        self.push_screen(RunScreen(path, self.transform))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_stats(self) -> None:
        """Statistics of the version on the screen, or of a version asked for."""
        shown = _version_shown(self.screen)
        if shown is not None:
            self.push_screen(StatsScreen(shown))
            return

        def done(address: str | None) -> None:
            if address:
                addr = parse_address(address)
                self.push_screen(StatsScreen(f"{addr.name}@{addr.ref}"))
        self.push_screen(GoToScreen(title="Statistics of a version  NAME[@REF]   e.g. demo-text@v1"), done)

    def action_catalog(self) -> None:
        while len(self.screen_stack) > 2 and not isinstance(self.screen, CatalogScreen):
            self.pop_screen()


def _version_shown(screen: object) -> str | None:
    """NAME@ID of the version a dataset, sample or statistics screen shows (None on other screens)."""
    if isinstance(screen, DatasetScreen) and screen.version is not None:
        return f"{screen.version.name}@{screen.version.id}"
    if isinstance(screen, SampleScreen):
        return f"{screen.addr.name}@{screen.addr.ref}"
    if isinstance(screen, StatsScreen) and screen.b is None:
        return screen.a
    return None


def _same_version(version, addr) -> bool:
    """`addr` names `version` by its id (a dataset screen opened by tag opens its rows by id)."""
    return version is not None and version.name == addr.name and version.id == addr.ref
