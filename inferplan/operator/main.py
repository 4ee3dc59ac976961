"""`inferplan operator`: run the kopf operator with the settings from INFERPLAN_* variables."""

from __future__ import annotations

import sys

from inferplan.operator.settings import SettingsError, load_settings


def run() -> int:
    """Run until stopped (SIGTERM/SIGINT). Returns an exit code; 2 for bad settings."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"inferplan operator: {exc}", file=sys.stderr)
        return 2
    import kopf

    import inferplan.operator.handlers  # noqa: F401  (registers the handlers)

    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    kopf.configure(verbose=settings.log_level == "DEBUG", log_format=kopf.LogFormat.JSON)
    kopf.run(
        standalone=True,
        clusterwide=settings.all_namespaces,
        namespaces=list(settings.namespaces),
        liveness_endpoint=liveness,
    )
    return 0
