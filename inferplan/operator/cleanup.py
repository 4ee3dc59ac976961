"""A one-time cleanup of what earlier builds of the operator left on plans: kopf's finalizer and annotations.

Builds before commit 9fa64f1 ("Operator at scale and under faults") ran a kopf timer and change handlers per
plan. kopf put its finalizer `kopf.zalando.org/KopfFinalizerMarker` on every plan (a timer needs one) and kept
its state in annotations, under the prefix those builds gave kopf's storages, `inferplan.io`: the diff base
`inferplan.io/last-handled-configuration`, the marker `inferplan.io/kopf-managed`, and per-handler progress
while a handler ran (`KOPF_ANNOTATIONS`); kopf's own default prefix is `kopf.zalando.org/`.

The operator now puts neither on plans, and its RBAC has no `patch` on plans. kopf still sees the finalizer:
with no handler that needs it, it tries to remove it on every event of such a plan, is refused (403), retries
the request for about a minute and logs an error, while that plan's next events wait; and a deleted plan stays
Terminating, as nothing may remove the finalizer. This module removes both:

- `cleanup_patch(plan)`: pure; the JSON patch (RFC 6902) that removes kopf's finalizer and annotations, each
  removal guarded by a `test` of the value it removes, so that it cannot clobber a change made since the plan
  was read (the API server then refuses the whole patch, 422); None when there is nothing to remove.
- `clean_plan`, `clean_plans`: apply it to one plan, or to every plan listed, with the operator's API requests
  (`kube.request`, the configuration `kube.load_configuration` loads); a refused guard re-reads the plan.

`inferplan cleanup-kopf-state` runs `clean_plans` (cli.py); the Helm chart runs that command as a hook Job with
a role of its own (get, list, patch on plans), so the operator's role keeps no patch on plans.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import urllib3

from inferplan.operator import kube
from inferplan.resource import GROUP, PLURAL, VERSION

KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
"""kopf's finalizer (its default `settings.persistence.finalizer`, which no build changed)."""
KOPF_PREFIX = "kopf.zalando.org/"
"""kopf's default annotation prefix: every annotation under it is kopf's."""
KOPF_ANNOTATIONS = frozenset({
    "inferplan.io/last-handled-configuration",  # AnnotationsDiffBaseStorage(prefix="inferplan.io")
    "inferplan.io/kopf-managed",  # the marker kopf adds to a prefix that is not kopf's own
    "inferplan.io/touch-dummy",
    # AnnotationsProgressStorage(prefix="inferplan.io"): one per handler id of those builds, while it ran
    "inferplan.io/plan_changed",  # on.create and on.resume
    "inferplan.io/plan_changed.spec",  # on.update(field="spec")
    "inferplan.io/plan_check",  # the timer
    "inferplan.io/plan_deleted",  # on.delete (optional)
})
"""The annotations kopf wrote under `inferplan.io/` in those builds, exactly: other `inferplan.io/` annotations
are not kopf's and are kept."""

_PATH = f"/apis/{GROUP}/{VERSION}"
ATTEMPTS = 5
"""Tries per plan: a refused guard or a conflict re-reads the plan; a busy or unreachable API server waits."""
BACKOFF_S = (1.0, 2.0, 4.0, 8.0)
_BUSY = (429, 500, 502, 503, 504)


def is_kopf_annotation(key: str) -> bool:
    """Whether an annotation key is kopf's state (of an earlier build, or under kopf's own prefix)."""
    return key.startswith(KOPF_PREFIX) or key in KOPF_ANNOTATIONS


def _pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901): '~' and '/' in a part escaped."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def kopf_marks(plan: Mapping[str, Any]) -> list[str]:
    """What `cleanup_patch` removes from `plan`, for people: 'finalizer NAME' and 'annotation KEY' entries."""
    meta = plan.get("metadata") or {}
    finalizers = [f"finalizer {f}" for f in meta.get("finalizers") or [] if f == KOPF_FINALIZER]
    return finalizers + [f"annotation {key}" for key in sorted(meta.get("annotations") or {})
                         if is_kopf_annotation(key)]


def cleanup_patch(plan: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON patch that removes kopf's finalizer and annotations from `plan` (a plan as the API returns it),
    or None when it carries neither. Everything else is kept: other finalizers, other annotations.

    The patch starts with `test` operations: the plan's uid (the same object, not one re-created under its name),
    kopf's finalizer at each index it is removed from, and each removed annotation's value. The API server
    applies a patch whole or not at all, so if the plan changed in any of these since it was read, nothing is
    changed and the server answers 422. Finalizers are removed by index, highest first, so that the indices of
    the ones still to be removed do not move; a finalizer added meanwhile at the end does not fail the guard."""
    meta = plan.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    annotations = dict(meta.get("annotations") or {})
    indices = [i for i, name in enumerate(finalizers) if name == KOPF_FINALIZER]
    keys = sorted(key for key in annotations if is_kopf_annotation(key))
    if not indices and not keys:
        return None
    tests: list[dict[str, Any]] = []
    if meta.get("uid"):
        tests.append({"op": "test", "path": "/metadata/uid", "value": meta["uid"]})
    tests += [{"op": "test", "path": _pointer("metadata", "finalizers", i), "value": KOPF_FINALIZER}
              for i in indices]
    tests += [{"op": "test", "path": _pointer("metadata", "annotations", key), "value": annotations[key]}
              for key in keys]
    removals = [{"op": "remove", "path": _pointer("metadata", "finalizers", i)} for i in reversed(indices)]
    removals += [{"op": "remove", "path": _pointer("metadata", "annotations", key)} for key in keys]
    return tests + removals


# ----------------------------------------------------------------------------------------------------------
# Against the cluster


CLEANED, WOULD_CLEAN, CLEAN, GONE, FAILED = "cleaned", "would clean", "already clean", "gone", "failed"


@dataclass(frozen=True)
class PlanOutcome:
    """What happened to one plan: `outcome` is CLEANED, WOULD_CLEAN (a dry run), CLEAN (nothing to remove),
    GONE (deleted meanwhile) or FAILED (`reason` says why); `removed` lists what was (or would be) removed."""

    namespace: str
    name: str
    outcome: str
    removed: tuple[str, ...] = ()
    reason: str = ""
    attempts: int = 1

    def line(self) -> str:
        """The outcome for people, ASCII: e.g. 'cleaned NS/NAME: removed finalizer ..., annotation ...'."""
        where = f"{self.namespace}/{self.name}"
        if self.outcome == FAILED:
            return f"FAILED {where}: {self.reason}"
        if self.outcome == CLEANED:
            return f"cleaned {where}: removed {', '.join(self.removed)}"
        if self.outcome == WOULD_CLEAN:
            return f"would clean {where}: would remove {', '.join(self.removed)}"
        return f"{self.outcome} {where}" + (f" ({self.reason})" if self.reason else "")


@dataclass
class Summary:
    """Every plan's outcome, in the order they were listed, and the namespaces whose plans could not be listed
    (`unlisted`: the reasons)."""

    dry_run: bool
    outcomes: list[PlanOutcome] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    @property
    def failed(self) -> list[PlanOutcome]:
        return [o for o in self.outcomes if o.outcome == FAILED]

    @property
    def ok(self) -> bool:
        """Every plan listed and none failed."""
        return not self.failed and not self.unlisted

    def text(self) -> str:
        """One ASCII line: how many plans were seen, cleaned, already clean, gone and failed."""
        cleaned = f"would clean {self.count(WOULD_CLEAN)}" if self.dry_run else f"cleaned {self.count(CLEANED)}"
        gone = f", gone meanwhile {self.count(GONE)}" if self.count(GONE) else ""
        unlisted = f", could not list {len(self.unlisted)}" if self.unlisted else ""
        return (f"plans seen {len(self.outcomes)}, {cleaned}, already clean {self.count(CLEAN)}{gone}, "
                f"failed {len(self.failed)}{unlisted}" + (" (dry run: nothing was changed)" if self.dry_run else ""))


class ListError(RuntimeError):
    """The plans could not be listed (the message says why): nothing was cleaned."""


Request = Callable[..., dict]


def _message(exc: kubernetes.client.ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return f"{exc.status} {body.get('message') or exc.reason}"


def _guard_refused(exc: kubernetes.client.ApiException) -> bool:
    """Whether the patch was refused because the plan changed since it was read: a conflict, or a `test` op that
    failed (422 without field causes: "the server rejected our request due to an error in our request"; a
    validation error names its fields)."""
    if exc.status == 409:
        return True
    if exc.status != 422:
        return False
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return True
    return not (body.get("details") or {}).get("causes")


def plan_path(namespace: str, name: str) -> str:
    return f"{_PATH}/namespaces/{kube.quote(namespace)}/{PLURAL}/{kube.quote(name)}"


def clean_plan(plan: Mapping[str, Any], *, dry_run: bool = False, attempts: int = ATTEMPTS,
               request: Request = kube.request, sleep: Callable[[float], None] = time.sleep) -> PlanOutcome:
    """Remove kopf's finalizer and annotations from one plan, starting from `plan` as it was read (listed).

    A refused guard or a conflict (the plan changed since it was read) reads the plan again and tries with a
    new patch; a busy or unreachable API server is waited for (BACKOFF_S); up to `attempts` tries. With
    `dry_run` the patch is sent as a server-side dry run (dryRun=All): the server checks the permission, the
    guard and validation, and stores nothing."""
    meta = plan.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    current: Mapping[str, Any] = plan
    problem = ""
    for attempt in range(1, attempts + 1):
        patch = cleanup_patch(current)
        if patch is None:
            return PlanOutcome(namespace, name, CLEAN, reason="cleaned by someone else" if attempt > 1 else "",
                               attempts=attempt)
        removed = tuple(kopf_marks(current))
        query = [("dryRun", "All")] if dry_run else None
        retry_now = False
        try:
            request("PATCH", plan_path(namespace, name), patch, query, "application/json-patch+json")
            return PlanOutcome(namespace, name, WOULD_CLEAN if dry_run else CLEANED, removed, attempts=attempt)
        except kubernetes.client.ApiException as exc:
            problem = _message(exc)
            if exc.status == 404:
                return PlanOutcome(namespace, name, GONE, reason="deleted meanwhile", attempts=attempt)
            if _guard_refused(exc):
                retry_now = True
            elif exc.status not in _BUSY:
                return PlanOutcome(namespace, name, FAILED, removed, reason=problem, attempts=attempt)
        except urllib3.exceptions.HTTPError as exc:
            problem = f"the API server is unreachable ({type(exc).__name__})"
        if attempt == attempts:
            break
        if not retry_now:
            sleep(BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)])
        try:
            current = request("GET", plan_path(namespace, name))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return PlanOutcome(namespace, name, GONE, reason="deleted meanwhile", attempts=attempt)
            problem = f"reading it again: {_message(exc)}"
            if exc.status not in _BUSY:
                return PlanOutcome(namespace, name, FAILED, reason=problem, attempts=attempt)
        except urllib3.exceptions.HTTPError as exc:
            problem = f"reading it again: the API server is unreachable ({type(exc).__name__})"
    why = "the plan kept changing" if retry_now else "gave up"
    return PlanOutcome(namespace, name, FAILED, reason=f"{why} after {attempts} attempts: {problem}",
                       attempts=attempts)


def iter_plans(namespace: str | None = None, *, request: Request = kube.request, page: int = 200,
               sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """Every plan in `namespace` (None: all namespaces), read a page at a time (only one page is held). Nothing
    when the plans' API is not served (the CRD is not installed: no plan can exist). ListError when they cannot
    be listed."""
    path = f"{_PATH}/{PLURAL}" if namespace is None else f"{_PATH}/namespaces/{kube.quote(namespace)}/{PLURAL}"
    where = "all namespaces" if namespace is None else f"namespace {namespace}"
    token = ""
    while True:
        query = [("limit", str(page))] + ([("continue", token)] if token else [])
        for attempt in range(len(BACKOFF_S) + 1):
            try:
                answer = request("GET", path, query=query)
                break
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status not in _BUSY or attempt == len(BACKOFF_S):
                    raise ListError(f"cannot list plans in {where}: {_message(exc)}") from None
            except urllib3.exceptions.HTTPError as exc:
                if attempt == len(BACKOFF_S):
                    raise ListError(f"cannot list plans in {where}: the API server is unreachable "
                                    f"({type(exc).__name__})") from None
            sleep(BACKOFF_S[attempt])
        yield from answer.get("items") or []
        token = (answer.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def clean_plans(namespaces: Sequence[str] = (), *, dry_run: bool = False, request: Request = kube.request,
                report: Callable[[PlanOutcome], None] | None = None,
                sleep: Callable[[float], None] = time.sleep) -> Summary:
    """Clean every plan in `namespaces` (empty: all namespaces) with the kubernetes client's default
    configuration (`kube.load_configuration`); `report` is called with each outcome as it comes. Idempotent: a
    plan already clean is not patched. A namespace whose plans cannot be listed (or not to the end) is noted in
    `Summary.unlisted`, and the others are cleaned."""
    summary = Summary(dry_run)
    for namespace in namespaces or [None]:
        try:
            for plan in iter_plans(namespace, request=request, sleep=sleep):
                outcome = clean_plan(plan, dry_run=dry_run, request=request, sleep=sleep)
                summary.outcomes.append(outcome)
                if report is not None:
                    report(outcome)
        except ListError as exc:
            summary.unlisted.append(str(exc))
    return summary
