"""kopf's handlers (inferplan/operator/handlers.py): importing them builds nothing and reads no setting; the
startup handler makes the run's runtime into kopf's memo, the other handlers use it from there, and the cleanup
handler stops it. The handlers under kopf itself, against a real API server: tests/e2e/test_operator.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
from typing import Any

import kopf
import pytest

from inferplan.operator import handlers
from inferplan.operator.inventory import NodeGpus, node_gpus
from inferplan.operator.settings import OperatorSettings

SPEC = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "workload": {"requestsPerSecond": "1"}}


def test_importing_the_handlers_reads_no_setting_and_starts_nothing() -> None:
    # A bad setting does not fail the import (the startup handler reads the settings), and no thread is started.
    code = ("import threading; import inferplan.operator.handlers as h; "
            "assert threading.active_count() == 1, threading.enumerate(); "
            "assert not any(hasattr(h, n) for n in ('SETTINGS', 'PLANNER', 'API_EXECUTOR', '_GLUE')); print('ok')")
    env = {**os.environ, "INFERPLAN_RESYNC_SECONDS": "soon", "INFERPLAN_PROMETHEUS_CONFIG": "/nonexistent.yaml"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def l40s(name: str) -> NodeGpus:
    node = node_gpus(name, {"nvidia.com/gpu.product": "NVIDIA-L40S"}, {"nvidia.com/gpu": "1"}, False,
                     [{"type": "Ready", "status": "True"}])
    assert node is not None
    return node


def test_startup_makes_the_runtime_into_the_memo_and_cleanup_stops_it() -> None:
    own = OperatorSettings(metrics_port=0, planner_processes=0, check_seconds=600)
    index: dict[str, list[NodeGpus]] = {"l40s-0": [l40s("l40s-0")]}  # kopf's live index of GPU nodes

    async def one_run() -> None:
        memo = kopf.Memo({handlers.MEMO_SETTINGS: own, handlers.MEMO_IDENTITY: "replica-a"})
        settings = kopf.OperatorSettings()
        with pytest.raises(kopf.PermanentError):  # not started yet
            await handlers.checker_probe(memo=memo)
        await handlers.configure(settings=settings, memo=memo, logger=logging.getLogger("test"), gpu_nodes=index)
        runtime = handlers.runtime_of(memo)
        assert runtime is not None
        assert runtime.settings is own and runtime.identity == "replica-a"  # as main.run gave them: read once
        assert settings.watching.server_timeout == 300 and isinstance(settings.persistence.diffbase_storage,
                                                                      handlers._NoDiffBase)
        assert await handlers.checker_probe(memo=memo) == "running"
        # The controller sees the nodes as kopf's index has them, now.
        assert runtime.controller.inventory().available() == {"L40S": 1}
        index["l40s-1"] = [l40s("l40s-1")]
        assert runtime.controller.inventory().available() == {"L40S": 2}
        # A node changed in place (cordoned): kopf applies it to the index, then calls node_event.
        index["l40s-1"] = [dataclasses.replace(l40s("l40s-1"), schedulable=False, problems=("unschedulable",))]
        await handlers.node_event(memo=kopf.Memo(memo))
        assert runtime.controller.inventory().available() == {"L40S": 1}
        # A plan's events reach the controller through the object's memo (kopf's copy of the run's).
        event: dict[str, Any] = {"meta": {"uid": "u1", "generation": 2}, "spec": SPEC, "status": {},
                                 "namespace": "ns", "name": "p", "memo": kopf.Memo(memo)}
        await handlers.plan_event(event={"type": "ADDED"}, **event)
        plan = runtime.controller.registry.plans["u1"]
        assert (plan.namespace, plan.name, plan.generation, plan.spec) == ("ns", "p", 2, SPEC)
        await handlers.plan_event(event={"type": "DELETED"}, **event)
        assert "u1" not in runtime.controller.registry.plans
        await handlers.stop(memo=memo)
        assert not runtime.controller.running()
        with pytest.raises(RuntimeError):  # its threads are released
            runtime.api.submit(print)
        with pytest.raises(kopf.PermanentError):
            await handlers.checker_probe(memo=memo)

    asyncio.run(one_run())


def test_without_settings_from_main_the_startup_reads_them_and_refuses_a_bad_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERPLAN_RESYNC_SECONDS", "soon")

    async def start() -> None:
        await handlers.configure(settings=kopf.OperatorSettings(), memo=kopf.Memo(), logger=logging.getLogger("t"),
                                 gpu_nodes={})

    with pytest.raises(kopf.PermanentError, match="INFERPLAN_RESYNC_SECONDS must be a number"):
        asyncio.run(start())
    monkeypatch.setenv("INFERPLAN_RESYNC_SECONDS", "42")
    monkeypatch.setenv("INFERPLAN_METRICS_PORT", "0")
    monkeypatch.setenv("INFERPLAN_PLANNER_PROCESSES", "0")
    monkeypatch.setenv("POD_ID", "pod-7")

    async def one_run() -> None:
        memo = kopf.Memo()
        await handlers.configure(settings=kopf.OperatorSettings(), memo=memo, logger=logging.getLogger("t"),
                                 gpu_nodes={})
        runtime = handlers.runtime_of(memo)
        assert runtime is not None
        assert runtime.settings.resync_seconds == 42 and runtime.identity == "pod-7"
        await handlers.stop(memo=memo)

    asyncio.run(one_run())


def test_a_node_that_loses_its_gpu_label_leaves_kopfs_index() -> None:
    # kopf keeps an object's last indexed value where its handler returns None: a node whose GPU product label was
    # removed stayed counted until the operator restarted. The handler's {} replaces it with nothing.
    from kopf._core.engines.indexing import OperatorIndexer

    from inferplan.operator.inventory import build_inventory

    ready = {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}
    labelled = handlers.gpu_nodes(name="a100-1", labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                                  spec={}, status=ready)
    unlabelled = handlers.gpu_nodes(name="a100-1", labels={}, spec={}, status=ready)  # kept, to be named
    no_gpus = handlers.gpu_nodes(name="a100-1", labels={}, spec={}, status={"allocatable": {"cpu": "8"}})
    assert no_gpus == {}
    indexer = OperatorIndexer()
    indexer.replace(("", "a100-1"), labelled)
    assert build_inventory(n for store in indexer.index.values() for n in store).available() == {
        "A100-SXM4-80GB": 8}
    indexer.replace(("", "a100-1"), unlabelled)
    assert build_inventory(n for store in indexer.index.values() for n in store).available() == {}
    indexer.replace(("", "a100-1"), no_gpus)
    assert [n for store in indexer.index.values() for n in store] == []
