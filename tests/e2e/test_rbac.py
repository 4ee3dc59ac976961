"""The chart's RBAC is exactly enough (issue 6), proven against an API server that enforces it.

`helm template` renders the chart; its ServiceAccount, ClusterRole and ClusterRoleBinding are applied to the
k8s-testenv (RBAC=1, AUDIT=1); the operator runs as a process, as deployed, authenticated as the chart's
ServiceAccount (the token user system:serviceaccount:inferplan-system:inferplan, from TESTENV_USERS in
conftest.py), and the example plans of deploy/examples are driven through every feature:

- inventory: a plan is answered against the nodes' GPUs (InventoryAvailable, nodeSelector); nodes list/watch
- status: every example plan gets Ready=True for its generation; plans list/watch/patch, plans/status patch
- events: a plan with an unknown model gets a Warning event InvalidModel; events create
- configmap: the plan whose model is a ConfigMap's config.json is answered; configmaps get
- crd-discovery: after the CRD changes, the operator re-reads the API's discovery (kopf's resource
  observation); customresourcedefinitions list/watch
- observe: spec.observe reads the serving Deployment (status.observed.current); deployments get
- peering (peering on): the operator announces itself in the ClusterKopfPeering; clusterkopfpeerings
  list/watch/patch

Asserted: (1) every feature works, (2) the audit log shows no request of the ServiceAccount denied (403),
(3) with any single rule removed from the ClusterRole, exactly the features that need it fail (BROKEN_WITHOUT)
and the audit log shows the denial. Also: the namespaced mode (a Role per watched namespace) and peering are
enough, peering's rule is needed, and the example manifests pass a server-side dry run.

Each run gets a fresh namespace with fresh plans (kopf writes nothing for an unchanged status, and posts an
event only for a new problem) and the operator checks every 0.5 s. A full run ends when every feature works;
a run without a rule, on one plan per feature, once exactly the expected features fail and GRACE_S has passed
since the first denial.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.resource import GROUP, PLURAL, VERSION
from tests.support.helm import CHART, EXPECTED_RULES, one, render

from .conftest import CRD_NAME, REPO, delete_namespace, wait_for

SA_NAMESPACE, SA_NAME = "inferplan-system", "inferplan"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
SA_KUBECONFIG = "user-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in SA_USER) + ".kubeconfig"
EXAMPLES = [REPO / "deploy" / "examples" / name for name in
            yaml.safe_load((REPO / "deploy" / "examples" / "kustomization.yaml").read_text())["resources"]]
NODES = {"rbac-h100": ("NVIDIA-H100-80GB-HBM3", 8), "rbac-l40s": ("NVIDIA-L40S", 4)}
PROBE_LABEL = "inferplan.io/rbac-probe"  # set on the CRD to make kopf's CRD watch fire
GRACE_S = 2.0  # a run without a rule goes on at least this long after the first denial
RUN_TIMEOUT_S = 60.0
RULE_IDS = ["nodes", "customresourcedefinitions", "inferencecapacityplans", "inferencecapacityplans-status",
            "events", "configmaps", "deployments"]
PLAN_FEATURES = {"inventory", "status", "events", "configmap", "observe"}
# Exactly the features that fail when one rule of the default ClusterRole is removed (EXPECTED_RULES order).
# Without nodes the kopf index never fills and no handler runs; without plans nothing is seen; without
# plans/status no answer is written (but the problem event is still posted); the ConfigMap plan is one of the
# example plans (so "status" too).
BROKEN_WITHOUT = [PLAN_FEATURES, {"crd-discovery"}, PLAN_FEATURES, PLAN_FEATURES - {"events"}, {"events"},
                  {"configmap", "status"}, {"observe"}]
# The plans of a run without a rule: one for each feature (the full runs use every example plan).
FEW_PLANS = {"chat-assistant-8b", "llama-8b-finetune", "llama-8b-finetune-config"}

BAD_PLAN = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": "bad-model"},
            "spec": {"model": {"name": "acme/not-a-real-model"}, "engine": {"name": "vllm"},
                     "workload": {"requestsPerSecond": "5", "promptTokens": {"mean": 500},
                                  "outputTokens": {"mean": 100}},
                     "slo": {"ttft": {"maxMs": 500, "percentile": "p95"}}}}


# ----------------------------------------------------------------------------------------------------------
# spec.observe: the Deployment-get feature. It needs a Prometheus with a serving engine's series (the
# stand-in of tests/support) and an operator that reads Deployments; without either it is skipped.


OBSERVE_SELECTOR = {"model_name": "rbac-llama"}
OBSERVE_DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm-chat"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "vllm-chat"}}, "template": {
        "metadata": {"labels": {"app": "vllm-chat"}},
        "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai",
                                 "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256"],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    "status": {"replicas": 2, "readyReplicas": 2},
}
OBSERVE_PLAN = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": "observed-chat"},
    "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]}, "engine": {"name": "vllm"},
             "workload": {"requestsPerSecond": "4", "promptTokens": {"mean": 500, "p95": 1500},
                          "outputTokens": {"mean": 250, "p95": 700}},
             "slo": {"ttft": {"maxMs": 500, "percentile": "p95"}},
             "constraints": {"gpuTypes": ["NVIDIA-H100-80GB-HBM3"]},
             "observe": {"prometheus": "main", "selector": OBSERVE_SELECTOR, "window": "30s", "minRequests": 1,
                         "current": {"deployment": "vllm-chat"}}},
}


def observe_unavailable() -> str | None:
    """Why the observe feature cannot be checked here, or None. EDIT HERE if spec.observe changes shape."""
    schema = yaml.safe_load_all((REPO / "crds" / "inferplan.io_inferencecapacityplans.yaml").read_text())
    crd = [doc for doc in schema if doc][-1]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    deployment = spec.get("observe", {}).get("properties", {}).get("current", {}).get("properties", {})
    if "deployment" not in deployment:
        return "spec.observe not yet implemented (no observe.current.deployment in the CRD)"
    try:
        from tests.support.prometheus import missing_prerequisite
    except ImportError as exc:
        return f"tests/support/prometheus.py is not importable: {exc}"
    return missing_prerequisite()


def check_observe(ctx: Context, run: Run) -> str | None:
    """The observe feature: the plan's status names the Deployment it read (needs `get deployments`)."""
    status = run.plans.get("observed-chat", {}).get("status") or {}
    current = (status.get("observed") or {}).get("current") or {}
    if current.get("deployment") == "vllm-chat" and current.get("replicas") == 2:
        return None
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    return f"observed.current={current}; PredictionAccurate={conditions.get('PredictionAccurate', {})}"


@dataclass
class Observe:
    """A Prometheus scraping an engine stand-in, and the endpoints file the chart renders for it."""

    config: Path
    stop: Callable[[], None]


def start_observe(run_dir: Path) -> Observe:
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.spec_parsing import parse_plan
    from tests.support.engine_standin import StandinProcess, standin_config
    from tests.support.prometheus import PrometheusServer

    req = resolve_plan(parse_plan(OBSERVE_PLAN["spec"]))
    standin = StandinProcess(standin_config(labels=OBSERVE_SELECTOR, requests_per_second=10.0,
                                            prompt_tokens={"mean": req.prompt_mean, "cv": req.prompt_cv},
                                            output_tokens={"mean": req.output_mean, "cv": req.output_cv})).start()
    prometheus = PrometheusServer(run_dir / "prometheus", [standin.target])
    try:
        prometheus.start()
    except Exception:
        standin.stop()
        raise
    # The endpoints file exactly as the chart renders it from prometheus.endpoints.
    objects = render(sets=("prometheus.endpoints[0].name=main", f"prometheus.endpoints[0].url={prometheus.url}",
                           "prometheus.endpoints[0].timeoutSeconds=2"))
    config = run_dir / "prometheus.yaml"
    config.write_text(one(objects, "ConfigMap", "inferplan-prometheus")["data"]["prometheus.yaml"])

    def stop() -> None:
        prometheus.stop()
        standin.stop()

    return Observe(config, stop)


# ----------------------------------------------------------------------------------------------------------
# One operator run


@dataclass
class Context:
    admin: kubernetes.client.ApiClient
    run_dir: Path
    kubeconfig: Path
    audit: Path
    chart: list[dict[str, Any]]
    observe: Observe | None
    observe_skip: str | None
    features: dict[str, Callable[[Context, Run], str | None]] = field(default_factory=dict)


@dataclass
class Run:
    namespace: str
    audit_offset: int
    probe_offset: int | None = None  # audit.log size when the CRD was changed
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    denied: list[tuple[str, str, str]] = field(default_factory=list)
    output: str = ""
    exit_code: int | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds since start, for the failure message
    created: set[str] = field(default_factory=set)  # names of the objects the run created


def audit_events(ctx: Context, offset: int) -> list[dict[str, Any]]:
    """The audit events written from byte `offset` of the log on. An offset is the log's size at some moment, which
    may fall inside a line the server was still writing: that event began before it and is left out."""
    with open(ctx.audit, "rb") as f:
        f.seek(max(offset - 1, 0))
        data = f.read()
    if offset > 0:  # from the byte before the offset: drop through its line's end (only the newline if it is one)
        end = data.find(b"\n")
        data = data[end + 1:] if end >= 0 else b""
    lines = data.decode(errors="replace").splitlines()
    if lines and not data.endswith(b"\n"):
        lines = lines[:-1]  # a line still being written
    return [json.loads(line) for line in lines if line.strip()]


def sa_requests(ctx: Context, offset: int) -> list[dict[str, Any]]:
    return [e for e in audit_events(ctx, offset) if e["user"]["username"] == SA_USER]


def describe(event: dict[str, Any]) -> tuple[str, str, str]:
    ref = event.get("objectRef") or {}
    resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource")))) or event.get("requestURI", "")
    return event["verb"], resource, ref.get("namespace") or ""


def check_inventory(ctx: Context, run: Run) -> str | None:
    status = run.plans.get("chat-assistant-8b", {}).get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    selector = ((status.get("recommendation") or {}).get("nodeSelector") or {}).get("nvidia.com/gpu.product")
    if conditions.get("InventoryAvailable") == "True" and selector in {p for p, _ in NODES.values()}:
        return None
    return f"chat-assistant-8b: conditions={conditions} nodeSelector={selector}"


def check_status(ctx: Context, run: Run) -> str | None:
    missing = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] != "InferenceCapacityPlan" or doc["metadata"]["name"] not in run.created:
                continue
            obj = run.plans.get(doc["metadata"]["name"], {})
            status = obj.get("status") or {}
            ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready")
            if status.get("observedGeneration") != obj.get("metadata", {}).get("generation") or ready != "True":
                missing.append(f"{doc['metadata']['name']} (Ready={ready})")
    return f"not answered: {', '.join(missing)}" if missing else None


def check_events(ctx: Context, run: Run) -> str | None:
    if any(e.involved_object.name == "bad-model" and e.type == "Warning" and e.reason == "InvalidModel"
           for e in run.events):
        return None
    return "no Warning event InvalidModel on bad-model"


def check_configmap(ctx: Context, run: Run) -> str | None:
    status = run.plans.get("llama-8b-finetune", {}).get("status") or {}
    ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})
    if ready.get("status") == "True" and status.get("recommendation"):
        return None
    return f"llama-8b-finetune: Ready={ready.get('status')} {ready.get('message', '')[:200]}"


def check_crd_discovery(ctx: Context, run: Run) -> str | None:
    if run.probe_offset is None:
        return "the CRD was not changed yet"
    rescans = [e for e in sa_requests(ctx, run.probe_offset)
               if not e.get("objectRef") and e.get("requestURI", "").startswith("/apis")]
    return None if rescans else "no discovery request after the CRD changed (kopf did not see the change)"


def check_peering(ctx: Context, run: Run) -> str | None:
    objects = kubernetes.client.CustomObjectsApi(ctx.admin)
    peering = objects.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", "inferplan")
    return None if peering.get("status") else "the operator did not announce itself in the ClusterKopfPeering"


FEATURES: dict[str, Callable[[Context, Run], str | None]] = {
    "inventory": check_inventory, "status": check_status, "events": check_events, "configmap": check_configmap,
    "crd-discovery": check_crd_discovery, "observe": check_observe,
}


def apply(admin: kubernetes.client.ApiClient, body: dict[str, Any], namespace: str | None = None) -> None:
    """Create `body`, or replace it where it exists (admin)."""
    dynamic = kubernetes.dynamic.DynamicClient(admin)
    api = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace", namespace) if api.namespaced else None
    try:
        api.create(body=body, namespace=namespace)
    except kubernetes.dynamic.exceptions.ConflictError:
        current = api.get(name=body["metadata"]["name"], namespace=namespace)
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": current.metadata.resourceVersion}}
        api.replace(body=body, namespace=namespace)


def delete(admin: kubernetes.client.ApiClient, api_version: str, kind: str, name: str,
           namespace: str | None = None) -> None:
    dynamic = kubernetes.dynamic.DynamicClient(admin)
    try:
        dynamic.resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace)
    except kubernetes.dynamic.exceptions.NotFoundError:
        pass


def set_rbac(ctx: Context, objects: list[dict[str, Any]]) -> None:
    """Make `objects` (RBAC objects of one rendering) the ServiceAccount's only grants."""
    rbac = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    wanted = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
              for o in objects if o["kind"] in rbac}
    api = kubernetes.client.RbacAuthorizationV1Api(ctx.admin)
    for role in api.list_cluster_role_binding(label_selector="app.kubernetes.io/name=inferplan").items:
        if ("ClusterRoleBinding", role.metadata.name, None) not in wanted:
            api.delete_cluster_role_binding(role.metadata.name)
    for binding in api.list_role_binding_for_all_namespaces(label_selector="app.kubernetes.io/name=inferplan").items:
        if ("RoleBinding", binding.metadata.name, binding.metadata.namespace) not in wanted:
            api.delete_namespaced_role_binding(binding.metadata.name, binding.metadata.namespace)
    for obj in objects:
        if obj["kind"] in rbac:
            apply(ctx.admin, obj)
    time.sleep(0.3)  # the server's RBAC informers take effect within milliseconds


def plans_in(ctx: Context, namespace: str) -> dict[str, dict[str, Any]]:
    objects = kubernetes.client.CustomObjectsApi(ctx.admin)
    items = objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return {item["metadata"]["name"]: item for item in items}


def probe_crd(ctx: Context, value: str | None) -> None:
    crds = kubernetes.client.ApiextensionsV1Api(ctx.admin)
    crds.patch_custom_resource_definition(CRD_NAME, {"metadata": {"labels": {PROBE_LABEL: value}}})


def fresh_namespace(ctx: Context, name: str) -> str:
    namespace = f"rbac-{name}-{uuid.uuid4().hex[:5]}"
    kubernetes.client.CoreV1Api(ctx.admin).create_namespace({"metadata": {"name": namespace}})
    return namespace


def operate(ctx: Context, namespace: str, features: tuple[str, ...], *, expect_failed: set[str] | None = None,
            namespaced: bool = False, extra_env: dict[str, str] | None = None) -> Run:
    """One operator run as the ServiceAccount on fresh plans in `namespace` (new); returns what worked.

    Without `expect_failed` it ends when every feature works (or after RUN_TIMEOUT_S) with every example plan;
    with it, on a few plans, once exactly those features fail, a request was denied GRACE_S ago and the
    others work (or after RUN_TIMEOUT_S)."""
    core = kubernetes.client.CoreV1Api(ctx.admin)
    docs = [doc for path in EXAMPLES for doc in yaml.safe_load_all(path.read_text())]
    if expect_failed is not None:
        docs = [doc for doc in docs if doc["metadata"]["name"] in FEW_PLANS]
    docs.append(BAD_PLAN)
    if "observe" in features:
        docs += [OBSERVE_DEPLOYMENT, OBSERVE_PLAN]
    for doc in docs:
        apply(ctx.admin, doc, namespace)
    # Planning in threads: worker processes would only add start-up time here (the API calls are the same).
    env = dict(os.environ, KUBECONFIG=str(ctx.kubeconfig), INFERPLAN_CHECK_SECONDS="0.5",
               INFERPLAN_METRICS_PORT="0", INFERPLAN_HEALTH_PORT="0", INFERPLAN_OBSERVE_SECONDS="1",
               INFERPLAN_PLANNER_PROCESSES="0", INFERPLAN_NAMESPACES=namespace if namespaced else "")
    if ctx.observe is not None:
        env["INFERPLAN_PROMETHEUS_CONFIG"] = str(ctx.observe.config)
    env.update(extra_env or {})
    command = [str(Path(sys.executable).with_name("inferplan")), "operator"]
    run = Run(namespace, ctx.audit.stat().st_size, created={doc["metadata"]["name"] for doc in docs})
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    first_denied: float | None = None
    try:
        while True:
            time.sleep(0.25)
            requests = sa_requests(ctx, run.audit_offset)
            denied = [describe(e) for e in requests if e.get("responseStatus", {}).get("code") == 403]
            if denied and first_denied is None:
                first_denied = time.monotonic()
                run.timings["first denial"] = round(first_denied - started, 2)
            if run.probe_offset is None and (time.monotonic() - started > 10 or any(
                    (e.get("objectRef") or {}).get("resource") == "customresourcedefinitions"
                    and (e["verb"] == "watch" or e.get("responseStatus", {}).get("code") == 403) for e in requests)):
                run.probe_offset = ctx.audit.stat().st_size
                probe_crd(ctx, namespace)
                run.timings["crd probe"] = round(time.monotonic() - started, 2)
            run.plans = plans_in(ctx, namespace)
            run.events = core.list_namespaced_event(namespace).items
            run.failed = {f: why for f in features if (why := FEATURES[f](ctx, run))}
            now = time.monotonic()
            if expect_failed is None:
                done = not run.failed
            else:
                done = set(run.failed) == expect_failed and first_denied is not None and now - first_denied > GRACE_S
            if done or process.poll() is not None or now - started > RUN_TIMEOUT_S:
                break
    finally:
        run.timings["stop"] = round(time.monotonic() - started, 2)
        # A clean stop is asserted for the full runs; without a rule kopf may sit in a retry backoff: kill it.
        process.send_signal(signal.SIGTERM if expect_failed is None else signal.SIGKILL)
        try:
            run.exit_code = process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            run.exit_code = process.wait()
        run.timings["exit"] = round(time.monotonic() - started, 2)
        log.seek(0)
        run.output = log.read()
        log.close()
    time.sleep(0.2)  # audit events are written when a request ends: let the operator's last ones land
    run.denied = [describe(e) for e in sa_requests(ctx, run.audit_offset)
                  if e.get("responseStatus", {}).get("code") == 403]
    delete_namespace(ctx.admin, namespace)
    print(f"{namespace}: failed {sorted(run.failed)}, denied {sorted(set(run.denied))}, timings {run.timings}")
    return run


def summary(run: Run) -> str:
    return (f"failed features: {json.dumps(run.failed, indent=1)}\ndenied: {sorted(set(run.denied))}\n"
            f"exit code {run.exit_code}; timings {run.timings}; operator output (tail):\n{run.output[-4000:]}")


# ----------------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def ctx(k8s: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Context]:
    if k8s["run_dir"] is None:
        pytest.skip("needs the k8s-testenv: its token user for the ServiceAccount and its audit log")
    run_dir = Path(k8s["run_dir"])
    kubeconfig = run_dir / SA_KUBECONFIG
    assert kubeconfig.is_file(), f"{kubeconfig} missing: conftest.TESTENV_ENV must list {SA_USER} in TESTENV_USERS"
    assert (run_dir / "audit.log").is_file(), "the testenv runs without AUDIT=1"
    admin = k8s["admin"]
    chart = render(namespace=SA_NAMESPACE)
    core = kubernetes.client.CoreV1Api(admin)
    created_namespace = True
    try:
        core.create_namespace({"metadata": {"name": SA_NAMESPACE}})
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        created_namespace = False
    apply(admin, one(chart, "ServiceAccount"))
    for name, (product, gpus) in NODES.items():
        status = {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                  "conditions": [{"type": "Ready", "status": "True"}]}
        apply(admin, {"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}}, "status": status})
        core.patch_node_status(name, {"status": status})
    observe_skip = observe_unavailable()
    observe = None if observe_skip else start_observe(tmp_path_factory.mktemp("rbac-observe"))
    context = Context(admin, run_dir, kubeconfig, run_dir / "audit.log", chart, observe, observe_skip)
    try:
        yield context
    finally:
        if observe is not None:
            observe.stop()
        set_rbac(context, [])  # the bindings; then the roles they bound, the ServiceAccount and its namespace
        rbac = kubernetes.client.RbacAuthorizationV1Api(admin)
        for role in rbac.list_cluster_role(label_selector="app.kubernetes.io/name=inferplan").items:
            delete(admin, "rbac.authorization.k8s.io/v1", "ClusterRole", role.metadata.name)
        for role in rbac.list_role_for_all_namespaces(label_selector="app.kubernetes.io/name=inferplan").items:
            delete(admin, "rbac.authorization.k8s.io/v1", "Role", role.metadata.name, role.metadata.namespace)
        if created_namespace:
            delete_namespace(admin, SA_NAMESPACE)
        else:
            delete(admin, "v1", "ServiceAccount", one(chart, "ServiceAccount")["metadata"]["name"], SA_NAMESPACE)
        for name in NODES:
            delete(admin, "v1", "Node", name)
        probe_crd(context, None)


def features_for(ctx: Context) -> tuple[str, ...]:
    return tuple(f for f in FEATURES if f != "observe" or ctx.observe is not None)


# ----------------------------------------------------------------------------------------------------------
# The tests


def test_the_chart_rbac_is_enough_for_every_feature(ctx: Context) -> None:
    rules = one(ctx.chart, "ClusterRole")["rules"]
    assert [(set(r["apiGroups"]), set(r["resources"]), set(r["verbs"])) for r in rules] == EXPECTED_RULES
    set_rbac(ctx, ctx.chart)
    run = operate(ctx, fresh_namespace(ctx, "all"), features_for(ctx))
    assert not run.failed, summary(run)
    assert not run.denied, summary(run)
    assert run.exit_code == 0, summary(run)
    if ctx.observe is None:
        pytest.skip(f"everything else works; the observe feature was not checked: {ctx.observe_skip}")


@pytest.mark.parametrize("index", range(len(EXPECTED_RULES)), ids=RULE_IDS)
def test_removing_any_rule_breaks_the_feature_that_needs_it(ctx: Context, index: int) -> None:
    features = features_for(ctx)
    if RULE_IDS[index] == "deployments" and "observe" not in features:
        pytest.skip(ctx.observe_skip or "spec.observe not yet implemented")
    expected = BROKEN_WITHOUT[index] & set(features)
    chart = [dict(o) for o in ctx.chart]
    role = one(chart, "ClusterRole")
    role["rules"] = [rule for i, rule in enumerate(role["rules"]) if i != index]
    set_rbac(ctx, chart)
    run = operate(ctx, fresh_namespace(ctx, f"without-{RULE_IDS[index]}"), features, expect_failed=expected)
    assert set(run.failed) == expected, f"removing rule {RULE_IDS[index]}: {summary(run)}"
    _, resources, _ = EXPECTED_RULES[index]
    assert {resource for _, resource, _ in run.denied} <= resources and run.denied, summary(run)


def test_namespaced_mode_is_enough(ctx: Context) -> None:
    namespace = fresh_namespace(ctx, "ns")
    objects = render(sets=(f"watchNamespaces={{{namespace}}}",), namespace=SA_NAMESPACE)
    assert one(objects, "Role")["metadata"]["namespace"] == namespace
    set_rbac(ctx, objects)  # ClusterRole inferplan-cluster (nodes, CRDs, namespaces) and a Role in the namespace
    run = operate(ctx, namespace, features_for(ctx), namespaced=True)
    assert not run.failed, summary(run)
    assert not run.denied, summary(run)
    assert run.exit_code == 0, summary(run)


def test_peering_rbac_is_enough_and_needed(ctx: Context) -> None:
    objects = render(CHART / "ci" / "peering-values.yaml", sets=("peering.name=inferplan",), namespace=SA_NAMESPACE)
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    peering_env = {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("INFERPLAN_PEERING")}
    assert peering_env["INFERPLAN_PEERING"] == "inferplan"
    crd = one(objects, "CustomResourceDefinition", "clusterkopfpeerings.kopf.dev")
    apply(ctx.admin, crd)
    crds = kubernetes.client.ApiextensionsV1Api(ctx.admin)
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in
                         crds.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []))
    apply(ctx.admin, one(objects, "ClusterKopfPeering"))
    FEATURES["peering"] = check_peering
    try:
        set_rbac(ctx, objects)
        features = ("peering", "status", "events")
        run = operate(ctx, fresh_namespace(ctx, "peering"), features, extra_env=peering_env)
        assert not run.failed and not run.denied, summary(run)
        role = one(objects, "ClusterRole")
        assert role["rules"][-1]["apiGroups"] == ["kopf.dev"]
        role["rules"] = role["rules"][:-1]
        delete(ctx.admin, "kopf.dev/v1", "ClusterKopfPeering", "inferplan")
        apply(ctx.admin, one(objects, "ClusterKopfPeering"))
        set_rbac(ctx, objects)
        run = operate(ctx, fresh_namespace(ctx, "no-peering"), features, extra_env=peering_env,
                      expect_failed=set(features))
        assert set(run.failed) == set(features), summary(run)  # kopf serves nothing while it cannot peer
        assert any(resource == "clusterkopfpeerings" for _, resource, _ in run.denied), summary(run)
    finally:
        FEATURES.pop("peering", None)
        delete(ctx.admin, "kopf.dev/v1", "ClusterKopfPeering", "inferplan")
        delete(ctx.admin, "apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"])


def test_example_manifests_pass_a_server_side_dry_run(ctx: Context) -> None:
    """Every manifest under deploy/examples, and the chart's objects, as the API server would accept them."""
    dynamic = kubernetes.dynamic.DynamicClient(ctx.admin)
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            api = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            created = api.create(body=doc, namespace="default", dry_run="All")
            assert created.metadata.name == doc["metadata"]["name"], path
    for obj in ctx.chart:
        if obj["kind"] == "CustomResourceDefinition":
            continue  # Established already (conftest applied crds/, which test_packaging compares)
        api = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace")
        try:
            api.create(body=obj, namespace=namespace, dry_run="All")
        except kubernetes.dynamic.exceptions.ConflictError:
            pass  # the ServiceAccount exists (applied by the fixture)
