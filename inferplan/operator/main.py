"""`inferplan operator`: run the kopf operator with the settings from INFERPLAN_* variables."""

from __future__ import annotations

import logging
import random
import sys
import time

from inferplan.operator.settings import PEERING_PRIORITY_MAX, SettingsError, load_settings

RESTART_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""Pauses before kopf is run again after a watch was answered 404 (`watch_not_found`), one per try in a row."""


def watch_not_found(exc: BaseException) -> bool:
    """Whether kopf's run ended because a watch request was answered 404 Not Found.

    kopf takes any error answer to a watch request but 410 and 429 as fatal and ends its whole run. An API
    server that has just restarted accepts connections, and answers 404 for custom resources, for a few
    seconds before it serves their paths again (the CRDs are re-read from etcd): a watch re-opened in that
    window ended the operator (tests/e2e/test_faults.py, the API server outage): kopf either raised it out of
    `kopf.run` or logged it and stopped. That is not the end of the operator, so kopf is run again (`run`)."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "APINotFoundError" or getattr(seen, "status", None) == 404:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _WatchFailures(logging.Handler):
    """Notes an error logged with a watch answered 404 as its cause: kopf logs the failure of its watcher and
    may then end `kopf.run` without raising it (its orchestrator stops the operator)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None and watch_not_found(record.exc_info[1]):
            self.seen = True


def run() -> int:
    """Run until stopped (SIGTERM/SIGINT). Returns an exit code; 2 for bad settings."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"inferplan operator: {exc}", file=sys.stderr)
        return 2
    import kopf

    from inferplan.operator import handlers  # registers the handlers (and builds nothing)
    from inferplan.operator.runtime import own_identity

    identity = own_identity()  # kopf's and the checker's: it finds this replica in the peering object by it

    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.configure(verbose=settings.log_level == "DEBUG", log_format=kopf.LogFormat.JSON)
    priority = None
    if settings.peering:
        # Replicas of one Deployment share their environment: a priority drawn per process tells them apart
        # (kopf pauses every replica of equal priority, so equal ones must not happen by default).
        priority = settings.peering_priority
        if priority is None:
            priority = random.SystemRandom().randint(1, PEERING_PRIORITY_MAX)
    attempt = 0
    while True:
        failures = _WatchFailures()
        logging.getLogger().addHandler(failures)
        # The startup handler makes this run's runtime from these settings (read once, above) into the memo.
        memo = kopf.Memo({handlers.MEMO_SETTINGS: settings, handlers.MEMO_IDENTITY: identity})
        try:
            kopf.run(
                memo=memo,
                identity=identity,
                standalone=not settings.peering,
                peering_name=settings.peering,
                priority=priority,
                clusterwide=settings.all_namespaces,
                namespaces=list(settings.namespaces),
                liveness_endpoint=liveness,
            )
            if not failures.seen:
                return 0  # stopped (a signal), not ended by a failed watch
        except Exception as exc:
            if not watch_not_found(exc):
                raise
        finally:
            logging.getLogger().removeHandler(failures)
            runtime = handlers.runtime_of(memo)
            if runtime is not None:
                runtime.close()  # kopf's cleanup may not have run (a run ended by a failed watch)
        pause = RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S) - 1)]
        attempt += 1
        logging.getLogger("inferplan").warning(
            "a watch was answered 404 (the API server restarting?): running the operator again in %g s", pause)
        time.sleep(pause)

