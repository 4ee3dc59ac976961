"""The GitOps walk-through of docs/install.md (section 4), run as written against the test API server: the plan
and the commands are read from the document, and each command's exit code is the one its comment states (0
without one). The operator runs as deployed (a process), with a Prometheus stand-in whose every answer is the
same, so that each observation of a plan finds what the last one did.

Issue 36, point 9: render and diff of a plan read back from the cluster use its reviewed status or refuse (never
plan it again over the GPU catalog); `kubectl get icp` has a FEASIBLE column; GPU nodes the inventory skips are
named in the status; an observed plan's status is not rewritten when nothing changed.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import kubernetes
import pytest
import yaml

from inferplan.deploy.manifests import deployment
from inferplan.operator.inventory import NodeGpus, build_inventory
from inferplan.operator.reconcile import request_for_cluster
from inferplan.planner.request import resolve_plan
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import parse_plan
from inferplan.resource import GROUP, PLURAL, VERSION

from .conftest import REPO, delete_namespace, wait_for

INSTALL = REPO / "docs" / "install.md"
NAMESPACE = "serving"  # the walk-through's
H100 = "NVIDIA-H100-80GB-HBM3"
BIN = Path(sys.executable).parent  # kubectl and inferplan, as the walk-through calls them


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def walkthrough() -> tuple[str, list[str]]:
    """The plan file and the commands (continuation lines joined, comment lines left out) of docs/install.md's
    GitOps section."""
    section = _section(INSTALL.read_text(), "## 4. The GitOps flow")
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)
    plan_file = next(body for kind, body in blocks if kind == "yaml" and body.startswith("# apps/chat/plan.yaml"))
    script = next(body for kind, body in blocks if kind == "sh")
    commands: list[str] = []
    pending = ""
    for line in script.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append(pending + line.strip())
        pending = ""
    return plan_file, commands


def expected_exit(command: str) -> int:
    """The exit code the command's own comment states ("# exit 1: ..."), else 0."""
    found = re.search(r"#\s*exit (\d+)", command)
    return int(found.group(1)) if found else 0


def cells(table: str) -> dict[str, str]:
    """The first row of `kubectl get` output by column name (an empty cell as "")."""
    header, row = table.splitlines()[:2]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    bounds = [*starts[1:], None]
    return {name: row[start:end].strip() for name, start, end in zip(names, starts, bounds, strict=True)}


class ConstantPrometheus:
    """Prometheus's query API answering every instant query with one sample, always the same (600 requests in the
    window for a count's increase, 10 for anything else), and counting them."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                query = parse_qs(body).get("query", [""])[0]
                owner.queries.append(query)
                value = "600" if "increase(" in query else "10"
                answer = {"status": "success",
                          "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def observations(self, selector_value: str) -> int:
        """Observations made of the plan whose selector carries `selector_value` (one total-count query each)."""
        return sum(1 for q in list(self.queries) if "sum(increase(" in q and selector_value in q)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def gpu_node(name: str, *, allocatable: bool = True, ready: bool | None = True) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocatable:
        status["allocatable"] = status["capacity"] = {"nvidia.com/gpu": "8"}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": H100}},
            "status": status}


NODES = [gpu_node("gitops-h100"), gpu_node("gitops-no-ready", ready=None),
         gpu_node("gitops-no-allocatable", allocatable=False)]


def running_deployment(plan_manifest: dict[str, Any]) -> dict[str, Any]:
    """The Deployment `chat` that runs before the walk-through: rendered from an earlier answer (one replica more,
    a smaller batch), as the section says."""
    inventory = build_inventory([NodeGpus("gitops-h100", H100, 8, True, True)])
    request, _ = request_for_cluster(resolve_plan(parse_plan(plan_manifest["spec"])), inventory, False)
    candidate = plan(request).recommendation
    assert candidate is not None
    body = deployment(request, candidate, name="chat", namespace=NAMESPACE)
    body["spec"]["replicas"] += 1
    args = body["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--max-num-seqs") + 1] = "64"
    return body


@dataclass
class Setup:
    objects: kubernetes.client.CustomObjectsApi
    prometheus: ConstantPrometheus
    workdir: Path
    env: dict[str, str]
    log: Path
    plan_manifest: dict[str, Any]

    def status(self, name: str) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name).get("status") or {}

    def create(self, name: str, change: dict[str, Any]) -> None:
        """The walk-through's plan under another name, with spec fields changed (None: left out)."""
        body = copy.deepcopy(self.plan_manifest)
        body["metadata"] = {"name": name}
        for key, value in change.items():
            body["spec"][key] = value
            if value is None:
                del body["spec"][key]
        self.objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)


@contextmanager
def operator_process(env: dict[str, str], log: Path, command: list[str] | None = None) -> Iterator[None]:
    """`inferplan operator` (or `command`) run with `env`, its output in `log`, while the block runs; then stopped
    (SIGTERM, killed after 30 s)."""
    with open(log, "w") as out:
        operator = subprocess.Popen(command or [str(BIN / "inferplan"), "operator"], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, text=True)
    try:
        yield
    finally:
        operator.send_signal(signal.SIGTERM)
        try:
            operator.wait(30)
        except subprocess.TimeoutExpired:
            operator.kill()


@pytest.fixture(scope="module")
def setup(k8s: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    admin = k8s["admin"]
    core, apps = kubernetes.client.CoreV1Api(admin), kubernetes.client.AppsV1Api(admin)
    objects = kubernetes.client.CustomObjectsApi(admin)
    plan_file, _ = walkthrough()
    plan_manifest = yaml.safe_load(plan_file)
    workdir = tmp_path_factory.mktemp("gitops")
    (workdir / "apps" / "chat").mkdir(parents=True)
    (workdir / "apps" / "chat" / "plan.yaml").write_text(plan_file)
    running = running_deployment(plan_manifest)
    (workdir / "apps" / "chat" / "deployment.yaml").write_text(yaml.safe_dump(running, sort_keys=False))
    prometheus = ConstantPrometheus()
    endpoints = workdir / "prometheus-endpoints.yaml"
    endpoints.write_text(yaml.safe_dump([{"name": "main", "url": prometheus.url, "timeoutSeconds": 2}]))
    created_namespace = True
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        created_namespace = False
    for node in NODES:
        core.create_node(node)
        core.patch_node_status(node["metadata"]["name"], {"status": node["status"]})
    apps.create_namespaced_deployment(NAMESPACE, running)  # what Argo CD or Flux applied before
    env = {**os.environ, "KUBECONFIG": str(k8s["kubeconfig"]), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    operator_env = {**env, "INFERPLAN_NAMESPACES": NAMESPACE, "INFERPLAN_METRICS_PORT": "0",
                    "INFERPLAN_HEALTH_PORT": "0", "INFERPLAN_CHECK_SECONDS": "0.5", "INFERPLAN_OBSERVE_SECONDS": "1",
                    "INFERPLAN_PLANNER_PROCESSES": "1", "INFERPLAN_PROMETHEUS_CONFIG": str(endpoints)}
    log = workdir / "operator.log"
    try:
        with operator_process(operator_env, log):
            yield Setup(objects, prometheus, workdir, env, log, plan_manifest)
    finally:
        prometheus.stop()
        for node in NODES:
            try:
                core.delete_node(node["metadata"]["name"])
            except kubernetes.client.ApiException:
                pass
        if created_namespace:  # everything in it: the plans and whatever the walk-through's commands applied
            delete_namespace(admin, NAMESPACE)
        else:  # a namespace that was there before (an external cluster): what this module made in it
            policy = kubernetes.client.PolicyV1Api(admin)
            for delete in (*(lambda n=n: objects.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, n)
                             for n in ("chat", "chat-nodes", "steady")),
                           lambda: apps.delete_namespaced_deployment("chat", NAMESPACE),
                           lambda: core.delete_namespaced_service("chat", NAMESPACE),
                           lambda: policy.delete_namespaced_pod_disruption_budget("chat", NAMESPACE)):
                try:
                    delete()
                except (kubernetes.client.ApiException, ValueError):  # ValueError: the client reading the answer
                    pass


@dataclass(frozen=True)
class Ran:
    command: str
    code: int
    out: str
    err: str


def test_the_gitops_walkthrough_runs_as_written(setup: Setup) -> None:
    _, commands = walkthrough()
    ran: list[Ran] = []
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=setup.workdir, env=setup.env, capture_output=True,
                              text=True, timeout=300)
        ran.append(Ran(command, done.returncode, done.stdout, done.stderr))
        assert done.returncode == expected_exit(command), (
            f"{command}\nexit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}\n"
            f"operator log:\n{setup.log.read_text()[-3000:]}")

    def outputs(prefix: str) -> list[Ran]:
        return [r for r in ran if r.command.startswith(prefix)]

    # 2. The answer, with the FEASIBLE column; the diff against the running Deployment.
    first, last = [r for r in ran if r.command == "kubectl get icp chat -n serving"]
    answered = cells(first.out)
    assert answered["FEASIBLE"] == "True" and answered["READY"] == "True" and answered["GPU"]
    assert "replicas:" in outputs("kubectl get icp chat -n serving -o jsonpath='{.status.recommendation.change")[0].out
    [diff] = outputs("inferplan diff")
    assert "patch (kubectl patch deployment chat" in diff.out and "--max-num-seqs 64 ->" in diff.out

    # 3. Rendered from the reviewed status, and said so, with the status's digest.
    reviewed = yaml.safe_load((setup.workdir / "chat-reviewed.yaml").read_text())
    [render] = outputs("inferplan render chat-reviewed.yaml")
    assert "rendering the recommendation in the reviewed status of serving/chat (observedGeneration 1)" in render.err
    assert reviewed["status"]["recommendation"]["manifests"]["digest"] in render.err
    rendered = list(yaml.safe_load_all((setup.workdir / "apps" / "chat" / "deployment.yaml").read_text()))
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in rendered] == ["Deployment/chat",
                                                                          "PodDisruptionBudget/chat", "Service/chat"]

    # 5. Infeasible on the cluster's GPUs: answered, FEASIBLE False, empty columns; render refuses.
    peak = cells(last.out)
    assert peak["FEASIBLE"] == "False" and peak["READY"] == "True" and peak["GPU"] == "" and peak["REPLICAS"] == ""
    [refused] = outputs("kubectl get icp chat -n serving -o yaml | inferplan render -")
    assert refused.out == ""
    assert "serving/chat: the status has no recommendation" in refused.err and "Feasible=False" in refused.err


def test_gpu_nodes_the_inventory_skips_are_named_in_the_status(setup: Setup) -> None:
    setup.create("chat-nodes", {"observe": None})

    def answered() -> dict[str, Any] | None:
        status = setup.status("chat-nodes")
        return status if status.get("observedGeneration") == 1 else None

    warnings = " ".join(wait_for(answered, timeout_s=120, interval_s=0.5).get("warnings", []))
    assert "gitops-no-ready (no Ready condition)" in warnings
    assert "gitops-no-allocatable (no allocatable nvidia.com/gpu)" in warnings
    assert "gitops-h100 (" not in warnings  # counted


def test_an_observed_plan_is_not_rewritten_when_nothing_changed(setup: Setup) -> None:
    observe = {**setup.plan_manifest["spec"]["observe"], "selector": {"namespace": NAMESPACE, "plan": "steady"}}
    setup.create("steady", {"observe": observe})

    def observed() -> dict[str, Any] | None:
        # An observation made once the recommendation (with its prediction intervals) is in the status: it judges
        # against the intervals and writes the band it used (`prediction.intervalMs`); one made before the plan
        # was answered has none, and the next observation would add it.
        status = setup.status("steady")
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        ready = conditions.get("MetricsAvailable") == "True" and conditions.get("Ready") == "True"
        return status if ready and (status.get("prediction") or {}).get("intervalMs") else None

    wait_for(observed, timeout_s=120, interval_s=0.5)
    # Once the status has the plan and its first observation, later observations find the same figures.
    wait_for(lambda: setup.prometheus.observations('plan="steady"') >= 2, timeout_s=60, interval_s=0.2)
    before = setup.objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "steady")
    seen = setup.prometheus.observations('plan="steady"')
    wait_for(lambda: setup.prometheus.observations('plan="steady"') >= seen + 3, timeout_s=60, interval_s=0.2)
    after = setup.objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, "steady")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        json.dumps(before["status"].get("observed")), json.dumps(after["status"].get("observed")))


EDITS_NAMESPACE = "gitops-edits"


@pytest.fixture(scope="module")
def hourly(setup: Setup, k8s: dict[str, Any]) -> Iterator[Setup]:
    """A second operator, for the namespace `gitops-edits` only, that observes its plans once an hour (the module's
    other operator observes every second): a plan's observations are then the one at its creation and those its
    spec edits bring, never one that falls due by the clock."""
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    core.create_namespace({"metadata": {"name": EDITS_NAMESPACE}})
    endpoints = setup.workdir / "prometheus-endpoints.yaml"
    env = {**setup.env, "INFERPLAN_NAMESPACES": EDITS_NAMESPACE, "INFERPLAN_METRICS_PORT": "0",
           "INFERPLAN_HEALTH_PORT": "0", "INFERPLAN_CHECK_SECONDS": "0.5", "INFERPLAN_OBSERVE_SECONDS": "3600",
           "INFERPLAN_PLANNER_PROCESSES": "1", "INFERPLAN_PROMETHEUS_CONFIG": str(endpoints)}
    log = setup.workdir / "operator-hourly.log"
    try:
        with operator_process(env, log):
            yield Setup(setup.objects, setup.prometheus, setup.workdir, setup.env, log, setup.plan_manifest)
    finally:
        delete_namespace(k8s["admin"], EDITS_NAMESPACE)


def test_a_spec_edit_of_an_observed_plan_is_answered_in_one_write(hourly: Setup) -> None:
    """Traffic grows in Git (requestsPerSecond 20 -> 24): the answer to the new generation is written once, with
    every condition of that generation. Before, the observation conditions kept the generation before until the
    plan's next observation, which wrote the status a second time (every spec edit of an observed plan: two
    resourceVersions, and a committed `kubectl get -o yaml` between them said MetricsAvailable was about the old
    spec)."""
    objects = hourly.objects
    body = copy.deepcopy(hourly.plan_manifest)
    body["metadata"] = {"name": "weekly"}
    body["spec"]["observe"] = {**body["spec"]["observe"], "selector": {"namespace": EDITS_NAMESPACE, "plan": "weekly"}}
    objects.create_namespaced_custom_object(GROUP, VERSION, EDITS_NAMESPACE, PLURAL, body)

    def read() -> dict[str, Any]:
        return objects.get_namespaced_custom_object(GROUP, VERSION, EDITS_NAMESPACE, PLURAL, "weekly")

    def answers(generation: int) -> dict[str, Any] | None:
        plan = read()
        return plan if (plan.get("status") or {}).get("observedGeneration") == generation else None

    first = wait_for(lambda: answers(1), timeout_s=120, interval_s=0.2)
    assert {c["type"]: c["status"] for c in first["status"]["conditions"]}["MetricsAvailable"] == "True"
    objects.patch_namespaced_custom_object(GROUP, VERSION, EDITS_NAMESPACE, PLURAL, "weekly",
                                           {"spec": {"workload": {"requestsPerSecond": "24"}}})
    answered = wait_for(lambda: answers(2), timeout_s=120, interval_s=0.2)
    assert {c["type"]: c["observedGeneration"] for c in answered["status"]["conditions"]} == {
        "Ready": 2, "Feasible": 2, "InventoryAvailable": 2, "MetricsAvailable": 2, "PredictionAccurate": 2}
