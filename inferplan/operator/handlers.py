"""kopf's handlers: the glue between kopf and the controller (`controller.py`), nothing else.

kopf watches the plans and the nodes and runs no per-plan handler state: nodes feed a small index of GPUs, and
each plan's events go to the controller, which decides what to do and does it. Importing this module builds
nothing: the startup handler reads the INFERPLAN_* settings (or takes those `main.run` read), makes the run's
`Runtime` (settings, planner pool, thread pools, endpoints, controller) into kopf's `memo`, and the cleanup
handler stops it. The handlers read it from `memo`; the probe reports whether the controller's loop runs.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from inferplan.operator import metrics
from inferplan.operator.inventory import NodeGpus, node_gpus
from inferplan.operator.runtime import Runtime, own_identity
from inferplan.operator.settings import OperatorSettings, SettingsError, load_settings
from inferplan.resource import GROUP, PLURAL, VERSION
from inferplan.version import planner_version

MEMO_SETTINGS = "operator_settings"
"""The memo key of settings read before kopf runs (`main.run`); without them the startup handler reads them."""
MEMO_IDENTITY = "identity"
"""The memo key of the identity kopf was given (`main.run`); without it the startup handler makes one."""
MEMO_RUNTIME = "runtime"
"""The memo key of the run's `Runtime`, made by the startup handler."""


def runtime_of(memo: kopf.Memo) -> Runtime | None:
    """The run's runtime, None before the startup handler made it."""
    return memo.get(MEMO_RUNTIME)


class _QuietSuccess(logging.Filter):
    """Drops kopf's INFO lines "Handler 'plan_event' succeeded." and "Handler 'node_event' succeeded.": one per
    watch event of every plan and node, saying nothing; a failing handler is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (record.levelno == logging.INFO and message.endswith(" succeeded.")
                    and ("'plan_event'" in message or "'node_event'" in message))


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


def _settings(memo: kopf.Memo) -> OperatorSettings:
    """The settings `main.run` read, else read now (`kopf run -m inferplan.operator.handlers`): once per run."""
    given = memo.get(MEMO_SETTINGS)
    if given is not None:
        return given
    try:
        return load_settings()
    except SettingsError as exc:  # a bad setting stops the operator, named; kopf does not retry it
        raise kopf.PermanentError(str(exc)) from None


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger,
                    gpu_nodes: kopf.Index, **_: Any) -> None:
    own = _settings(memo)
    # Silent watch stalls are kopf's best-known failure: let the server end watches, the client notice.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.posting.level = logging.WARNING  # kopf's own events only for problems
    settings.persistence.diffbase_storage = _NoDiffBase()
    logging.getLogger().setLevel(own.log_level)
    objects_logger = logging.getLogger("kopf.objects")
    if not any(isinstance(f, _QuietSuccess) for f in objects_logger.filters):
        objects_logger.addFilter(_QuietSuccess())
    metrics.serve(own.metrics_port)  # once per process: kopf may be run again (main.run)

    def nodes() -> list[NodeGpus]:  # the GPU nodes as kopf's index has them now
        return [value for store in gpu_nodes.values() for value in store]

    # A fresh runtime per run (tests run the operator several times in one process): nothing carried over.
    runtime = Runtime.build(own, identity=memo.get(MEMO_IDENTITY) or own_identity(),
                            priority=settings.peering.priority, nodes=nodes, node_count=lambda: len(gpu_nodes))
    memo[MEMO_RUNTIME] = runtime
    peering = "off"
    if own.peering:
        settings.peering.lifetime = own.peering_lifetime
        settings.peering.stealth = True  # no log line per keep-alive
        peering = (f"{own.peering} as {runtime.identity} priority={settings.peering.priority} "
                   f"lifetime={settings.peering.lifetime}s")
        await runtime.check_peering_object(logger)
    runtime.controller.start()
    logger.info("inferplan operator %s: namespaces=%s resync=%ss check=%ss metrics=:%s planner=%s peering=%s",
                planner_version(), ",".join(own.namespaces) or "all", own.resync_seconds, own.check_seconds,
                own.metrics_port or "off",
                f"{own.planner_processes} processes" if own.planner_processes
                else f"{own.planner_threads} threads", peering)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    runtime = runtime_of(memo)
    if runtime is not None:
        await runtime.stop()


@kopf.on.probe(id="checker")
async def checker_probe(memo: kopf.Memo, **_: Any) -> str:
    """Part of /healthz: a checker loop that ended (a bug) makes the operator unhealthy, to be restarted."""
    runtime = runtime_of(memo)
    if runtime is None or not runtime.controller.running():
        raise kopf.PermanentError("the plans' checker loop is not running")
    return "running"


@kopf.index("", "v1", "nodes")
def gpu_nodes(name: str, labels: dict, spec: dict, status: dict, **_: Any) -> dict:
    """One small value per GPU node (never the whole object; a node with GPUs but no product label too, to be
    named); {} for a node without GPUs, which also takes out what it indexed before (kopf keeps an object's last
    value where a handler returns None)."""
    info = node_gpus(name, labels, status.get("allocatable") or {}, bool(spec.get("unschedulable")),
                     status.get("conditions") or [], spec.get("taints") or [])
    return {name: info} if info is not None else {}


@kopf.on.event("", "v1", "nodes")
async def node_event(memo: kopf.Memo, **_: Any) -> None:
    """Every event of every node, after kopf applied it to the index (`gpu_nodes`; a deletion too): the controller
    reads the index again after one (`Controller.nodes_changed`), not at every plan's event."""
    runtime = runtime_of(memo)
    if runtime is not None:
        runtime.controller.nodes_changed()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def plan_event(event: dict, meta: dict, spec: dict, status: dict, namespace: str, name: str,
                     memo: kopf.Memo, **_: Any) -> None:
    """Every event of every plan (the initial listing too), to the controller."""
    runtime = runtime_of(memo)  # each object's memo is kopf's copy of the run's, made after the startup
    if runtime is None:
        return  # not started (kopf runs the startup handlers first)
    if event.get("type") == "DELETED":
        runtime.controller.forget(meta["uid"], namespace, name)
    else:
        runtime.controller.seen(meta["uid"], namespace, name, int(meta.get("generation") or 0), spec,
                                status or None)
