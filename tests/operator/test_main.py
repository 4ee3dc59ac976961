"""`inferplan operator` (operator/main.py): kopf is run again when its run ends on a watch answered 404, as it
does when the API server has just restarted and serves custom resources' paths a few seconds late; any other
ending is the operator's."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from kopf._cogs.clients.errors import APINotFoundError  # what kopf raises; it exports no public name for it

from inferplan.operator import main


def _ended_by_a_404_watch() -> BaseException:
    """The exception kopf.run re-raises, as the operator's log shows it: the watcher's 404 as the cause."""
    try:
        try:
            raise APINotFoundError({"message": "the server could not find the requested resource", "code": 404},
                                   status=404, headers={})
        except APINotFoundError as exc:
            raise RuntimeError("a task of the operator failed") from exc
    except RuntimeError as outer:
        return outer


def test_a_watch_answered_404_is_recognised_through_the_causes() -> None:
    assert main.watch_not_found(_ended_by_a_404_watch())
    assert not main.watch_not_found(RuntimeError("something else"))
    assert not main.watch_not_found(kopf.PermanentError("permanent"))


def test_kopf_is_run_again_after_a_404_watch_and_anything_else_ends_the_operator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERPLAN_METRICS_PORT", "0")
    monkeypatch.setenv("INFERPLAN_HEALTH_PORT", "0")
    endings: list[BaseException | None] = [_ended_by_a_404_watch(), _ended_by_a_404_watch(), None]
    runs: list[dict[str, Any]] = []
    pauses: list[float] = []

    def run(**kwargs: Any) -> None:
        runs.append(kwargs)
        ending = endings.pop(0)
        if ending is not None:
            raise ending

    monkeypatch.setattr(kopf, "run", run)
    monkeypatch.setattr(main.time, "sleep", pauses.append)
    assert main.run() == 0
    assert len(runs) == 3 and pauses == [1.0, 2.0]  # backoff grows per try in a row
    assert all(r == runs[0] for r in runs)  # the same identity, namespaces and peering each time

    # kopf may also log its watcher's failure and stop without raising it: that ending is run again too.
    import logging

    def logged_and_stopped() -> None:
        logging.getLogger("kopf.reactor").error("Multidimensional multitasker has failed: ",
                                                exc_info=_ended_by_a_404_watch())

    endings[:] = ["log", None]
    runs.clear()
    pauses.clear()

    def run_logging(**kwargs: Any) -> None:
        runs.append(kwargs)
        if endings.pop(0) == "log":
            logged_and_stopped()

    monkeypatch.setattr(kopf, "run", run_logging)
    assert main.run() == 0
    assert len(runs) == 2 and pauses == [1.0]

    monkeypatch.setattr(kopf, "run", run)
    endings[:] = [ValueError("a bug")]
    with pytest.raises(ValueError, match="a bug"):
        main.run()


def test_the_settings_are_read_once_and_given_to_the_run_with_kopfs_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferplan.operator import handlers
    from inferplan.operator.settings import load_settings

    monkeypatch.setenv("INFERPLAN_METRICS_PORT", "0")
    monkeypatch.setenv("INFERPLAN_RESYNC_SECONDS", "42")
    reads: list[object] = []

    def counted() -> object:
        reads.append(None)
        return load_settings()

    monkeypatch.setattr(main, "load_settings", counted)
    closed: list[str] = []

    class Left:
        """A runtime whose run ended without kopf's cleanup (a failed watch)."""

        def close(self) -> None:
            closed.append("closed")

    runs: list[dict[str, Any]] = []

    def run(**kwargs: Any) -> None:
        runs.append(kwargs)
        kwargs["memo"][handlers.MEMO_RUNTIME] = Left()
        if len(runs) == 1:
            raise _ended_by_a_404_watch()

    monkeypatch.setattr(kopf, "run", run)
    monkeypatch.setattr(main.time, "sleep", lambda _: None)
    assert main.run() == 0
    assert len(reads) == 1 and len(runs) == 2
    for kwargs in runs:
        memo = kwargs["memo"]
        assert memo[handlers.MEMO_SETTINGS].resync_seconds == 42
        assert memo[handlers.MEMO_IDENTITY] == kwargs["identity"] == runs[0]["identity"]
    assert runs[0]["memo"] is not runs[1]["memo"]  # each run starts afresh
    assert closed == ["closed", "closed"]  # released whether or not kopf's cleanup ran
