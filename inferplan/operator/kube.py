"""The operator's own Kubernetes API requests: status writes, ConfigMap and Deployment reads, peering objects
and Warning events (kopf does the watching). Blocking calls: the controller runs them in a thread pool.

Raw requests on purpose: the client's typed APIs (CoreV1Api.read_namespaced_config_map, AppsV1Api.
read_namespaced_deployment, ...) import about 250 model modules, 20 MiB of the operator's memory, to build
objects that would be turned back into dicts. No kopf import: failures that pass are `RetryLater`.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import logging
import os
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import kubernetes
import urllib3

from inferplan.operator.cluster_spec import ConfigMapReader
from inferplan.operator.observing import CurrentError, DeploymentReader
from inferplan.operator.retry import RetryLater
from inferplan.operator.status import clipped
from inferplan.resource import GROUP, KIND, PLURAL, VERSION

ApiException = kubernetes.client.ApiException
WRITE_BACKOFF_S = (1, 1, 2, 3, 5, 8, 13, 21)
"""Pauses between tries of a write while the API server is unreachable or overloaded (kopf's own API retries):
rides out an API server restart."""
_RETRIED_STATUSES = (429, 500, 502, 503, 504)


class _Client:
    """The API client of the operator's own requests: made from the configuration kopf's login stored as the
    kubernetes client's default (again when a new login replaces it), and shared, so its connections are
    reused."""

    def __init__(self) -> None:
        self._client: kubernetes.client.ApiClient | None = None
        self._configuration: kubernetes.client.Configuration | None = None
        self._lock = threading.Lock()

    def get(self) -> kubernetes.client.ApiClient:
        with self._lock:
            configuration = kubernetes.client.Configuration.get_default()
            if self._client is None or configuration is not self._configuration:
                self._client = kubernetes.client.ApiClient(configuration)
                self._configuration = configuration
            return self._client


_CLIENT = _Client()


def quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def request(method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
            content_type: str = "application/json") -> dict:
    """One API request, the JSON answer as a dict; ApiException on an error status, urllib3's HTTPError when
    the server cannot be reached."""
    client = _CLIENT.get()
    headers = {"Accept": "application/json"} | ({"Content-Type": content_type} if body is not None else {})
    prepared = client.param_serialize(method=method, resource_path=path, query_params=query, header_params=headers,
                                      body=body, auth_settings=["BearerToken"])
    response = client.call_api(*prepared, _request_timeout=30)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise kubernetes.client.ApiException(http_resp=response)
    return json.loads(data) if data else {}


def plan_status_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}/{quote(name)}/status"


def read_plan(namespace: str, name: str) -> dict:
    """A plan as the API server has it now: listed by name, which the operator's `list` permission allows (its
    RBAC grants no `get`); ApiException 404 when there is none."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}"
    items = request("GET", path, query=[("fieldSelector", f"metadata.name={name}")]).get("items") or []
    if not items:
        raise kubernetes.client.ApiException(status=404, reason="Not Found")
    return items[0]


def write_status(namespace: str, name: str, patch: dict[str, Any]) -> dict:
    """Merge-patch a plan's status subresource."""
    return request("PATCH", plan_status_path(namespace, name), {"status": patch}, None,
                   "application/merge-patch+json")


def config_map_reader(namespace: str) -> ConfigMapReader:
    """Reads a key of a ConfigMap in `namespace`: KeyError when it or the key does not exist, RetryLater when
    the API cannot answer now."""

    def read(name: str, key: str) -> str:
        try:
            config_map = request("GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                raise KeyError(f"ConfigMap {namespace}/{name} not found") from None
            raise RetryLater(f"reading ConfigMap {namespace}/{name}: {exc.reason}", delay=30) from exc
        except urllib3.exceptions.HTTPError as exc:
            raise RetryLater(f"reading ConfigMap {namespace}/{name}: {exc}", delay=5) from exc
        return (config_map.get("data") or {})[key]

    return read


def deployment_reader(namespace: str) -> DeploymentReader:
    """Reads a Deployment in `namespace`: None when it does not exist, CurrentError when it cannot be read."""

    def read(name: str) -> dict | None:
        try:
            return request("GET", f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}")
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise CurrentError(f"cannot read Deployment {namespace}/{name}: {exc.reason}") from None
        except urllib3.exceptions.HTTPError:
            raise CurrentError(f"cannot read Deployment {namespace}/{name}: the API server is unreachable") from None

    return read


async def with_retries(what: str, call: Callable[[], dict], executor: Executor, logger: logging.Logger,
                       backoff: Sequence[float] = WRITE_BACKOFF_S,
                       still_wanted: Callable[[], bool] | None = None) -> dict | None:
    """`call()` in `executor`, again after each delay of `backoff` while the API server is unreachable or
    overloaded. None when it gave up, or when `still_wanted()` says the result is no longer needed; any other
    error status is raised (ApiException)."""
    loop = asyncio.get_running_loop()
    for delay in (*backoff, None):
        try:
            return await loop.run_in_executor(executor, call)
        except kubernetes.client.ApiException as exc:
            if exc.status not in _RETRIED_STATUSES:
                raise
            problem = f"{exc.status} {exc.reason}"
        except urllib3.exceptions.HTTPError as exc:
            problem = type(exc).__name__
        if delay is None:
            logger.error("%s: giving up after %d attempts (%s)", what, len(backoff) + 1, problem)
            return None
        logger.warning("%s: %s; trying again in %s s", what, problem, delay)
        await asyncio.sleep(delay)
        if still_wanted is not None and not still_wanted():
            return None
    return None


def peering_statuses(peering: str, namespaces: Sequence[str]) -> list[tuple[str, dict | None]]:
    """The peering objects a replica announces itself in (one cluster-wide, or one per watched namespace), with
    their status (None: the object does not exist)."""
    selector = [("fieldSelector", f"metadata.name={peering}")]
    if not namespaces:
        where = [(f"ClusterKopfPeering {peering}", "/apis/kopf.dev/v1/clusterkopfpeerings")]
    else:
        where = [(f"KopfPeering {ns}/{peering}", f"/apis/kopf.dev/v1/namespaces/{quote(ns)}/kopfpeerings")
                 for ns in namespaces]
    found = []
    for name, path in where:
        items = request("GET", path, query=selector).get("items") or []
        found.append((name, (items[0].get("status") or {}) if items else None))
    return found


class NoClusterConfiguration(kubernetes.config.ConfigException):
    """Neither an in-cluster configuration nor a kubeconfig could be loaded."""


def load_configuration() -> str:
    """Make the cluster's configuration the kubernetes client's default, which `request` uses, found as kopf's
    login (login_via_client) finds the operator's: in a pod, its ServiceAccount (in-cluster), else the kubeconfig
    (KUBECONFIG, else ~/.kube/config; its current context). Returns "in-cluster" or "kubeconfig"; raises
    NoClusterConfiguration saying why neither worked."""
    try:
        kubernetes.config.load_incluster_config()
        return "in-cluster"
    except kubernetes.config.ConfigException as in_cluster:
        try:
            kubernetes.config.load_kube_config()
            return "kubeconfig"
        except (kubernetes.config.ConfigException, OSError) as kubeconfig:
            where = os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise NoClusterConfiguration(
                f"no Kubernetes configuration: not in a pod ({in_cluster}) and no usable kubeconfig at {where} "
                f"({kubeconfig})") from None


def missing_peering_objects(peering: str, namespaces: Sequence[str]) -> list[str]:
    """The peering objects that do not exist. Called before kopf's login: loads the configuration as kopf's
    login_via_client will."""
    load_configuration()
    return [where for where, status in peering_statuses(peering, namespaces) if status is None]


def warning_event(*, uid: str, namespace: str, name: str, generation: int, reason: str, message: str,
                  host: str, now: datetime.datetime) -> dict[str, Any]:
    """A Warning event about a plan, named after (plan, generation, reason): posted again (an operator killed
    between posting it and writing the status that says so, two replicas during a peering handover), it is the
    same event, refused as existing, not a duplicate."""
    digest = hashlib.sha256(f"{uid}/{generation}/{reason}".encode()).hexdigest()[:16]
    stamp = now.isoformat()
    return {
        "metadata": {"name": f"{name[:200]}.{digest}", "namespace": namespace},
        "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": name, "namespace": namespace,
                           "uid": uid},
        "type": "Warning", "reason": reason, "message": clipped(message, 1024), "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": "inferplan"}, "reportingComponent": "inferplan",
        "reportingInstance": host[:128],
    }


def post_event(event: dict[str, Any]) -> dict:
    return request("POST", f"/api/v1/namespaces/{quote(event['metadata']['namespace'])}/events", event)
