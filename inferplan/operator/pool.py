"""The planner pool: the operator's computing (`reconcile.reconcile_plan`, an observation's calibration and
prediction: `observing.assess`) off its event loop, in worker processes.

Planning is CPU-bound Python: in worker processes every core plans, and the event loop never waits for the GIL
behind a planner thread. No kopf or kubernetes import here: a worker process imports this module (for
`planner_worker_init`) and the planner, nothing of the operator's API side.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from inferplan.operator.inventory import Inventory
from inferplan.operator.reconcile import Outcome, reconcile_plan
from inferplan.operator.retry import RetryLater

T = TypeVar("T")


class PlannerPool:
    """Runs `reconcile_plan` off the event loop: in `processes` worker processes, or in `threads` threads of
    this process when `processes` is 0. Bounded: that many plans are planned at once, the others queue."""

    def __init__(self, processes: int, threads: int) -> None:
        self.processes, self.threads = processes, threads
        self._executor: Executor | None = None

    def _current(self) -> Executor:
        if self._executor is None:
            if self.processes:
                # spawn, not fork: the operator runs threads (kopf's, the metrics server's), and a forked child
                # could inherit a lock that one of them held at that moment.
                self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                     initializer=planner_worker_init, initargs=(os.getpid(),))
            else:
                self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="planner")
        return self._executor

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`function(*args, **kwargs)` in a worker (arguments and result are pickled: plain data); RetryLater
        when a worker died."""
        executor = self._current()
        try:
            return await asyncio.get_running_loop().run_in_executor(executor,
                                                                    functools.partial(function, *args, **kwargs))
        except BrokenProcessPool:
            # A worker died (killed, out of memory) and took every queued call with it: start a new pool, and try
            # those plans again shortly.
            if self._executor is executor:
                self._executor = None
                executor.shutdown(wait=False, cancel_futures=True)
            raise RetryLater("a planner process died; planning again", delay=1) from None

    async def plan(self, spec: Mapping[str, Any], inventory: Inventory, verify: bool,
                   status: Mapping[str, Any] | None, name: str, namespace: str,
                   current_deployment: Mapping[str, Any] | None) -> Outcome:
        """`reconcile_plan(spec, inventory, None, verify, status, ...)` in a worker (the spec's ConfigMap and
        the current Deployment, if any, already read: a worker process has no API client)."""
        return await self.run(reconcile_plan, spec, inventory, None, verify, status, name=name, namespace=namespace,
                              current_deployment=current_deployment)

    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


def planner_worker_init(parent: int) -> None:
    """Set up a planner worker process.

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
