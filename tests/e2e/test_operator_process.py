"""`inferplan operator` as it is deployed: a process configured by INFERPLAN_* variables, serving /metrics
and /healthz, logging JSON lines, and stopping cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from .conftest import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except OSError:
        return None


def test_the_operator_process_serves_metrics_and_health_and_stops_on_sigterm(k8s: dict[str, Any]) -> None:
    metrics_port, health_port = free_port(), free_port()
    env = dict(os.environ, KUBECONFIG=str(k8s["kubeconfig"]), INFERPLAN_METRICS_PORT=str(metrics_port),
               INFERPLAN_HEALTH_PORT=str(health_port), INFERPLAN_CHECK_SECONDS="1")
    exe = Path(sys.executable).with_name("inferplan")
    process = subprocess.Popen([str(exe), "operator"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    try:
        metrics = wait_for(lambda: fetch(f"http://127.0.0.1:{metrics_port}/metrics"), timeout_s=30)
        assert metrics[0] == 200 and "inferplan_reconcile_duration_seconds" in metrics[1]
        health = wait_for(lambda: fetch(f"http://127.0.0.1:{health_port}/healthz"), timeout_s=30)
        assert health[0] == 200
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    lines = [line for line in output.splitlines() if line.startswith("{")]
    assert lines, output
    assert any("inferplan operator" in json.loads(line).get("message", "") for line in lines)


def test_bad_settings_stop_the_operator_with_the_variable_named() -> None:
    exe = Path(sys.executable).with_name("inferplan")
    done = subprocess.run([str(exe), "operator"], env=dict(os.environ, INFERPLAN_RESYNC_SECONDS="soon"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "INFERPLAN_RESYNC_SECONDS must be a number" in done.stderr
