"""kopf's handlers: the glue between kopf and the controller (`controller.py`), nothing else.

kopf watches the plans and the nodes and runs no per-plan handler state: nodes feed a small index of GPUs, and
each plan's events go to the controller, which decides what to do and does it. The startup handler builds the
controller from the INFERPLAN_* settings; the probe reports whether its loop runs.
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import kubernetes

from inferplan import __version__
from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator import kube, metrics
from inferplan.operator.controller import Controller
from inferplan.operator.inventory import NodeGpus, node_gpus
from inferplan.operator.pool import PlannerPool
from inferplan.operator.settings import load_settings
from inferplan.resource import GROUP, PLURAL, VERSION

SETTINGS = load_settings()
# This process's name in the peering object (kopf.run gets it from main.py): POD_ID as kopf's own default, else
# user@host/pid/random.
IDENTITY = os.environ.get("POD_ID") or (
    f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}/{random.randrange(16**6):06x}")
PLANNER = PlannerPool(SETTINGS.planner_processes, SETTINGS.planner_threads)
# The operator's own API requests (status writes, ConfigMap and Deployment reads, events): blocking, in threads.
API_EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="api")
# Prometheus queries wait on the network: their own pool, so a slow Prometheus never holds up planning.
OBSERVE_EXECUTOR = ThreadPoolExecutor(max_workers=SETTINGS.observe_threads, thread_name_prefix="observe")
ENDPOINTS = EndpointsFile(SETTINGS.prometheus_config)


class _Glue:
    """What the handlers share within one kopf run: the controller and the node index kopf hands them."""

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.index: kopf.Index | None = None
        self.metrics_port: int | None = None  # the metrics server is started once per process

    def nodes(self) -> list[NodeGpus]:
        return [value for store in (self.index or {}).values() for value in store]


_GLUE = _Glue()


class _QuietSuccess(logging.Filter):
    """Drops kopf's INFO line "Handler 'plan_event' succeeded.": one per watch event of every plan, saying
    nothing; a failing handler is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (record.levelno == logging.INFO and message.endswith(" succeeded.")
                    and "'plan_event'" in message)


_QUIET = _QuietSuccess()


class _NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base, for an operator without change handlers: nothing.

    On every event kopf builds the object's "essence" (a deep copy of the whole body, status included, then
    trimmed) to diff it with the last handled one for on.create/update handlers. This operator registers
    none (each event goes to the controller, which compares what it needs), so the copy is work for nothing:
    about a fifth of the event loop's busy time over 1,000 plans (bench/bench_operator_load.py --profile, where
    `copy.deepcopy` was the largest own time). Nothing is stored either, as before (the default storage writes
    only for change handlers)."""

    def build(self, *, body: kopf.Body, extra_fields: object = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, logger: logging.Logger, **kwargs: Any) -> None:
    # Silent watch stalls are kopf's best-known failure: let the server end watches, the client notice.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING  # kopf's own events only for problems
    settings.persistence.diffbase_storage = _NoDiffBase()
    logging.getLogger().setLevel(SETTINGS.log_level)
    if _QUIET not in logging.getLogger("kopf.objects").filters:
        logging.getLogger("kopf.objects").addFilter(_QUIET)
    if SETTINGS.metrics_port and _GLUE.metrics_port is None:
        from prometheus_client import start_http_server

        start_http_server(SETTINGS.metrics_port, registry=metrics.REGISTRY)
        _GLUE.metrics_port = SETTINGS.metrics_port  # once per process: kopf may be run again (main.run)
    peering = "off"
    if SETTINGS.peering:
        settings.peering.lifetime = SETTINGS.peering_lifetime
        settings.peering.stealth = True  # no log line per keep-alive
        peering = (f"{SETTINGS.peering} as {IDENTITY} priority={settings.peering.priority} "
                   f"lifetime={settings.peering.lifetime}s")
        await _check_peering_object(logger)
    # A fresh controller per run (tests run the operator several times in one process): nothing carried over.
    _GLUE.index = kwargs.get("gpu_nodes")
    _GLUE.controller = Controller(SETTINGS, pool=PLANNER, api=API_EXECUTOR, observe=OBSERVE_EXECUTOR,
                                  endpoints=ENDPOINTS, identity=IDENTITY, priority=settings.peering.priority,
                                  nodes=_GLUE.nodes)
    _GLUE.controller.start()
    logger.info("inferplan operator %s: namespaces=%s resync=%ss check=%ss metrics=:%s planner=%s peering=%s",
                __version__, ",".join(SETTINGS.namespaces) or "all", SETTINGS.resync_seconds, SETTINGS.check_seconds,
                SETTINGS.metrics_port or "off",
                f"{SETTINGS.planner_processes} processes" if SETTINGS.planner_processes
                else f"{SETTINGS.planner_threads} threads", peering)


@kopf.on.cleanup()
async def stop(**_: Any) -> None:
    if _GLUE.controller is not None:
        await _GLUE.controller.stop()
    PLANNER.shutdown()


@kopf.on.probe(id="checker")
async def checker_probe(**_: Any) -> str:
    """Part of /healthz: a checker loop that ended (a bug) makes the operator unhealthy, to be restarted."""
    if _GLUE.controller is None or not _GLUE.controller.running():
        raise kopf.PermanentError("the plans' checker loop is not running")
    return "running"


async def _check_peering_object(logger: logging.Logger) -> None:
    """kopf waits (does no work) until the peering object exists and it is the highest-priority replica in it;
    it does not say so. Say it: an operator that silently does nothing is the worst outcome."""
    try:
        absent = await asyncio.get_running_loop().run_in_executor(
            API_EXECUTOR, kube.missing_peering_objects, SETTINGS.peering, SETTINGS.namespaces)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            logger.error("peering %s: the kopf peering CRDs are not installed (kubectl apply -f "
                         "crds/kopf-peering.yaml); the operator waits until they are", SETTINGS.peering)
        else:
            logger.warning("peering %s: cannot check the peering object: %s %s", SETTINGS.peering, exc.status,
                           exc.reason)
        return
    except Exception as exc:  # the check only helps; kopf's own peering goes on regardless
        logger.warning("peering %s: cannot check the peering object: %s", SETTINGS.peering, exc)
        return
    if absent:
        logger.error("peering %s: %s does not exist; the operator waits (does nothing) until it is created "
                     "(docs/operator.md, High availability)", SETTINGS.peering, ", ".join(absent))


@kopf.index("", "v1", "nodes")
def gpu_nodes(name: str, labels: dict, spec: dict, status: dict, **_: Any) -> dict | None:
    """One small value per GPU node (never the whole object)."""
    info = node_gpus(name, labels, status.get("allocatable") or {}, bool(spec.get("unschedulable")),
                     status.get("conditions") or [])
    return {name: info} if info is not None else None


@kopf.on.event(GROUP, VERSION, PLURAL)
async def plan_event(event: dict, meta: dict, spec: dict, status: dict, namespace: str, name: str,
                     gpu_nodes: kopf.Index, **_: Any) -> None:
    """Every event of every plan (the initial listing too), to the controller."""
    _GLUE.index = gpu_nodes
    controller = _GLUE.controller
    if controller is None:
        return  # not started (kopf runs the startup handlers first)
    if event.get("type") == "DELETED":
        controller.forget(meta["uid"], namespace, name)
    else:
        controller.seen(meta["uid"], namespace, name, int(meta.get("generation") or 0), spec, status or None)
