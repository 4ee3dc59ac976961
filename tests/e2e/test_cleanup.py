"""The one-time cleanup of kopf's finalizer and annotations (issue 15, point 5) against an API server that enforces
RBAC, with the credentials of the chart's cleanup hook: its ServiceAccount's token user (TESTENV_USERS in
conftest.py) bound by the ServiceAccount, ClusterRole and ClusterRoleBinding that `helm template` renders for an
upgrade (tests/operator/test_cleanup.py checks that deploy/cleanup-kopf-state has the same objects).

Plans carry what a build before the controller left (kopf's finalizer, its annotations under inferplan.io/ and
kopf.zalando.org/) next to a foreign finalizer and foreign annotations. Asserted: kopf's marks go and the foreign
ones stay, a second run patches nothing (audit log), a dry run changes nothing, a patch made from a stale read is
refused whole by the server and the cleanup then reads the plan again, a deleted plan held by the old finalizer
is released, the watched-namespaces role cleans only its namespaces, and the operator's own role still cannot
patch plans: the operator as deployed tries to remove the finalizer and is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.operator import cleanup, kube
from inferplan.operator.cleanup import CLEANED, KOPF_FINALIZER
from inferplan.resource import GROUP, PLURAL, VERSION
from tests.support.helm import CHART, NAMESPACE, RELEASE, helm, load_all, one, render

from .conftest import REPO, delete_namespace, wait_for

HOOK_USER = f"system:serviceaccount:{NAMESPACE}:inferplan-cleanup-kopf-state"
OPERATOR_USER = f"system:serviceaccount:{NAMESPACE}:inferplan"
FOREIGN_FINALIZER = "example.com/protect"
FOREIGN = {"example.com/owner": "team-a", "inferplan.io/gpu-type": "NVIDIA-H100-80GB-HBM3"}
KOPF = {  # what the builds before the controller wrote (inferplan.io/) and kopf's own prefix
    "inferplan.io/last-handled-configuration": '{"spec":{"alternatives":5}}\n',
    "inferplan.io/kopf-managed": "yes",
    "inferplan.io/plan_changed.spec": '{"started":"2026-11-30T12:00:00.000000","retries":1}',
    "kopf.zalando.org/last-handled-configuration": '{"spec":{}}',
}
SPEC = yaml.safe_load((REPO / "deploy" / "examples" / "chat-assistant-8b.yaml").read_text())["spec"]


def kubeconfig_of(run_dir: Path, user: str) -> Path:
    return run_dir / ("user-" + "".join(c if c.isalnum() or c in "._-" else "_" for c in user) + ".kubeconfig")


def rendered_hook(*args: str) -> list[dict[str, Any]]:
    """The chart's cleanup hook objects as `helm template` renders them for an upgrade (the plans' API served)."""
    done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--api-versions", f"{GROUP}/{VERSION}",
                *args)
    return [o for o in load_all(done.stdout) if o["metadata"]["name"].endswith("-cleanup-kopf-state")]


def apply(admin: kubernetes.client.ApiClient, body: dict[str, Any]) -> None:
    dynamic = kubernetes.dynamic.DynamicClient(admin)
    api = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace") if api.namespaced else None
    try:
        api.create(body=body, namespace=namespace)
    except kubernetes.dynamic.exceptions.ConflictError:
        current = api.get(name=body["metadata"]["name"], namespace=namespace)
        api.replace(body={**body, "metadata": {**body["metadata"],
                                               "resourceVersion": current.metadata.resourceVersion}},
                    namespace=namespace)


def delete(admin: kubernetes.client.ApiClient, body: dict[str, Any]) -> None:
    dynamic = kubernetes.dynamic.DynamicClient(admin)
    api = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
    namespace = body["metadata"].get("namespace") if api.namespaced else None
    with contextlib.suppress(kubernetes.dynamic.exceptions.NotFoundError):
        api.delete(name=body["metadata"]["name"], namespace=namespace)


class Env:
    """The API server, the admin, the two identities, and the plans' namespaces this module made."""

    def __init__(self, k8s: dict[str, Any]) -> None:
        self.admin: kubernetes.client.ApiClient = k8s["admin"]
        self.run_dir = Path(k8s["run_dir"])
        self.audit = self.run_dir / "audit.log"
        self.hook_kubeconfig = kubeconfig_of(self.run_dir, HOOK_USER)
        self.operator_kubeconfig = kubeconfig_of(self.run_dir, OPERATOR_USER)
        self.objects = kubernetes.client.CustomObjectsApi(self.admin)
        self.namespaces: list[str] = []
        self.hook: list[dict[str, Any]] = []  # the chart's cleanup hook objects, applied
        self.operator: list[dict[str, Any]] = []  # the operator's ServiceAccount and RBAC (default values), applied

    def can_list(self, kubeconfig: Path, namespace: str) -> bool:
        with as_user(kubeconfig):
            try:
                list(cleanup.iter_plans(namespace))
            except cleanup.ListError:
                return False
        return True

    def namespace(self, name: str) -> str:
        namespace = f"cleanup-{name}-{uuid.uuid4().hex[:5]}"
        kubernetes.client.CoreV1Api(self.admin).create_namespace({"metadata": {"name": namespace}})
        self.namespaces.append(namespace)
        return namespace

    def create(self, namespace: str, name: str, finalizers: list[str], annotations: dict[str, str]) -> dict:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan",
                "metadata": {"name": name, "finalizers": finalizers, "annotations": annotations}, "spec": SPEC}
        return self.objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    def get(self, namespace: str, name: str) -> dict | None:
        try:
            return self.objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def versions(self, namespace: str) -> dict[str, str]:
        items = self.objects.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}

    def audit_offset(self) -> int:
        return self.audit.stat().st_size

    def requests(self, offset: int, user: str) -> list[dict[str, Any]]:
        time.sleep(0.3)  # an audit event is written when its request ends
        with open(self.audit, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        events = []
        for line in lines:
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return [e for e in events if e["user"]["username"] == user
                and (e.get("objectRef") or {}).get("resource") == PLURAL]

    def cli(self, kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(kubeconfig)
        command = [str(Path(sys.executable).with_name("inferplan")), "cleanup-kopf-state", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def as_user(kubeconfig: Path) -> Iterator[None]:
    """The kubernetes client's default configuration (what `kube.request` uses) loaded from `kubeconfig`, as
    `kube.load_configuration` loads it in the hook's pod; the previous default restored afterwards."""
    previous = kubernetes.client.Configuration.get_default()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig))
    try:
        yield
    finally:
        kubernetes.client.Configuration.set_default(previous)


@pytest.fixture(scope="module")
def env(k8s: dict[str, Any]) -> Iterator[Env]:
    if k8s["run_dir"] is None:
        pytest.skip("needs the k8s-testenv: its token users for the ServiceAccounts and its audit log")
    e = Env(k8s)
    assert e.hook_kubeconfig.is_file(), f"{e.hook_kubeconfig} missing: conftest.TESTENV_ENV must list {HOOK_USER}"
    core = kubernetes.client.CoreV1Api(e.admin)
    created_namespace = True
    try:
        core.create_namespace({"metadata": {"name": NAMESPACE}})
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
        created_namespace = False
    hook = rendered_hook()
    operator = [o for o in render() if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    for obj in hook + operator:
        apply(e.admin, obj)
    e.hook, e.operator = hook, operator
    wait_for(lambda: e.can_list(e.hook_kubeconfig, NAMESPACE), timeout_s=10)  # RBAC takes effect in milliseconds
    try:
        yield e
    finally:
        # All of it, the ServiceAccounts too: the chart's, left in its namespace, would stop a later `helm install`
        # of the chart there ("cannot be imported into the current release", test_chart_notes.py).
        for obj in reversed(hook + operator):
            delete(e.admin, obj)
        for namespace in e.namespaces:  # release the plans the foreign finalizer holds, then drop them
            delete_namespace(e.admin, namespace)
        if created_namespace:
            delete_namespace(e.admin, NAMESPACE)


def old_plans(e: Env, namespace: str) -> None:
    """Three plans: all of kopf's marks and foreign ones; kopf's annotations only; foreign marks only."""
    e.create(namespace, "old", [FOREIGN_FINALIZER, KOPF_FINALIZER], {**KOPF, **FOREIGN})
    e.create(namespace, "annotated", [], {"inferplan.io/last-handled-configuration": "{}", **FOREIGN})
    e.create(namespace, "clean", [FOREIGN_FINALIZER], FOREIGN)


def assert_cleaned(e: Env, namespace: str) -> None:
    old = e.get(namespace, "old")["metadata"]
    assert old["finalizers"] == [FOREIGN_FINALIZER] and old["annotations"] == FOREIGN
    annotated = e.get(namespace, "annotated")["metadata"]
    assert "finalizers" not in annotated and annotated["annotations"] == FOREIGN
    clean = e.get(namespace, "clean")["metadata"]
    assert clean["finalizers"] == [FOREIGN_FINALIZER] and clean["annotations"] == FOREIGN


# ----------------------------------------------------------------------------------------------------------


def test_the_hook_role_is_exactly_get_list_patch_on_plans(env: Env) -> None:
    assert one(env.hook, "ClusterRole")["rules"] == [
        {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "patch"]}]
    shipped = [d for d in yaml.safe_load_all((REPO / "deploy" / "cleanup-kopf-state" / "rbac.yaml").read_text())]
    assert one(shipped, "ClusterRole")["rules"] == one(env.hook, "ClusterRole")["rules"]
    assert one(env.hook, "ClusterRoleBinding")["subjects"][0]["name"] == HOOK_USER.rsplit(":", 1)[1]


def test_the_cleanup_as_the_hooks_role_removes_kopfs_marks_only_and_once(env: Env) -> None:
    namespaces = [env.namespace("a"), env.namespace("b")]
    for namespace in namespaces:
        old_plans(env, namespace)
    before = {ns: env.versions(ns) for ns in namespaces}

    with as_user(env.hook_kubeconfig):
        offset = env.audit_offset()
        dry = cleanup.clean_plans(namespaces, dry_run=True)
        assert dry.text() == ("plans seen 6, would clean 4, already clean 2, failed 0 "
                              "(dry run: nothing was changed)"), [o.line() for o in dry.outcomes]
        assert {ns: env.versions(ns) for ns in namespaces} == before  # nothing stored
        dry_patches = [r for r in env.requests(offset, HOOK_USER) if r["verb"] == "patch"]
        assert len(dry_patches) == 4 and all(r["responseStatus"]["code"] == 200 for r in dry_patches)

        summary = cleanup.clean_plans(namespaces)
        assert summary.text() == "plans seen 6, cleaned 4, already clean 2, failed 0", summary.outcomes
        old = next(o for o in summary.outcomes if o.name == "old")
        assert old.removed == (f"finalizer {KOPF_FINALIZER}", *(f"annotation {k}" for k in sorted(KOPF)))

        offset = env.audit_offset()
        again = cleanup.clean_plans(namespaces)
        assert again.text() == "plans seen 6, cleaned 0, already clean 6, failed 0"
    requests = env.requests(offset, HOOK_USER)
    assert [r["verb"] for r in requests] == ["list", "list"]  # read, nothing patched
    for namespace in namespaces:
        assert_cleaned(env, namespace)
        assert env.versions(namespace)["clean"] == before[namespace]["clean"]  # never written


def test_the_command_line_as_the_hooks_role(env: Env) -> None:
    namespace = env.namespace("cli")
    old_plans(env, namespace)
    before = env.versions(namespace)

    dry = env.cli(env.hook_kubeconfig, "--dry-run")  # all namespaces, as the hook runs it
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"would clean {namespace}/old: would remove finalizer {KOPF_FINALIZER}" in dry.stdout
    assert f"would clean {namespace}/annotated" in dry.stdout and f"{namespace}/clean" not in dry.stdout
    assert dry.stdout.splitlines()[0] == "inferplan cleanup-kopf-state: all namespaces (kubeconfig configuration): " \
                                         "dry run, nothing is changed"
    assert env.versions(namespace) == before

    done = env.cli(env.hook_kubeconfig)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cleaned {namespace}/old: removed finalizer {KOPF_FINALIZER}, annotation " in done.stdout
    assert f"cleaned {namespace}/annotated: removed annotation inferplan.io/last-handled-configuration" in done.stdout
    last = done.stdout.splitlines()[-1]
    assert last.startswith("plans seen ") and ", failed 0" in last and (done.stdout + done.stderr).isascii()
    assert_cleaned(env, namespace)

    again = env.cli(env.hook_kubeconfig, "--namespace", namespace, "--verbose")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == "plans seen 3, cleaned 0, already clean 3, failed 0"
    assert f"already clean {namespace}/old" in again.stdout


def test_in_a_pod_the_command_uses_its_service_account_before_any_kubeconfig(env: Env, tmp_path: Path) -> None:
    """As in the hook's pod: KUBERNETES_SERVICE_HOST/PORT and the mounted token and CA (their paths moved into
    tmp_path: the client's constants are patched in the child process). The admin kubeconfig in KUBECONFIG is
    not used: the in-cluster configuration comes first, as for the operator (kopf's login_via_client)."""
    namespace = env.namespace("pod")
    env.create(namespace, "old", [KOPF_FINALIZER], dict(KOPF))
    hook_config = yaml.safe_load(env.hook_kubeconfig.read_text())
    cluster = hook_config["clusters"][0]["cluster"]
    (tmp_path / "token").write_text(hook_config["users"][0]["user"]["token"])
    (tmp_path / "ca.crt").write_text(Path(cluster["certificate-authority"]).read_text())
    host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
    code = ("import sys, kubernetes.config.incluster_config as c; "
            "c.SERVICE_TOKEN_FILENAME, c.SERVICE_CERT_FILENAME = sys.argv[1], sys.argv[2]; "
            "from inferplan.cli import main; sys.exit(main(sys.argv[3:]))")
    process_env = dict(os.environ, KUBERNETES_SERVICE_HOST=host, KUBERNETES_SERVICE_PORT=port,
                       KUBECONFIG=str(env.run_dir / "admin.kubeconfig"))
    offset = env.audit_offset()
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "token"), str(tmp_path / "ca.crt"),
                           "cleanup-kopf-state", "--namespace", namespace], env=process_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"inferplan cleanup-kopf-state: namespace {namespace} (in-cluster " \
                                          "configuration)"
    assert done.stdout.splitlines()[-1] == "plans seen 1, cleaned 1, already clean 0, failed 0"
    assert {r["verb"] for r in env.requests(offset, HOOK_USER)} == {"list", "patch"}


def test_a_stale_patch_is_refused_whole_and_the_cleanup_reads_the_plan_again(env: Env) -> None:
    namespace = env.namespace("guard")
    env.create(namespace, "raced", [FOREIGN_FINALIZER, KOPF_FINALIZER], {**KOPF, **FOREIGN})
    stale = env.get(namespace, "raced")
    # Meanwhile someone else puts a finalizer first (kopf's moves from index 1 to 2: an unguarded removal of index
    # 1 would now remove the foreign one) and edits an annotation.
    env.objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "raced", [
        {"op": "add", "path": "/metadata/finalizers/0", "value": "example.com/first"},
        {"op": "replace", "path": "/metadata/annotations/example.com~1owner", "value": "team-b"}],
        _content_type="application/json-patch+json")
    changed = env.get(namespace, "raced")
    with as_user(env.hook_kubeconfig):
        with pytest.raises(kubernetes.client.ApiException) as refused:
            kube.request("PATCH", cleanup.plan_path(namespace, "raced"), cleanup.cleanup_patch(stale), None,
                         "application/json-patch+json")
        assert refused.value.status == 422
        assert env.get(namespace, "raced") == changed  # refused whole: nothing changed
        outcome = cleanup.clean_plan(stale)
    assert (outcome.outcome, outcome.attempts) == (CLEANED, 2), outcome
    meta = env.get(namespace, "raced")["metadata"]
    assert meta["finalizers"] == ["example.com/first", FOREIGN_FINALIZER]  # the other change is kept
    assert meta["annotations"] == {**FOREIGN, "example.com/owner": "team-b"}


def test_a_plan_held_by_the_old_finalizer_is_deleted_once_cleaned(env: Env) -> None:
    namespace = env.namespace("delete")
    env.create(namespace, "held", [KOPF_FINALIZER], dict(KOPF))
    env.create(namespace, "later", [KOPF_FINALIZER], {})
    env.objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "held")
    time.sleep(0.5)
    held = env.get(namespace, "held")
    assert held is not None and held["metadata"].get("deletionTimestamp")  # Terminating, and stays so
    with as_user(env.hook_kubeconfig):
        summary = cleanup.clean_plans([namespace])
    assert summary.text() == "plans seen 2, cleaned 2, already clean 0, failed 0"
    wait_for(lambda: env.get(namespace, "held") is None, timeout_s=10)
    env.objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "later")
    wait_for(lambda: env.get(namespace, "later") is None, timeout_s=10)


def test_with_watched_namespaces_the_hook_cleans_only_those(env: Env) -> None:
    watched, other = env.namespace("watched"), env.namespace("other")
    for namespace in (watched, other):
        env.create(namespace, "old", [KOPF_FINALIZER], dict(KOPF))
    objects = rendered_hook("--set-json", f'watchNamespaces=["{watched}"]')
    binding = one(env.hook, "ClusterRoleBinding")
    delete(env.admin, binding)  # only the Role in the watched namespace grants anything now
    try:
        for obj in objects:
            apply(env.admin, obj)
        wait_for(lambda: not env.can_list(env.hook_kubeconfig, other), timeout_s=10)
        args = one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args == ["--namespace", watched]
        done = wait_for(lambda: (d := env.cli(env.hook_kubeconfig, *args)).returncode == 0 and d, timeout_s=10)
        assert done.stdout.splitlines()[-1] == "plans seen 1, cleaned 1, already clean 0, failed 0"
        assert KOPF_FINALIZER in env.get(other, "old")["metadata"]["finalizers"]
        denied = env.cli(env.hook_kubeconfig, "--namespace", other)
        assert denied.returncode == 1
        assert f"FAILED cannot list plans in namespace {other}: 403" in denied.stdout
        assert denied.stdout.splitlines()[-1] == "plans seen 0, cleaned 0, already clean 0, failed 0, could not list 1"
    finally:
        for obj in objects:
            if obj["kind"] in ("Role", "RoleBinding"):
                delete(env.admin, obj)
        apply(env.admin, binding)


def test_the_operators_role_cannot_patch_plans(env: Env) -> None:
    namespace = env.namespace("operator")
    env.create(namespace, "old", [KOPF_FINALIZER], dict(KOPF))
    role = one(env.operator, "ClusterRole")
    assert not [r for r in role["rules"] if PLURAL in r["resources"] and "patch" in r["verbs"]]
    with as_user(env.operator_kubeconfig):
        with pytest.raises(kubernetes.client.ApiException) as denied:
            kube.request("PATCH", cleanup.plan_path(namespace, "old"),
                         [{"op": "remove", "path": "/metadata/finalizers/0"}], None, "application/json-patch+json")
        assert denied.value.status == 403
        kube.write_status(namespace, "old", {"plannerVersion": "test"})  # what the role is for: the status
    failed = env.cli(env.operator_kubeconfig, "--namespace", namespace)
    assert failed.returncode == 1
    assert f"FAILED {namespace}/old: 403" in failed.stdout and "cannot patch resource" in failed.stdout
    assert failed.stdout.splitlines()[-1] == "plans seen 1, cleaned 0, already clean 0, failed 1"
    assert env.get(namespace, "old")["metadata"]["finalizers"] == [KOPF_FINALIZER]


def test_the_operators_role_reads_a_plan_by_listing_it(env: Env) -> None:
    """A replica that begins to work reads a plan it last saw before then (`Controller._refresh`) with the
    `list` its role has: the plan as the server has it, status included; 404 when there is none. Its role grants
    no `get`."""
    namespace = env.namespace("reader")
    env.create(namespace, "read-me", [], {})
    env.create(namespace, "read-me-not", [], {})
    with as_user(env.operator_kubeconfig):
        kube.write_status(namespace, "read-me", {"plannerVersion": "test"})
        body = kube.read_plan(namespace, "read-me")
        assert body["metadata"]["name"] == "read-me" and body["status"] == {"plannerVersion": "test"}
        with pytest.raises(kubernetes.client.ApiException) as missing:
            kube.read_plan(namespace, "no-such-plan")
        assert missing.value.status == 404
        with pytest.raises(kubernetes.client.ApiException) as denied:
            kube.request("GET", cleanup.plan_path(namespace, "read-me"))
        assert denied.value.status == 403


def test_the_operator_as_deployed_tries_to_remove_the_old_finalizer_and_is_refused(env: Env) -> None:
    """Why the cleanup exists: kopf, with no handler that needs its finalizer, removes it from every plan it
    sees; the operator's role has no patch on plans, so it is refused (and retries for about a minute) and the
    finalizer stays. Namespaced, so that this operator sees this test's plan only."""
    namespace = env.namespace("deployed")
    env.create(namespace, "old", [KOPF_FINALIZER], dict(KOPF))
    namespaced = [o for o in render(sets=(f"watchNamespaces={{{namespace}}}",))
                  if o["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
    for obj in namespaced:
        apply(env.admin, obj)
    offset = env.audit_offset()
    process_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process_env.update(KUBECONFIG=str(env.operator_kubeconfig), INFERPLAN_NAMESPACES=namespace,
                       INFERPLAN_METRICS_PORT="0", INFERPLAN_HEALTH_PORT="0", INFERPLAN_PLANNER_PROCESSES="0",
                       INFERPLAN_PLANNER_THREADS="1")
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen([str(Path(sys.executable).with_name("inferplan")), "operator"], env=process_env,
                               stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        def refused() -> list[dict[str, Any]]:
            return [r for r in env.requests(offset, OPERATOR_USER) if r["verb"] == "patch"
                    and not r["objectRef"].get("subresource") and r["responseStatus"]["code"] == 403]

        found = wait_for(refused, timeout_s=45, interval_s=0.5)
        assert found[0]["objectRef"]["name"] == "old" and found[0]["objectRef"]["namespace"] == namespace
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.seek(0)
        output = log.read()
        log.close()
        for obj in namespaced:
            delete(env.admin, obj)
    assert env.get(namespace, "old")["metadata"]["finalizers"] == [KOPF_FINALIZER], output[-3000:]
    with as_user(env.hook_kubeconfig):
        assert cleanup.clean_plans([namespace]).text() == "plans seen 1, cleaned 1, already clean 0, failed 0"
