"""`inferplan operator`: run the kopf operator with the settings from INFERPLAN_* variables."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time

from inferplan.operator.settings import PEERING_PRIORITY_MAX, SettingsError, load_settings


def run() -> int:
    """Run until stopped (SIGTERM/SIGINT). Returns an exit code; 2 for bad settings."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"inferplan operator: {exc}", file=sys.stderr)
        return 2
    import kopf

    from inferplan.operator import handlers  # registers the handlers

    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.configure(verbose=settings.log_level == "DEBUG", log_format=kopf.LogFormat.JSON)
    priority = None
    if settings.peering:
        # Replicas of one Deployment share their environment: a priority drawn per process tells them apart
        # (kopf pauses every replica of equal priority, so equal ones must not happen by default).
        priority = settings.peering_priority
        if priority is None:
            priority = random.SystemRandom().randint(1, PEERING_PRIORITY_MAX)
    kopf.run(
        identity=handlers.IDENTITY,  # the checker finds this replica in the peering object by it
        standalone=not settings.peering,
        peering_name=settings.peering,
        priority=priority,
        clusterwide=settings.all_namespaces,
        namespaces=list(settings.namespaces),
        liveness_endpoint=liveness,
    )
    return 0


def planner_worker_init(parent: int) -> None:
    """Set up a planner worker process (handlers.PlannerPool); here, in a module that imports nothing heavy.

    Signals are the operator's to handle: it stops the pool when it stops (Ctrl+C and a SIGTERM to the whole
    process group would otherwise end workers in the middle of a plan). A worker exits by itself when the
    operator is gone: an operator killed with SIGKILL cannot stop its pool, and an orphan would wait forever.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=exit_with_parent, name="exit-with-operator", daemon=True).start()
