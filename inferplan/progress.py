"""What a long command needs outside the planner: progress on stderr, and result files written whole.

`ProgressLine` shows how far a long run is (`inferplan calibrate`, `bench/leave_one_source_out.py`): on a terminal
one line redrawn in place (`[#####.....] sweep 2/3 term 14/55  loss 1234.5  ~40 s left`), elsewhere (a log, CI)
plain lines, at most one every `every_s` seconds, so that a log is not flooded. The time left is the time spent so
far scaled by the share still to do. Everything written is ASCII.

`write_atomically` writes a file through a temporary file in the same directory and `os.replace`, so a reader, or an
interrupt (Ctrl-C) in the middle of the write, finds the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 20
TTY_REDRAW_S = 0.1  # a terminal line is redrawn at most this often (and always when the run is done)


def format_duration(seconds: float) -> str:
    """`seconds` rounded for a person: `40 s`, `7 min`, `1 h 05 min`."""
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` writes to (stdout's, or COLUMNS, when it cannot tell)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns


class ProgressLine:
    """A progress report on `stream` (a terminal: one line redrawn with a bar; otherwise plain lines).

    Call `update(done, total, text)` as work gets done (`done` and `total` in any unit whose share tracks time),
    `clear()` before writing other lines to the same terminal, and `close()` (or leave the `with` block) at the end.
    `clock` (seconds) and `columns` (the terminal's width) are for tests.
    """

    def __init__(self, stream: TextIO, *, every_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 columns: int | None = None) -> None:
        self.stream = stream
        self.terminal = _is_terminal(stream)
        self.every_s = every_s
        self.clock = clock
        self.columns = columns
        self.started = clock()
        self._last_write: float | None = None
        self._drawn = 0  # characters of the line now on the terminal

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def line(self, done: float, total: float, text: str, width: int | None = None) -> str:
        """The report of `done` out of `total`: the bar (on a terminal), `text` and the time left, in at most
        `width` characters (`text` is cut first)."""
        share = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
        elapsed = self.clock() - self.started
        if share >= 1.0:
            timing = f"done in {format_duration(elapsed)}"
        elif share > 0.0:
            timing = f"~{format_duration(elapsed * (1.0 - share) / share)} left"
        else:
            timing = ""
        head = f"[{'#' * round(share * BAR_WIDTH):.<{BAR_WIDTH}s}] " if self.terminal else f"{100 * share:3.0f}% "
        text, tail = _ascii(text), f"  {timing}" if timing else ""
        if width is not None and len(head) + len(text) + len(tail) > width:
            text = text[:max(width - len(head) - len(tail) - 3, 0)] + "..."
        return f"{head}{text}{tail}"[:width]

    def update(self, done: float, total: float, text: str) -> None:
        """Report `done` out of `total`; written only when the rate limit allows, or when the run is done."""
        now = self.clock()
        finished = total > 0 and done >= total
        every = TTY_REDRAW_S if self.terminal else self.every_s
        if self._last_write is not None and now - self._last_write < every and not finished:
            return
        self._last_write = now
        if self.terminal:
            width = (self.columns or _columns(self.stream)) - 1  # the last column would wrap
            line = self.line(done, total, text, max(width, 10))
            self.stream.write("\r" + line.ljust(self._drawn))
            self._drawn = len(line)
        else:
            self.stream.write(self.line(done, total, text) + "\n")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the line on a terminal (to write something else there); it is drawn again on the next update."""
        if self.terminal and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0
            self._last_write = None

    def close(self) -> None:
        """End the report: on a terminal the line stays and what follows starts on a new line."""
        if self.terminal and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = 0


def write_atomically(path: Path | str, text: str, encoding: str = "utf-8") -> None:
    """Write `text` to `path` whole: to a temporary file next to it, then renamed over it (`os.replace`).

    An exception or an interrupt before the rename leaves `path` as it was and removes the temporary file.
    """
    path = Path(path)
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    else:  # what open() would have made: mkstemp's file is private (0600)
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding=encoding) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["ProgressLine", "format_duration", "write_atomically"]
