"""The operator's runtime for one kopf run: its settings, planner pool, thread pools, Prometheus endpoints and
controller, made together and closed together.

kopf's startup handler (`handlers.configure`) makes it into kopf's `memo`, the handlers read it from there, and
the cleanup handler stops it. Nothing is built when a module is imported: an operator run again in one process
(`main.run` after a watch answered 404, tests under kopf's KopfRunner) starts afresh, and importing the handlers
reads no environment variable. No kopf import here (`handlers.py` is kopf's glue).
"""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import random
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from inferplan.observe.prometheus import EndpointsFile
from inferplan.operator import kube
from inferplan.operator.controller import Controller
from inferplan.operator.inventory import NodeGpus
from inferplan.operator.pool import PlannerPool
from inferplan.operator.settings import OperatorSettings

API_THREADS = 4
"""Threads of the operator's own API requests (status writes, ConfigMap and Deployment reads, events)."""


def own_identity() -> str:
    """This process's name in the peering object: POD_ID, as kopf's own default, else user@host/pid/random. The
    checker finds this replica in the peering object by it, so kopf must be given the same (`main.run`)."""
    return os.environ.get("POD_ID") or (
        f"{getpass.getuser()}@{socket.gethostname()}/{os.getpid()}/{random.randrange(16**6):06x}")


@dataclass
class Runtime:
    """What the handlers share within one kopf run."""

    settings: OperatorSettings
    identity: str
    pool: PlannerPool  # planning, calibrating and predicting: CPU work, off the event loop
    api: ThreadPoolExecutor  # the operator's own API requests: blocking, in threads
    observe: ThreadPoolExecutor  # Prometheus queries wait on the network: their own pool, never holding up planning
    endpoints: EndpointsFile
    controller: Controller

    @classmethod
    def build(cls, settings: OperatorSettings, *, identity: str, priority: int,
              nodes: Callable[[], Iterable[NodeGpus]], node_count: Callable[[], int] | None = None) -> Runtime:
        """Everything one run needs, from `settings`; nothing started yet (`Controller.start` starts the checker
        loop, the planner pool starts its workers when first asked)."""
        pool = PlannerPool(settings.planner_processes, settings.planner_threads)
        api = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="api")
        observe = ThreadPoolExecutor(max_workers=settings.observe_threads, thread_name_prefix="observe")
        endpoints = EndpointsFile(settings.prometheus_config)
        controller = Controller(settings, pool=pool, api=api, observe=observe, endpoints=endpoints,
                                identity=identity, priority=priority, nodes=nodes, node_count=node_count)
        return cls(settings, identity, pool, api, observe, endpoints, controller)

    async def stop(self) -> None:
        """Stop the checker loop and its reconciles, then release the pools."""
        await self.controller.stop()
        self.close()

    def close(self) -> None:
        """Release the planner pool and the threads without waiting for them (a call again does nothing). Also
        where kopf's cleanup did not run: a run ended by a failed watch (`main.run`)."""
        self.pool.shutdown()
        for executor in (self.api, self.observe):
            executor.shutdown(wait=False, cancel_futures=True)

    async def check_peering_object(self, logger: logging.Logger) -> None:
        """kopf waits (does no work) until the peering object exists and it is the highest-priority replica in
        it; it does not say so. Say it: an operator that silently does nothing is the worst outcome."""
        peering = self.settings.peering
        if not peering:
            return
        try:
            absent = await asyncio.get_running_loop().run_in_executor(
                self.api, kube.missing_peering_objects, peering, self.settings.namespaces)
        except kube.ApiException as exc:
            if exc.status == 404:
                logger.error("peering %s: the kopf peering CRDs are not installed (kubectl apply -f "
                             "crds/kopf-peering.yaml); the operator waits until they are", peering)
            else:
                logger.warning("peering %s: cannot check the peering object: %s %s", peering, exc.status,
                               exc.reason)
            return
        except Exception as exc:  # the check only helps; kopf's own peering goes on regardless
            logger.warning("peering %s: cannot check the peering object: %s", peering, exc)
            return
        if absent:
            logger.error("peering %s: %s does not exist; the operator waits (does nothing) until it is created "
                         "(docs/operator.md, High availability)", peering, ", ".join(absent))
