"""Session fixtures for tests against a real Kubernetes API server.

By default `k8s` starts ../shared/k8s-testenv (a real apiextensions-apiserver on etcd, see its README) in a
temporary run folder, applies the InferenceCapacityPlan CRD and waits until it is Established; the server
is stopped when the session ends. `K8S_TESTENV` points to another copy of the testenv folder.

`INFERPLAN_E2E_KUBECONFIG=PATH` uses an existing cluster instead; its current context's name must contain
"test", so that a production kubeconfig is never written to by accident.

Without etcd or the testenv folder the tests are skipped, except in CI (`CI=true`), where they must run.

KUBECONFIG is set at import of this conftest, before anything imports `kubernetes` or `kopf`: the client
reads it once, at import, and kopf logs in through it (operator tests run under kopf.testing.KopfRunner).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTENV = Path(os.environ.get("K8S_TESTENV") or Path(__file__).resolve().parents[3] / "shared" / "k8s-testenv")
EXTERNAL_KUBECONFIG = os.environ.get("INFERPLAN_E2E_KUBECONFIG")
# Not created here: start.sh creates (and marks) it, so an unused session leaves nothing behind.
RUN = Path(tempfile.gettempdir()) / f"inferplan-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
KUBECONFIG = Path(EXTERNAL_KUBECONFIG).expanduser() if EXTERNAL_KUBECONFIG else RUN / "admin.kubeconfig"
os.environ["KUBECONFIG"] = str(KUBECONFIG)  # before `import kubernetes` / `import kopf`

import kubernetes  # noqa: E402  (deliberately after KUBECONFIG is set)
import yaml  # noqa: E402

from inferplan.operator.crd import CRD_FILE  # noqa: E402
from inferplan.resource import GROUP, PLURAL  # noqa: E402

# In case a test module imported kubernetes before this conftest ran: its default is read at import.
kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(KUBECONFIG)

CRD_NAME = f"{PLURAL}.{GROUP}"
TESTENV_ENV = {"TESTENV_PORTS": "auto", "RBAC": "1", "AUDIT": "1",
               # The chart's ServiceAccounts: the operator's (test_rbac.py), its cleanup hook's (test_cleanup.py).
               "TESTENV_USERS": "system:serviceaccount:inferplan-system:inferplan "
                                "system:serviceaccount:inferplan-system:inferplan-cleanup-kopf-state"}
"""How the testenv is started: free ports, RBAC enforced (the admin kubeconfig is in system:masters), an
audit log in RUN/audit.log. Operator tests may add `TESTENV_USERS` here for the operator's ServiceAccount."""

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout_s: float = 20.0, interval_s: float = 0.1) -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(interval_s)


def _skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (CI=true) a missing prerequisite fails the run: e2e tests must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: e2e tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def _missing_prerequisite() -> str | None:
    if not (TESTENV / "start.sh").is_file():
        return f"k8s-testenv not found at {TESTENV} (set K8S_TESTENV)"
    for tool in (os.environ.get("TESTENV_ETCD_BIN", "etcd"), "openssl", "curl"):
        if shutil.which(tool) is None:
            return (f"{tool} not installed; apt-get install -y --no-install-recommends etcd-server openssl curl "
                    f"xz-utils")
    return None


def _check_test_context(kubeconfig: Path) -> None:
    _, current = kubernetes.config.list_kube_config_contexts(config_file=str(kubeconfig))
    name = (current or {}).get("name", "")
    if "test" not in name:
        pytest.fail(f"INFERPLAN_E2E_KUBECONFIG={kubeconfig}: current context {name!r} does not contain 'test'; "
                    f"refusing to create objects in a cluster that may not be a test cluster", pytrace=False)


def apply_crd(admin: kubernetes.client.ApiClient, path: Path = REPO / CRD_FILE) -> None:
    """Create the CRD (this build's, or the one at `path`), or replace it where it exists (an external cluster, an
    upgrade), and wait until it is Established."""
    body = yaml.safe_load(path.read_text())
    crds = kubernetes.client.ApiextensionsV1Api(admin)
    try:
        crds.create_custom_resource_definition(body)
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        body["metadata"]["resourceVersion"] = crds.read_custom_resource_definition(CRD_NAME).metadata.resource_version
        crds.replace_custom_resource_definition(CRD_NAME, body)

    def established() -> bool:
        conditions = crds.read_custom_resource_definition(CRD_NAME).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(established)


def _start_testenv() -> None:
    env = {**os.environ, **TESTENV_ENV}
    env.setdefault("TESTENV_CACHE_DIR", str(Path.home() / ".cache" / "k8s-testenv"))  # unpack the binary once
    started = subprocess.run([str(TESTENV / "start.sh"), str(RUN)], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"k8s-testenv did not start:\n{started.stdout[-4000:]}\n{started.stderr[-4000:]}", pytrace=False)


def _stop_testenv() -> None:
    subprocess.run([str(TESTENV / "stop.sh"), str(RUN), "--rm"], check=False, capture_output=True)


@pytest.fixture(scope="session")
def k8s() -> Iterator[dict[str, Any]]:
    """A Kubernetes API server with the InferenceCapacityPlan CRD Established.

    Yields `admin` (a kubernetes ApiClient that may do anything), `kubeconfig` (its path), `run_dir` (the
    testenv's run folder: logs, audit.log, user kubeconfigs; None for an external cluster) and `wait_for`.
    """
    if EXTERNAL_KUBECONFIG:
        _check_test_context(KUBECONFIG)
    elif reason := _missing_prerequisite():
        _skip_or_fail(reason)
    else:
        _start_testenv()
    try:
        admin = kubernetes.config.new_client_from_config(str(KUBECONFIG))
        apply_crd(admin)
        yield {"admin": admin, "kubeconfig": KUBECONFIG, "run_dir": None if EXTERNAL_KUBECONFIG else RUN,
               "wait_for": wait_for}
    finally:
        if not EXTERNAL_KUBECONFIG:
            _stop_testenv()


def _request(admin: kubernetes.client.ApiClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """One request by path, the JSON answer as a dict, ApiException on an error status: the typed APIs have no call
    for "every kind" (discovery, lists of any kind, deletes)."""
    headers = {"Accept": "application/json"} | ({"Content-Type": "application/merge-patch+json"} if body else {})
    prepared = admin.param_serialize(method=method, resource_path=path, header_params=headers, body=body,
                                     auth_settings=["BearerToken"])
    response = admin.call_api(*prepared, _request_timeout=30)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise kubernetes.client.ApiException(http_resp=response)
    return json.loads(data) if data else {}


def _get(admin: kubernetes.client.ApiClient, path: str) -> dict[str, Any]:
    return _request(admin, "GET", path)


def served_resources(admin: kubernetes.client.ApiClient, *verbs: str) -> list[tuple[str, str, bool]]:
    """Every kind the server lists (and allows `verbs` on), as (group-version path, plural, namespaced), from
    discovery: the core kinds, the built-in groups the testenv stores and the CRDs' (plans, kopf's peerings, ...)."""
    paths = ["/api/v1"] + [f"/apis/{group['preferredVersion']['groupVersion']}"
                           for group in _get(admin, "/apis")["groups"]]
    return [(path, resource["name"], resource["namespaced"]) for path in paths
            for resource in _get(admin, path)["resources"]
            if "/" not in resource["name"] and {"list", *verbs} <= set(resource["verbs"])]


def inventory(admin: kubernetes.client.ApiClient) -> set[str]:
    """Every object on the server as "plural.group/namespace/name" (about 25 lists on loopback, some 40 ms)."""
    found = set()
    for path, plural, _ in served_resources(admin):
        kind = plural + ("" if path == "/api/v1" else "." + path.split("/")[2])
        for item in _get(admin, f"{path}/{plural}")["items"]:
            found.add(f"{kind}/{item['metadata'].get('namespace', '')}/{item['metadata']['name']}")
    return found


def delete_namespace(admin: kubernetes.client.ApiClient, name: str) -> None:
    """Delete everything in the namespace (releasing finalizers: no operator runs now), then the namespace.

    A cluster's namespace controller deletes what a deleted namespace holds; the testenv has none (its README: "No
    controllers"), so its contents would outlive it: a plan would be planned again, and observed, by every later
    operator that watches all namespaces (the in-process ones of test_operator.py and test_plan_lifecycle.py,
    test_rbac.py's: a module's plans held up the next modules' tests by minutes), and its Deployments, ConfigMaps,
    RBAC, leases and the operator's events would stay for the session (`_module_leaves_the_server_as_found`)."""
    for path, plural, namespaced in served_resources(admin, "delete"):
        if not namespaced:
            continue
        collection = f"{path}/namespaces/{name}/{plural}"
        try:
            items = _get(admin, collection)["items"]
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
            continue
        for item in items:
            item_path = f"{collection}/{item['metadata']['name']}"
            try:
                if item["metadata"].get("finalizers"):
                    _request(admin, "PATCH", item_path, {"metadata": {"finalizers": None}})
                _request(admin, "DELETE", item_path)
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise
    try:
        kubernetes.client.CoreV1Api(admin).delete_namespace(name)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture(scope="module", autouse=True)
def _module_leaves_the_server_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a module that leaves objects on the session's API server (or removes some it found): the next module
    would find them, a test then passes or fails by the order modules run in (`pytest -k`, a rerun of failures).
    What differs is listed by kind, namespace and name. The testenv only: an external cluster has other writers."""
    if not any("k8s" in item.fixturenames for item in request.session.items if item.module is request.module):
        yield  # test_faults.py: an API server of its own, stopped with the module
        return
    k8s = request.getfixturevalue("k8s")
    if k8s["run_dir"] is None:
        yield
        return
    before = inventory(k8s["admin"])
    yield
    after = inventory(k8s["admin"])
    if after != before:
        pytest.fail(f"{request.module.__name__} did not leave the API server as it found it: left "
                    f"{sorted(after - before)}, removed {sorted(before - after)}", pytrace=False)


@pytest.fixture(scope="module")
def namespace(k8s: dict[str, Any]) -> Iterator[str]:
    """A fresh namespace for the module's objects, deleted afterwards with all it holds (`delete_namespace`), so that
    no later module's operator finds them."""
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    name = f"inferplan-e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        delete_namespace(k8s["admin"], name)
