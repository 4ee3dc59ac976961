"""An upgrade of a running operator, as docs/install.md ("What an upgrade keeps") describes it, against the test
API server: the operator of an earlier release answers a set of plans (the example plans, a disaggregated one, an
observed one), stops; this build's CRD is applied and this build's operator takes over.

The earlier release is commit `OLD` of this repository, checked out with `git worktree` and run with PYTHONPATH
pointing at it; without that commit (a shallow clone) the module is skipped, saying so.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan import __version__
from inferplan.operator.crd import CRD_FILE
from inferplan.resource import GROUP, PLURAL, VERSION
from inferplan.version import planner_version
from tests.support.plans import LONG_PROMPTS_PD

from .conftest import REPO, apply_crd, delete_namespace, wait_for
from .test_gitops import ConstantPrometheus, cells, operator_process, walkthrough

OLD = "da1f54e"
"""The release candidate before the status gained gpuColumn, replicasColumn, batchColumn and
prediction.residualsAt (and the Replicas and Batch printer columns turned from integer to string)."""

OLD_CLI = [sys.executable, "-P", "-c", "import sys; from inferplan.cli import main; sys.exit(main())"]
"""`inferplan` of the checkout PYTHONPATH names: -P, so that the working directory (this build) is not searched
first."""

RESYNC_S = 15
"""INFERPLAN_RESYNC_SECONDS of both operators: an answered plan is planned again within it of the start."""

NAMESPACE = "upgrade"
OBSERVED = "chat"  # the plan with spec.observe
BIN = Path(sys.executable).parent
NODES = {"up-h100-a": ("NVIDIA-H100-80GB-HBM3", 8), "up-h100-b": ("NVIDIA-H100-80GB-HBM3", 8),
         "up-l40s-a": ("NVIDIA-L40S", 4), "up-a100-a": ("NVIDIA-A100-SXM4-80GB", 8)}


def node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def old_build(tmp: Path) -> Path:
    """A checkout of OLD (removed by the caller with `git worktree remove`), or a skip saying why there is none."""
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{OLD}^{{commit}}"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"commit {OLD} (the earlier release this upgrade starts from) is not in this clone's history "
                    f"(a shallow clone?): git fetch --unshallow")
    path = tmp / "old"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), OLD], check=True,
                   capture_output=True)
    return path


def plans() -> dict[str, dict[str, Any]]:
    bodies: dict[str, dict[str, Any]] = {}
    for path in sorted((REPO / "examples" / "plans").glob("*.yaml")):
        bodies[path.stem] = yaml.safe_load(path.read_text())["spec"]
    bodies["pd"] = {**copy.deepcopy(LONG_PROMPTS_PD), "engine": {"name": "vllm"}, "verify": False,
                    "constraints": {**LONG_PROMPTS_PD["constraints"], "shapes": ["aggregated", "disaggregated"]}}
    plan_file, _ = walkthrough()
    chat = yaml.safe_load(plan_file)["spec"]
    chat["observe"]["selector"] = {"namespace": NAMESPACE, "plan": "chat"}
    bodies[OBSERVED] = chat
    return bodies


@dataclass
class Upgrade:
    old: Path
    objects: kubernetes.client.CustomObjectsApi
    env: dict[str, str]
    workdir: Path
    before: dict[str, dict[str, Any]]
    kept: dict[str, dict[str, Any]]
    table_before: str
    after: dict[str, dict[str, Any]]
    table_after: str
    writes: dict[str, list[dict[str, Any]]]
    """Each plan's statuses as a watch saw them written while this build's operator ran."""


def watch_statuses(objects: kubernetes.client.CustomObjectsApi, writes: dict[str, list[dict[str, Any]]],
                   stop: threading.Event) -> None:
    """Append each plan's status to `writes[name]` as each change comes, until `stop` is set."""
    version = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["metadata"]["resourceVersion"]
    while not stop.is_set():
        for event in kubernetes.watch.Watch().stream(objects.list_namespaced_custom_object, GROUP, VERSION, NAMESPACE,
                                                     PLURAL, resource_version=version, timeout_seconds=2):
            obj = event["object"]
            version = obj["metadata"]["resourceVersion"]
            writes[obj["metadata"]["name"]].append(obj.get("status") or {})


def read_all(objects: kubernetes.client.CustomObjectsApi) -> dict[str, dict[str, Any]]:
    items = objects.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL)["items"]
    return {item["metadata"]["name"]: item for item in items}


def answered(objects: kubernetes.client.CustomObjectsApi, names: list[str]) -> dict[str, dict[str, Any]] | None:
    found = read_all(objects)
    for name in names:
        status = found.get(name, {}).get("status") or {}
        ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready", {})
        if status.get("observedGeneration") != 1 or ready.get("status") not in ("True", "False"):
            return None
    return found


@pytest.fixture(scope="module")
def upgrade(k8s: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upgrade]:
    workdir = tmp_path_factory.mktemp("upgrade")
    old = old_build(workdir)
    admin = k8s["admin"]
    core, apps = kubernetes.client.CoreV1Api(admin), kubernetes.client.AppsV1Api(admin)
    objects = kubernetes.client.CustomObjectsApi(admin)
    prometheus = ConstantPrometheus()
    endpoints = workdir / "prometheus-endpoints.yaml"
    endpoints.write_text(yaml.safe_dump([{"name": "main", "url": prometheus.url, "timeoutSeconds": 2}]))
    env = {**os.environ, "KUBECONFIG": str(k8s["kubeconfig"]), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    operator_env = {**env, "INFERPLAN_NAMESPACES": NAMESPACE, "INFERPLAN_METRICS_PORT": "0",
                    "INFERPLAN_HEALTH_PORT": "0", "INFERPLAN_CHECK_SECONDS": "0.5", "INFERPLAN_OBSERVE_SECONDS": "1",
                    "INFERPLAN_PLANNER_PROCESSES": "1", "INFERPLAN_PROMETHEUS_CONFIG": str(endpoints),
                    "INFERPLAN_RESYNC_SECONDS": str(RESYNC_S)}
    old_env = {**operator_env, "PYTHONPATH": str(old)}
    names = list(plans())
    try:
        apply_crd(admin, old / CRD_FILE)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        for name, (product, gpus) in NODES.items():
            body = node(name, product, gpus)
            core.create_node(body)
            core.patch_node_status(name, {"status": body["status"]})
        for name, spec in plans().items():
            objects.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": name},
                "spec": spec})
        old_command = [*OLD_CLI, "operator"]
        with operator_process(old_env, workdir / "old-operator.log", old_command):
            wait_for(lambda: answered(objects, names), timeout_s=300, interval_s=1)
            # The Deployment the earlier release rendered for the observed plan, running.
            rendered = subprocess.run([*OLD_CLI, "render", "-"], input=json.dumps(read_all(objects)[OBSERVED]),
                                      env=old_env, capture_output=True, text=True)
            assert rendered.returncode == 0, rendered.stderr
            (workdir / "old-rendered.yaml").write_text(rendered.stdout)
            running = next(o for o in yaml.safe_load_all(rendered.stdout) if o["kind"] == "Deployment")
            apps.create_namespaced_deployment(NAMESPACE, running)

            def observed() -> bool:
                status = read_all(objects)[OBSERVED].get("status") or {}
                return bool((status.get("recommendation") or {}).get("change", {}).get("inSync"))

            wait_for(observed, timeout_s=120, interval_s=1)
        before = read_all(objects)
        apply_crd(admin, REPO / CRD_FILE)
        kept = read_all(objects)
        table_before = subprocess.run(["kubectl", "get", "icp", "-n", NAMESPACE], env=env, capture_output=True,
                                      text=True).stdout
        writes: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        stop = threading.Event()
        watcher = threading.Thread(target=watch_statuses, args=(objects, writes, stop), daemon=True)
        watcher.start()
        log = workdir / "new-operator.log"
        with operator_process(operator_env, log):
            # Planned again at once (the earlier status names another planner version): this build's columns.
            wait_for(lambda: all(any("gpuColumn" in s for s in writes[n]) for n in names), timeout_s=240,
                     interval_s=1)
            # Then a while longer (the observed plan observed a few more times, each plan resynced once more).
            seen = prometheus.observations('plan="chat"')
            wait_for(lambda: prometheus.observations('plan="chat"') >= seen + 5, timeout_s=60, interval_s=0.5)
            settled = time.monotonic()
            wait_for(lambda: time.monotonic() - settled > RESYNC_S, timeout_s=RESYNC_S + 10, interval_s=1)
        stop.set()
        watcher.join(10)
        after = read_all(objects)
        table_after = subprocess.run(["kubectl", "get", "icp", "-n", NAMESPACE], env=env, capture_output=True,
                                     text=True).stdout
        yield Upgrade(old, objects, env, workdir, before, kept, table_before, after, table_after, writes)
    finally:
        prometheus.stop()
        apply_crd(admin, REPO / CRD_FILE)
        for name in NODES:
            try:
                core.delete_node(name)
            except kubernetes.client.ApiException:
                pass
        delete_namespace(admin, NAMESPACE)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], capture_output=True)


def test_the_new_crd_keeps_every_status_the_earlier_release_wrote(upgrade: Upgrade) -> None:
    """Applying this build's CRD prunes nothing of a status the earlier operator wrote (the schema only gained
    fields): each reads back as it was."""
    for name, body in upgrade.before.items():
        assert upgrade.kept[name]["status"] == body["status"], name


def test_every_plan_is_answered_again_and_keeps_its_status(upgrade: Upgrade) -> None:
    """Within a resync of the new operator's start every plan is planned again (docs/install.md, "What an upgrade
    keeps"): Ready, with this build's columns, and no field of the earlier status missing."""
    for name, body in upgrade.after.items():
        status = upgrade.before[name]["status"]
        new = body["status"]
        assert set(status) <= set(new), (name, set(status) - set(new))
        conditions = {c["type"]: c for c in new["conditions"]}
        assert conditions["Ready"]["status"] == "True" and conditions["Ready"]["observedGeneration"] == 1, name
        rec = new["recommendation"]
        roles = rec.get("roles") or [rec]
        assert new["gpuColumn"] == " / ".join(r["gpuType"] for r in roles), name
        assert new["replicasColumn"] == " / ".join(str(r["replicas"]) for r in roles), name
    assert upgrade.after["pd"]["status"]["recommendation"]["shape"] == "disaggregated"
    observed = {c["type"]: c["status"] for c in upgrade.after[OBSERVED]["status"]["conditions"]}
    assert observed["MetricsAvailable"] == "True"


def test_every_plan_is_planned_again_at_once_by_this_planner_version(upgrade: Upgrade) -> None:
    """docs/install.md, "What an upgrade keeps": the earlier release wrote its release alone (0.1.0, the same for
    every build whatever model answered); this build's planner version carries the digest of its model, so the new
    operator finds each status written by another planner version and plans it at its first check, not at the resync
    (which left an upgrade's answers from the old model for up to INFERPLAN_RESYNC_SECONDS): its start log names the
    version, every plan is logged as to plan for that reason, and every status it wrote carries its version."""
    version = planner_version()
    assert version != __version__
    log = (upgrade.workdir / "new-operator.log").read_text()
    assert f"inferplan operator {version}: " in log
    for name, body in upgrade.before.items():
        assert body["status"]["plannerVersion"] == __version__, name
        assert f"{NAMESPACE}/{name}: to plan: planned by version {__version__}" in log, name
        assert upgrade.writes[name] and all(s["plannerVersion"] == version for s in upgrade.writes[name]), name
        assert upgrade.after[name]["status"]["plannerVersion"] == version, name


def test_each_plan_is_written_a_bounded_number_of_times(upgrade: Upgrade) -> None:
    """No flapping: a plan that is not observed is written once (its answer planned again), the observed one at most
    three times (an observation that finds the running Deployment lacks the GPU toleration this build renders, the
    answer, the observation against the new answer), and none again while each is resynced and observed more."""
    for name, statuses in upgrade.writes.items():
        assert len(statuses) <= (3 if name == OBSERVED else 1), (name, len(statuses))


def test_kubectl_get_icp_before_and_after_the_replan(upgrade: Upgrade) -> None:
    """Before the new operator plans again the Table shows the earlier answer, GPU, REPLICAS and BATCH empty (the
    status has no gpuColumn, replicasColumn, batchColumn); after, every column, a disaggregated one's per pool."""
    def rows(table: str) -> dict[str, dict[str, str]]:
        header, *lines = table.strip().splitlines()
        return {line.split()[0]: cells(f"{header}\n{line}") for line in lines}

    before, after = rows(upgrade.table_before), rows(upgrade.table_after)
    assert set(before) == set(after) == set(upgrade.after)
    for name, row in before.items():
        rec = upgrade.before[name]["status"]["recommendation"]
        assert row["GPU"] == row["REPLICAS"] == row["BATCH"] == "" and row["GPUS"] == str(rec["gpus"]), (name, row)
        assert row["FEASIBLE"] == row["READY"] == "True", (name, row)
    for name, row in after.items():
        status = upgrade.after[name]["status"]
        assert (row["GPU"], row["GPUS"], row["REPLICAS"], row["BATCH"]) == (
            status["gpuColumn"], str(status["recommendation"]["gpus"]), status["replicasColumn"],
            status["batchColumn"]), (name, row)
    pd = after["pd"]
    assert pd["REPLICAS"].count(" / ") == 1 and pd["BATCH"].count(" / ") == 1, pd


def run_cli(upgrade: Upgrade, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "inferplan"), *args], input=stdin, env=upgrade.env, cwd=upgrade.workdir,
                          capture_output=True, text=True, timeout=120)


def test_render_of_an_earlier_status_warns_that_this_build_renders_otherwise(upgrade: Upgrade) -> None:
    """docs/deploy.md, "Plan or status": the earlier status lists objects this build renders otherwise (the GPU
    toleration): render prints this build's and says so."""
    rendered = run_cli(upgrade, "render", "-", stdin=json.dumps(upgrade.before[OBSERVED]))
    assert rendered.returncode == 0, rendered.stderr
    assert "warning: not the objects the status lists" in rendered.stderr
    assert "written by an operator of another inferplan release" in rendered.stderr
    assert "nvidia.com/gpu" in rendered.stdout and "tolerations:" in rendered.stdout


def test_diff_against_a_deployment_the_earlier_release_rendered(upgrade: Upgrade) -> None:
    """The Deployment the earlier release rendered differs from this build's answer by the GPU toleration alone
    (the same replicas, batch and arguments for this plan), and the status's change section says the same."""
    reviewed = upgrade.workdir / "chat-reviewed.json"
    reviewed.write_text(json.dumps(upgrade.after[OBSERVED]))
    diff = run_cli(upgrade, "diff", str(reviewed), "--deployment", str(upgrade.workdir / "old-rendered.yaml"))
    assert diff.returncode == 1, diff.stdout + diff.stderr
    summary = [line.strip() for line in diff.stdout.splitlines() if line.startswith("  ")]
    assert summary == ["tolerations: + nvidia.com/gpu:NoSchedule (Exists)"], diff.stdout
    change = upgrade.after[OBSERVED]["status"]["recommendation"]["change"]
    assert change["summary"] == summary and change["inSync"] is False


def test_docs_install_names_the_release_this_upgrade_starts_from() -> None:
    text = (REPO / "docs" / "install.md").read_text()
    paragraph = text[text.index("What an upgrade keeps"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    assert f"`tests/e2e/test_upgrade.py` runs such an upgrade from commit\n{OLD}" in paragraph
