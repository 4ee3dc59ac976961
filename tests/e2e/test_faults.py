"""Faults, end to end (issue 8): the operator keeps every plan answered, and loses or duplicates nothing, when
its spec is edited under it, when it is killed, when Prometheus misbehaves, when a second replica runs beside
it, and when the API server goes away and comes back.

This module runs its own k8s-testenv (own run folder and ports, RBAC and audit on, two extra token users for
the two replicas of the peering test), because one test stops and restarts its API server and another
installs kopf's peering CRDs: the session's server (conftest.py) is left alone. The operator runs as a process,
as deployed (`inferplan operator`), watching the test's own namespace, checking every 0.5 s.
"""

from __future__ import annotations

import collections
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.operator.inventory import Inventory, InventoryEntry
from inferplan.operator.reconcile import reconcile_plan
from inferplan.operator.status import next_status
from inferplan.resource import GROUP, PLURAL, VERSION
from tests.support.plans import example_spec

from .conftest import EXTERNAL_KUBECONFIG, REPO, TESTENV, _missing_prerequisite, _skip_or_fail, wait_for

REPLICAS = ("replica-a", "replica-b")  # token users of the peering test (group system:masters: no RBAC setup)
NODES = {"faults-h100-0": ("NVIDIA-H100-80GB-HBM3", 8), "faults-h100-1": ("NVIDIA-H100-80GB-HBM3", 8),
         "faults-l40s-0": ("NVIDIA-L40S", 4), "faults-l40s-1": ("NVIDIA-L40S", 4),
         "faults-a100-0": ("NVIDIA-A100-SXM4-80GB", 8)}
CHAT = example_spec(REPO / "examples" / "plans" / "chat-assistant-8b.yaml")
BURSTY = example_spec(REPO / "examples" / "plans" / "bursty-agent.yaml")  # verified: slower
INVALID_MODEL = "acme/not-a-real-model"


def spec(rate: float = 20.0, gpu_types: list[str] | None = None, base: dict[str, Any] = CHAT) -> dict[str, Any]:
    """The chat example (or `base`) at `rate` requests/s, restricted to `gpu_types` (default: L40S, H100)."""
    out = json.loads(json.dumps(base))
    out["workload"]["requestsPerSecond"] = f"{rate:g}"
    out["constraints"]["gpuTypes"] = gpu_types or ["NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3"]
    return out


def manifest(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": name},
            "spec": body}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# ----------------------------------------------------------------------------------------------------------
# The module's API server


@dataclass
class Cluster:
    run: Path
    admin: kubernetes.client.ApiClient
    objects: kubernetes.client.CustomObjectsApi
    core: kubernetes.client.CoreV1Api

    @property
    def kubeconfig(self) -> Path:
        return self.run / "admin.kubeconfig"

    def user_kubeconfig(self, user: str) -> Path:
        return self.run / f"user-{user}.kubeconfig"

    def namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": name}})
        return name

    def plans(self, namespace: str) -> dict[str, dict[str, Any]]:
        items = self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        return {item["metadata"]["name"]: item for item in items}

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

    def create(self, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest(name, body))

    def audit(self) -> list[dict[str, Any]]:
        lines = (self.run / "audit.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def restart_apiserver(self, down_s: float) -> None:
        """Stop the API server, keep it down for `down_s`, start it again on the same port, certificates and
        etcd (whose data stays). start.sh cannot do this: it starts from fresh state, new certificates and an
        empty etcd. The server is started with exactly the command line start.sh gave it."""
        pid_file = self.run / "apiserver.pid"
        pid = int(pid_file.read_text())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert str(self.run).encode() in b" ".join(argv)  # our server, not a reused PID
        os.kill(pid, signal.SIGTERM)  # as stop.sh does: SIGTERM, SIGKILL after 10 s (open watches hold it up)
        try:
            wait_for(lambda: not alive(pid), timeout_s=10)
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not alive(pid), timeout_s=10)
        time.sleep(down_s)
        with open(self.run / "apiserver.log", "ab") as log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        pid_file.write_text(f"{process.pid}\n")  # stop.sh stops it at the end

        def ready() -> bool:  # /readyz comes before the CRDs' paths are served again: ask for plans
            try:
                return bool(self.objects.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=1,
                                                                    _request_timeout=2))
            except Exception:
                return False

        wait_for(ready, timeout_s=60, interval_s=0.2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if EXTERNAL_KUBECONFIG:
        pytest.skip("the fault tests restart their own API server: they run on the local k8s-testenv only")
    if reason := _missing_prerequisite():
        _skip_or_fail(reason)
    run = Path(tempfile.gettempdir()) / f"inferplan-faults-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "TESTENV_PORTS": "auto", "RBAC": "1", "AUDIT": "1",
           "TESTENV_USERS": " ".join(f"{user}=system:masters" for user in REPLICAS)}
    env.setdefault("TESTENV_CACHE_DIR", str(Path.home() / ".cache" / "k8s-testenv"))
    started = subprocess.run([str(TESTENV / "start.sh"), str(run)], env=env, capture_output=True, text=True)
    if started.returncode != 0:
        pytest.fail(f"k8s-testenv did not start:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}", pytrace=False)
    try:
        admin = kubernetes.config.new_client_from_config(str(run / "admin.kubeconfig"))
        crds = kubernetes.client.ApiextensionsV1Api(admin)
        for path in (REPO / "crds" / "inferplan.io_inferencecapacityplans.yaml", REPO / "crds" / "kopf-peering.yaml"):
            for body in yaml.safe_load_all(path.read_text()):
                crds.create_custom_resource_definition(body)

        def established() -> bool:
            items = crds.list_custom_resource_definition().items
            return len(items) == 3 and all(any(c.type == "Established" and c.status == "True"
                                               for c in item.status.conditions or []) for item in items)

        wait_for(established)
        core = kubernetes.client.CoreV1Api(admin)
        for name, (product, gpus) in NODES.items():
            core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
                              "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                                         "conditions": [{"type": "Ready", "status": "True"}]}})
        yield Cluster(run, admin, kubernetes.client.CustomObjectsApi(admin), core)
    finally:
        subprocess.run([str(TESTENV / "stop.sh"), str(run), "--rm"], capture_output=True, check=False)


# ----------------------------------------------------------------------------------------------------------
# The operator as a process


class Operator:
    """`inferplan operator` watching one namespace, its output in a log file of the run folder."""

    def __init__(self, cluster: Cluster, namespace: str, label: str, kubeconfig: Path | None = None,
                 **env: str) -> None:
        self.metrics_port = free_port()
        self.log_path = cluster.run / f"operator-{namespace}-{label}.log"
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig or cluster.kubeconfig),
                    "INFERPLAN_NAMESPACES": namespace, "INFERPLAN_CHECK_SECONDS": "0.5",
                    "INFERPLAN_METRICS_PORT": str(self.metrics_port), "INFERPLAN_HEALTH_PORT": "0", **env}
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        with open(self.log_path, "ab") as log:  # the process keeps its own descriptor
            self.process = subprocess.Popen([str(Path(sys.executable).with_name("inferplan")), "operator"],
                                            env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def workers(self) -> list[int]:
        """The planner worker processes (and multiprocessing's resource tracker) it started."""
        found = []
        for task in Path(f"/proc/{self.pid}/task").glob("*"):
            try:
                found += [int(pid) for pid in (task / "children").read_text().split()]
            except OSError:
                continue
        return found

    def kill(self) -> None:
        """SIGKILL, the operator only: its workers must notice by themselves."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.running():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def messages(self) -> list[str]:
        out = []
        for line in self.log().splitlines():
            try:
                out.append(json.loads(line)["message"])
            except (ValueError, KeyError):
                continue
        return out

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


@pytest.fixture
def operators() -> Iterator[list[Operator]]:
    """Operators a test starts; all stopped at its end, whatever happened."""
    started: list[Operator] = []
    yield started
    for operator in started:
        operator.stop()
        # Captured: pytest shows it when the test failed.
        print(f"--- {operator.log_path.name}\n{operator.log()[-4000:]}")


# ----------------------------------------------------------------------------------------------------------
# What an answered plan looks like


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def answered(obj: dict[str, Any]) -> bool:
    """A status for the plan's current generation, with an outcome (Ready True or False)."""
    return ((obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
            and condition(obj, "Ready").get("status") in ("True", "False"))


def all_answered(cluster: Cluster, namespace: str, count: int) -> dict[str, dict[str, Any]] | None:
    plans = cluster.plans(namespace)
    return plans if len(plans) == count and all(answered(p) for p in plans.values()) else None


def expected_recommendation(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the planner recommends for the plan's spec against the inventory its status says its answer holds
    for: each GPU type at the lowest count of its range (`minGpus`)."""
    entries = tuple(InventoryEntry(gpu_type=e["gpuType"], product_label=e["productLabel"], gpus=e["minGpus"], nodes=1,
                                   gpus_per_node=e["gpusPerNode"]) for e in obj["status"]["inventory"])
    meta = obj["metadata"]
    outcome = reconcile_plan(obj["spec"], Inventory(entries, (), ()), name=meta["name"], namespace=meta["namespace"])
    status = next_status(None, generation=1, now="", planner_version="", inventory=Inventory(entries, (), ()),
                         result=outcome.result, error=outcome.error,
                         ttft_percentile=obj["spec"]["slo"]["ttft"]["percentile"], manifests=outcome.manifests,
                         change=outcome.change)
    return status.get("recommendation")


def settled(cluster: Cluster, namespace: str, quiet_s: float = 2.0) -> dict[str, str]:
    """name -> resourceVersion once no plan of the namespace has changed for `quiet_s`."""
    def versions() -> dict[str, str]:
        return {name: p["metadata"]["resourceVersion"] for name, p in cluster.plans(namespace).items()}

    last = versions()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = versions()
        if now == last:
            return now
        last = now
    raise AssertionError(f"plans of {namespace} kept changing for 60 s")


# ----------------------------------------------------------------------------------------------------------
# The tests


def test_a_spec_edited_while_it_is_planned_ends_answered_for_its_last_generation(
        cluster: Cluster, operators: list[Operator]) -> None:
    """Someone edits plans while they are being planned: every plan's final status answers its final spec
    (observedGeneration == generation, the recommendation the planner gives for exactly that spec)."""
    ns = cluster.namespace("conflicts")
    operators.append(Operator(cluster, ns, "main").start())
    cluster.create(ns, "warm-up", spec())  # the edits below should meet a running operator, planning
    wait_for(lambda: answered(cluster.get(ns, "warm-up")), timeout_s=60)
    names = [f"edited-{i}" for i in range(5)]
    for i, name in enumerate(names):
        cluster.create(ns, name, spec(rate=10 + i))
    edits = [(30, None), (5, ["NVIDIA-L40S"]), (80, ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"]),
             (12, None), (45, ["NVIDIA-A100-SXM4-80GB"]), (25, ["NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3"])]
    for rate, types in edits:  # each edit lands while the previous generation may still be planned
        for i, name in enumerate(names):
            cluster.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, {"spec": spec(
                rate=rate + i, gpu_types=types)})
        time.sleep(0.15)
    wait_for(lambda: all_answered(cluster, ns, len(names) + 1), timeout_s=60, interval_s=0.2)
    settled(cluster, ns)
    for name in names:
        obj = cluster.get(ns, name)
        assert obj["metadata"]["generation"] == 1 + len(edits), obj["metadata"]
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        assert condition(obj, "Ready")["status"] == "True"
        assert obj["spec"]["workload"]["requestsPerSecond"] == f"{25 + names.index(name):g}"
        assert obj["status"]["recommendation"] == expected_recommendation(obj), name
        assert {e["gpuType"] for e in obj["status"]["inventory"]} == {"L40S", "H100-SXM5-80GB"}


def test_an_operator_killed_mid_run_converges_after_restart_without_rewrites_or_duplicates(
        cluster: Cluster, operators: list[Operator]) -> None:
    """SIGKILL while 200 plans are being planned; restarted, every plan converges; its planner workers do not
    outlive it; a further restart rewrites no status; conditions and problem events are not duplicated."""
    ns = cluster.namespace("killed")
    bad = {f"plan-{i:03d}" for i in range(0, 200, 20)}  # 10 plans with an unknown model: one event each
    for i in range(200):
        name = f"plan-{i:03d}"
        body = spec(rate=5 + i % 37, base=BURSTY if i % 4 == 3 else CHAT)
        if name in bad:
            body["model"] = {"name": INVALID_MODEL}
        cluster.create(ns, name, body)
    first = Operator(cluster, ns, "first").start()
    operators.append(first)
    # Kill it once some plans are answered and most are not: in the middle of the work.
    wait_for(lambda: sum(answered(p) for p in cluster.plans(ns).values()) >= 10, timeout_s=60, interval_s=0.2)
    workers = first.workers()
    first.kill()
    answered_at_kill = sum(answered(p) for p in cluster.plans(ns).values())
    assert answered_at_kill < 200, "all plans were answered before the kill: nothing was interrupted"
    assert workers, "no planner workers were seen"
    wait_for(lambda: not any(alive(pid) for pid in workers), timeout_s=15)  # orphans exit by themselves

    second = Operator(cluster, ns, "second").start()
    operators.append(second)
    plans = wait_for(lambda: all_answered(cluster, ns, 200), timeout_s=120, interval_s=0.5)
    for name, obj in plans.items():
        types = [c["type"] for c in obj["status"]["conditions"]]
        assert len(types) == len(set(types)), (name, types)
        ready = condition(obj, "Ready")
        expected = ("False", "InvalidModel") if name in bad else ("True", "Planned")
        assert (ready["status"], ready["reason"]) == expected, (name, ready)
    events = [e for e in cluster.core.list_namespaced_event(ns).items if e.type == "Warning"]
    per_plan = collections.Counter((e.involved_object.name, e.reason) for e in events)
    assert per_plan == {(name, "InvalidModel"): 1 for name in bad}, per_plan

    # Restarted again on settled plans: nothing to write (resourceVersions unchanged), nothing re-planned.
    versions = settled(cluster, ns)
    second.stop()
    third = Operator(cluster, ns, "third").start()
    operators.append(third)
    wait_for(lambda: third.metric('inferplan_plans{condition="Ready",status="True"}') == 190, timeout_s=60)
    time.sleep(2.0)  # four checks (every 0.5 s) of every plan
    assert settled(cluster, ns, quiet_s=1.0) == versions
    assert not [m for m in third.messages() if "status written" in m]
    assert third.metric("inferplan_reconcile_duration_seconds_count") == 0


class FakePrometheus:
    """A Prometheus query API whose behaviour a test switches: "empty" (a valid answer without series),
    "garbage" (HTTP 200, not a query result) or "slow" (holds every request until the mode changes, at most
    60 s). `hanging` counts the requests it holds now."""

    def __init__(self) -> None:
        self.mode = "empty"
        self.hanging = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.answer()

            def do_GET(self) -> None:
                self.answer()

            def answer(self) -> None:
                if fake.mode == "slow":
                    with fake.lock:
                        fake.hanging += 1
                    try:
                        deadline = time.monotonic() + 60
                        while fake.mode == "slow" and time.monotonic() < deadline:
                            time.sleep(0.05)
                    finally:
                        with fake.lock:
                            fake.hanging -= 1
                if fake.mode == "garbage":
                    body = b"<html><body>502 Bad Gateway? no: 200 and not JSON</body></html>"
                else:
                    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (its timeout)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.mode = "closed"
        self.server.shutdown()
        self.server.server_close()


def observed_spec(prometheus: str) -> dict[str, Any]:
    body = spec(rate=8)
    body["observe"] = {"prometheus": prometheus, "selector": {"model_name": "llama"}, "window": "30s",
                       "current": {"gpuType": "NVIDIA-H100-80GB-HBM3", "replicas": 2}, "driftSeconds": 0}
    return body


def test_prometheus_unreachable_slow_or_garbage_is_reported_and_holds_up_nothing(
        cluster: Cluster, operators: list[Operator]) -> None:
    """MetricsAvailable names the problem (PrometheusUnreachable, PrometheusBadResponse), the recommendation
    stays, and while a Prometheus request hangs other plans are still planned."""
    fake = FakePrometheus()
    try:
        endpoints = cluster.run / f"prometheus-{uuid.uuid4().hex[:6]}.yaml"
        endpoints.write_text(yaml.safe_dump([
            {"name": "fake", "url": fake.url, "timeoutSeconds": 3},
            {"name": "down", "url": f"http://127.0.0.1:{free_port()}", "timeoutSeconds": 3}]))
        ns = cluster.namespace("prometheus")
        operators.append(Operator(cluster, ns, "main", INFERPLAN_PROMETHEUS_CONFIG=str(endpoints),
                                  INFERPLAN_OBSERVE_SECONDS="1").start())
        cluster.create(ns, "observed", observed_spec("fake"))
        cluster.create(ns, "unreachable", observed_spec("down"))
        cluster.create(ns, "other", spec(rate=10))

        def metrics_available(name: str, reason: str) -> dict[str, Any] | None:
            obj = cluster.get(ns, name)
            found = condition(obj, "MetricsAvailable")
            return obj if found.get("status") == "False" and found.get("reason") == reason else None

        before = wait_for(lambda: metrics_available("observed", "NoMatchingSeries"), timeout_s=60)
        recommendation = before["status"]["recommendation"]
        assert recommendation and condition(before, "Ready")["status"] == "True"
        down = wait_for(lambda: metrics_available("unreachable", "PrometheusUnreachable"), timeout_s=30)
        assert down["status"]["recommendation"] and condition(down, "Ready")["status"] == "True"
        assert "down" in condition(down, "MetricsAvailable")["message"]
        assert "127.0.0.1" not in json.dumps(down["status"])  # the endpoint's name, never its URL

        fake.mode = "garbage"
        garbage = wait_for(lambda: metrics_available("observed", "PrometheusBadResponse"), timeout_s=30)
        assert garbage["status"]["recommendation"] == recommendation

        fake.mode = "slow"  # beyond the endpoint's 3 s timeout
        wait_for(lambda: fake.hanging > 0, timeout_s=30)
        cluster.create(ns, "bystander", spec(rate=33))
        cluster.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "other",
                                                       {"spec": {"workload": {"requestsPerSecond": "40"}}})
        hanging_meanwhile = []

        def others_answered() -> bool:
            hanging_meanwhile.append(fake.hanging)
            return answered(cluster.get(ns, "bystander")) and answered(cluster.get(ns, "other"))

        wait_for(others_answered, timeout_s=30, interval_s=0.05)
        assert all(hanging_meanwhile), "the Prometheus request stopped hanging before the other plans were planned"
        slow = wait_for(lambda: metrics_available("observed", "PrometheusUnreachable"), timeout_s=30)
        assert "timed out" in condition(slow, "MetricsAvailable")["message"]
        assert slow["status"]["recommendation"] == recommendation
        assert condition(slow, "Ready")["status"] == "True"

        fake.mode = "empty"  # back: the condition follows
        wait_for(lambda: metrics_available("observed", "NoMatchingSeries"), timeout_s=30)
    finally:
        fake.close()


def test_an_observation_in_flight_never_writes_over_a_newer_answer(cluster: Cluster,
                                                                     operators: list[Operator]) -> None:
    """The observation/planning race of earlier builds (issue 15): an observation that started before a spec
    change and ended after it wrote its status, computed from the older status, over the newer generation's
    answer; planning in turn could drop what the observation wrote. Every status version the API server stores
    is checked here: observedGeneration never goes back, MetricsAvailable once written stays, and the end is
    the answer for the last spec with the observation's outcome."""
    fake = FakePrometheus()
    fake.mode = "slow"  # every query hangs until the endpoint's 4 s timeout
    stop = threading.Event()
    try:
        endpoints = cluster.run / f"prometheus-{uuid.uuid4().hex[:6]}.yaml"
        endpoints.write_text(yaml.safe_dump([{"name": "fake", "url": fake.url, "timeoutSeconds": 4}]))
        ns = cluster.namespace("race")
        operators.append(Operator(cluster, ns, "main", INFERPLAN_PROMETHEUS_CONFIG=str(endpoints),
                                  INFERPLAN_OBSERVE_SECONDS="1").start())
        stored: list[dict[str, Any]] = []  # the plan's statuses, in the order the server stored them

        def record() -> None:
            watch = kubernetes.watch.Watch()
            for event in watch.stream(cluster.objects.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL,
                                      timeout_seconds=180):
                stored.append(event["object"].get("status") or {})
                if stop.is_set():
                    watch.stop()

        threading.Thread(target=record, daemon=True).start()
        time.sleep(0.5)  # the watch is open before the plan exists
        cluster.create(ns, "raced", observed_spec("fake"))
        wait_for(lambda: fake.hanging > 0, timeout_s=60)  # an observation of generation 1 is in flight
        cluster.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "raced",
                                                       {"spec": {"workload": {"requestsPerSecond": "30"}}})

        def done() -> dict[str, Any] | None:
            obj = cluster.get(ns, "raced")
            ok = (obj["metadata"]["generation"] == 2 and answered(obj)
                  and condition(obj, "MetricsAvailable").get("reason") == "PrometheusUnreachable")
            return obj if ok else None

        final = wait_for(done, timeout_s=60)
        fake.mode = "empty"  # the next observation succeeds and writes again, over the newer answer
        wait_for(lambda: condition(cluster.get(ns, "raced"), "MetricsAvailable").get("reason") == "NoMatchingSeries",
                 timeout_s=30)
        settled(cluster, ns)
        stop.set()
        cluster.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "raced",
                                                       {"metadata": {"labels": {"done": "yes"}}})  # ends the watch
        last = cluster.get(ns, "raced")
    finally:
        stop.set()
        fake.close()
    generations = [s["observedGeneration"] for s in stored if "observedGeneration" in s]
    assert generations and generations == sorted(generations), generations
    assert generations[-1] == 2
    observed = [any(c["type"] == "MetricsAvailable" for c in s.get("conditions", [])) for s in stored]
    first = observed.index(True)
    assert all(observed[first:]), "a status write dropped MetricsAvailable"
    assert last["status"]["observedGeneration"] == 2 and condition(last, "Ready")["status"] == "True"
    assert last["status"]["recommendation"] == expected_recommendation(last) == final["status"]["recommendation"]


def status_writers(cluster: Cluster, namespace: str) -> collections.Counter[tuple[str, str]]:
    """(user, plan) -> status writes the audit log shows in `namespace`."""
    writes: collections.Counter[tuple[str, str]] = collections.Counter()
    for event in cluster.audit():
        ref = event.get("objectRef") or {}
        if (event.get("stage") == "ResponseComplete" and event.get("verb") == "patch"
                and ref.get("resource") == PLURAL and ref.get("subresource") == "status"
                and ref.get("namespace") == namespace):
            writes[(event["user"]["username"], ref["name"])] += 1
    return writes


def test_two_peered_replicas_one_works_and_a_killed_one_is_replaced(
        cluster: Cluster, operators: list[Operator]) -> None:
    """kopf peering (INFERPLAN_PEERING): of two replicas exactly one writes statuses; SIGKILLed, the other takes
    over within the peering lifetime plus a few seconds."""
    ns = cluster.namespace("peering")
    cluster.objects.create_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings", {
        "apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "inferplan"}})
    lifetime = 5
    peering = {"INFERPLAN_PEERING": "inferplan", "INFERPLAN_PEERING_LIFETIME": str(lifetime)}
    # A has the highest priority there is; B draws one at random, as replicas of one Deployment do.
    first = Operator(cluster, ns, "a", cluster.user_kubeconfig(REPLICAS[0]), POD_ID=REPLICAS[0],
                     INFERPLAN_PEERING_PRIORITY=str(2**31 - 1), **peering).start()
    second = Operator(cluster, ns, "b", cluster.user_kubeconfig(REPLICAS[1]), POD_ID=REPLICAS[1], **peering).start()
    operators += [first, second]

    def peers() -> dict[str, Any]:
        return cluster.objects.get_namespaced_custom_object("kopf.dev", "v1", ns, "kopfpeerings",
                                                            "inferplan").get("status") or {}

    wait_for(lambda: set(REPLICAS) <= set(peers()), timeout_s=60)
    names = [f"ha-{i}" for i in range(4)]
    for i, name in enumerate(names):
        cluster.create(ns, name, spec(rate=10 + 5 * i))
    wait_for(lambda: all_answered(cluster, ns, len(names)), timeout_s=60)
    time.sleep(1.0)  # audit events are written when a request ends
    writers = status_writers(cluster, ns)
    assert {user for user, _ in writers} == {REPLICAS[0]}, writers
    assert {plan for _, plan in writers} == set(names)
    assert not [m for m in second.messages() if "status written" in m]

    killed = time.monotonic()
    first.kill()
    cluster.create(ns, "after-kill", spec(rate=21))
    wait_for(lambda: answered(cluster.get(ns, "after-kill")), timeout_s=lifetime + 30, interval_s=0.1)
    handover = time.monotonic() - killed
    print(f"\nhandover after SIGKILL: {handover:.1f} s (peering lifetime {lifetime} s)")
    time.sleep(1.0)
    after = status_writers(cluster, ns) - writers
    assert set(after) == {(REPLICAS[1], "after-kill")}, after
    assert any("works now" in m for m in second.messages())

    # A comes back (a rolling update's new replica with the higher priority): it takes over, B waits again; A
    # stopped cleanly (SIGTERM) leaves the peering object, and B takes over at once.
    returned = Operator(cluster, ns, "a-again", cluster.user_kubeconfig(REPLICAS[0]), POD_ID=REPLICAS[0],
                        INFERPLAN_PEERING_PRIORITY=str(2**31 - 1), **peering).start()
    operators.append(returned)
    wait_for(lambda: any("works now" in m for m in returned.messages()), timeout_s=60)
    wait_for(lambda: any("this one (replica-b) waits" in m for m in second.messages()), timeout_s=10)
    cluster.create(ns, "after-return", spec(rate=22))
    wait_for(lambda: answered(cluster.get(ns, "after-return")), timeout_s=30, interval_s=0.1)
    stopped = time.monotonic()
    returned.stop()
    cluster.create(ns, "after-stop", spec(rate=23))
    wait_for(lambda: answered(cluster.get(ns, "after-stop")), timeout_s=30, interval_s=0.1)
    print(f"handover after SIGTERM: {time.monotonic() - stopped:.1f} s")
    time.sleep(1.0)
    later = status_writers(cluster, ns) - writers - after
    assert set(later) == {(REPLICAS[0], "after-return"), (REPLICAS[1], "after-stop")}, later


def test_an_api_server_outage_is_ridden_out(cluster: Cluster, operators: list[Operator]) -> None:
    """The API server stops for 12 s while plans are being planned and comes back: the same operator process
    reconnects its watches (a plan created and a plan edited afterwards are answered), every plan ends
    answered, and no status is lost or goes back."""
    ns = cluster.namespace("outage")
    operator = Operator(cluster, ns, "main").start()
    operators.append(operator)
    for i in range(20):
        cluster.create(ns, f"before-{i:02d}", spec(rate=5 + i))
    wait_for(lambda: all_answered(cluster, ns, 20), timeout_s=60)
    settled(cluster, ns, quiet_s=1.0)
    before = {name: obj["status"] for name, obj in cluster.plans(ns).items()}
    for i in range(10):  # mid-run: these are being planned when the server goes
        cluster.create(ns, f"during-{i:02d}", spec(rate=50 + i, base=BURSTY if i % 2 else CHAT))
    cluster.restart_apiserver(down_s=12.0)
    assert operator.running(), operator.log()[-3000:]

    cluster.create(ns, "after", spec(rate=17))
    cluster.objects.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "before-00",
                                                   {"spec": {"workload": {"requestsPerSecond": "70"}}})
    plans = wait_for(lambda: all_answered(cluster, ns, 31), timeout_s=90, interval_s=0.5)
    assert plans["before-00"]["status"]["observedGeneration"] == 2
    for name, status in before.items():
        if name != "before-00":
            assert plans[name]["status"] == status, name  # neither lost nor regressed nor rewritten
    assert all(condition(obj, "Ready")["status"] == "True" for obj in plans.values())
    assert operator.running() and operator.metric('inferplan_reconcile_errors_total{reason="Unexpected"}') == 0
