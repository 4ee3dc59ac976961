"""inferplan.deploy.manifests: the objects rendered for the examples' recommendations run exactly the plan
(replicas, GPUs, node selector, engine arguments, checkpoint), reach the engine (listen address, port, health
probes), and are valid Kubernetes objects (`kubernetes-validate --strict` for built-in kinds; the fields
the custom kinds use checked against their published API types, their pod templates validated as Pods), the
same bytes from any process."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferplan.deploy import manifests
from inferplan.deploy.bounds import replica_bounds
from inferplan.deploy.manifests import (
    FILES_DIR,
    PORT,
    RENDERABLE_ENGINES,
    dns_label,
    engine_image,
    gpu_tolerations,
    render,
    to_yaml,
    tolerated,
)
from inferplan.planner.catalog.checkpoints import checkpoint_precision
from inferplan.planner.catalog.engine_args import (
    DEFAULT_VERSIONS,
    ROCM_FAMILIES,
    engine_gpu_problem,
    flag_problems,
    router_flag_problems,
)
from inferplan.planner.catalog.gpus import GPU_VENDORS, load_gpu_catalog
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.memory import weight_bytes
from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import Candidate
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import PlanError, load_plan_file, parse_plan
from tests.support.plans import DISAGGREGATED, EXAMPLES, IN_A_NODE, REPO, disaggregated, over_two_nodes, planned
from tests.support.schemas import assert_valid

AMD_IMAGE = "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"  # vLLM names no ROCm image by version: the user gives one
QUANTITY = re.compile(r"^[0-9]+(m|Gi)?$")


def image_for(request: PlanRequest, candidate: Candidate) -> str | None:
    return AMD_IMAGE if load_gpu_catalog().get(candidate.gpu_type).vendor == "amd" else None


def rendered(path: Path, target: str = "deployment") -> list[dict[str, Any]]:
    request, candidate = planned(path)
    return render(request, candidate, name="llm", namespace="serving", target=target,
                  image=image_for(request, candidate))


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = [o["kind"] for o in objects]
    assert len(kinds) == len(set(kinds)), kinds
    return {o["kind"]: o for o in objects}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def as_pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llm-0"}, "spec": spec}


# ----------------------------------------------------------------------------------------------------------
# What runs is the plan


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.stem in DISAGGREGATED], ids=lambda p: p.stem)
def test_a_disaggregated_example_renders_its_pools_behind_a_router(path: Path) -> None:
    request, candidate = planned(path)
    assert candidate.roles and request.engine == "sglang"
    objects = rendered(path)
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    pools = {r.role: r for r in candidate.roles}
    for role, pool in pools.items():
        (name,) = [n for n in deployments if n.endswith(f"-{role}")]
        assert deployments[name]["spec"]["replicas"] == pool.replicas
    assert any(n.endswith("-router") for n in deployments)


@pytest.mark.parametrize("path", IN_A_NODE, ids=lambda p: p.stem)
def test_the_deployment_runs_the_recommendation(path: Path) -> None:
    request, candidate = planned(path)
    objects = by_kind(rendered(path))
    deployment = objects["Deployment"]
    pod = pod_spec(deployment)
    (container,) = pod["containers"]
    assert deployment["spec"]["replicas"] == candidate.replicas
    assert pod["nodeSelector"] == candidate.node_selector
    vendor = load_gpu_catalog().get(candidate.gpu_type).vendor
    assert container["resources"]["limits"][GPU_VENDORS[vendor].resource] == str(candidate.gpus_per_replica)
    files = {name: f"{FILES_DIR}/{name}" for name in candidate.engine_files}
    planned_args = [files.get(arg, arg) for arg in candidate.engine_args]
    assert container["args"][:len(planned_args)] == planned_args  # the plan's arguments, in its order
    assert candidate.checkpoint in container["args"]
    if request.engine == "tgi":  # the image's entry point is the launcher
        assert "command" not in container
    else:
        assert container["command"] == shlex.split(candidate.engine_command)
    assert container["name"] == "engine"


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a rendered workload (Deployment, LeaderWorkerSet leader and worker, KServe predictor)."""
    spec = obj.get("spec", {})
    if "template" in spec:
        return [spec["template"]["spec"]]
    if "leaderWorkerTemplate" in spec:
        return [spec["leaderWorkerTemplate"][role]["spec"] for role in ("leaderTemplate", "workerTemplate")]
    return [spec["predictor"]] if "predictor" in spec else []


@pytest.mark.parametrize("case", [*(p.stem for p in IN_A_NODE), "kserve", "over-nodes", "disaggregated"])
def test_every_gpu_pod_tolerates_the_taint_of_gpu_nodes_and_no_other(case: str) -> None:
    """GPU nodes are commonly tainted with the GPU resource's name (GKE: nvidia.com/gpu=present:NoSchedule on every
    GPU node pool), and the operator counts such nodes: each pod that asks for a GPU tolerates that taint of its
    vendor, whatever its value, and nothing else (a node tainted for another workload stays off limits); the
    router, which asks for no GPU, tolerates nothing."""
    if case == "over-nodes":
        request, candidate = over_two_nodes(next(p for p in EXAMPLES if p.stem == "phi-4-tensor-parallel"))
    elif case == "disaggregated":
        request, candidate = disaggregated("sglang")
    else:
        request, candidate = planned(EXAMPLES[0] if case == "kserve" else next(p for p in IN_A_NODE if p.stem == case))
    objects = render(request, candidate, name="llm", target="kserve" if case == "kserve" else "deployment",
                     image=image_for(request, candidate))
    pods = [pod for obj in objects for pod in _pod_specs(obj)]
    gpu_pods = [pod for pod in pods if any("/" in r for c in pod["containers"] for r in c["resources"]["limits"])]
    assert gpu_pods and len(pods) - len(gpu_pods) == (1 if case == "disaggregated" else 0)
    resource = GPU_VENDORS[load_gpu_catalog().get(candidate.gpu_type).vendor].resource
    for pod in pods:
        if pod not in gpu_pods:
            assert "tolerations" not in pod
            continue
        assert pod["tolerations"] == gpu_tolerations(resource)
        assert tolerated({"key": resource, "value": "present", "effect": "NoSchedule"}, pod["tolerations"])
        for other in ({"key": resource, "effect": "NoExecute"}, {"key": "dedicated", "value": resource,
                                                                  "effect": "NoSchedule"}):
            assert not tolerated(other, pod["tolerations"])


def test_tolerations_match_taints_by_the_rules_of_kubernetes() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerated(taint, [{"operator": "Exists"}])  # an empty key with Exists tolerates everything
    assert not tolerated(taint, [{"value": "present"}])  # an empty key needs Exists
    assert tolerated(taint, [{"key": "nvidia.com/gpu", "value": "present"}])  # Equal is the default; any effect
    assert not tolerated(taint, [{"key": "nvidia.com/gpu", "value": "absent", "effect": "NoSchedule"}])
    assert not tolerated(taint, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}])
    assert tolerated({"key": "nvidia.com/gpu", "effect": "NoSchedule"}, [{"key": "nvidia.com/gpu",
                                                                          "effect": "NoSchedule"}])
    assert not tolerated(taint, [])
    # docs/deploy.md shows the toleration as it is rendered
    (rendered_toleration,) = gpu_tolerations("nvidia.com/gpu")
    shown = "{" + ", ".join(f"{key}: {value}" for key, value in rendered_toleration.items()) + "}"
    assert shown in " ".join((REPO / "docs" / "deploy.md").read_text().split())


@pytest.mark.parametrize("path", IN_A_NODE, ids=lambda p: p.stem)
def test_the_engine_listens_where_the_service_and_probes_look(path: Path) -> None:
    request, _ = planned(path)
    objects = by_kind(rendered(path))
    pod = pod_spec(objects["Deployment"])
    container = pod["containers"][0]
    extra = container["args"][len(planned(path)[1].engine_args):]
    assert flag_problems(request.engine, request.engine_version, extra) == []  # the pinned parser takes them
    assert str(PORT) in extra and "0.0.0.0" in extra
    assert {"name": "http", "containerPort": PORT, "protocol": "TCP"} in container["ports"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    service = objects["Service"]
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["selector"] == objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert {"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"} in service["spec"]["ports"]


def test_the_startup_probe_waits_longer_for_a_bigger_checkpoint() -> None:
    small = pod_spec(by_kind(rendered(EXAMPLES[0]))["Deployment"])["containers"][0]["startupProbe"]
    big_path = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")
    big = pod_spec(by_kind(rendered(big_path))["Deployment"])["containers"][0]["startupProbe"]
    seconds = [p["periodSeconds"] * p["failureThreshold"] for p in (small, big)]
    assert 600 <= seconds[0] < seconds[1]  # 10 minutes at least; a 70B checkpoint gets longer than an 8B one


@pytest.mark.parametrize("path", [*IN_A_NODE, *(p for p in EXAMPLES if p.stem in DISAGGREGATED)],
                         ids=lambda p: p.stem)
def test_a_rollout_is_not_declared_stalled_while_its_pods_may_still_be_loading(path: Path) -> None:
    """A Deployment whose new pod is not available within `progressDeadlineSeconds` (600 s unless set) is marked
    Progressing=False (ProgressDeadlineExceeded): `kubectl rollout status` fails and GitOps tools report the rollout
    failed. Each engine Deployment allows the startup probe's whole budget, and the image pull before it."""
    engines = [o for o in rendered(path) if o["kind"] == "Deployment" and o["metadata"]["name"] != "llm-router"]
    for deployment in engines:
        startup = pod_spec(deployment)["containers"][0]["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        assert deployment["spec"]["progressDeadlineSeconds"] >= budget + 600, deployment["metadata"]["name"]


def test_engine_files_come_from_a_config_map_mounted_where_the_arguments_point() -> None:
    path = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")
    _, candidate = planned(path)
    assert candidate.engine_files, "the TensorRT-LLM example has an extra options file"
    objects = by_kind(rendered(path))
    assert objects["ConfigMap"]["data"] == candidate.engine_files
    pod = pod_spec(objects["Deployment"])
    volume = next(v for v in pod["volumes"] if v["name"] == "engine-files")
    assert volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "engine-files")
    for name in candidate.engine_files:
        assert f"{mount['mountPath']}/{name}" in pod["containers"][0]["args"]
    assert "ConfigMap" not in by_kind(rendered(EXAMPLES[0]))  # no files, no ConfigMap


def test_shared_memory_cache_and_token() -> None:
    pod = pod_spec(by_kind(rendered(EXAMPLES[0]))["Deployment"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    container = pod["containers"][0]
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    token = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["optional"] is True  # pods start without the Secret
    requests = container["resources"]["requests"]
    assert all(QUANTITY.match(v) for v in [*requests.values(), *container["resources"]["limits"].values()])
    assert int(requests["cpu"]) >= 2


def test_the_cache_holds_every_copy_of_the_weights_the_engine_downloads() -> None:
    # TGI (like vLLM and SGLang) downloads every *.safetensors: from a Mistral repository both the shards and
    # consolidated.safetensors, two copies of the weights (about 29 GB for Mistral-7B, issue 36).
    path = next(p for p in EXAMPLES if p.stem == "tgi-mistral-7b")
    request, candidate = planned(path)
    assert candidate.checkpoint == "mistralai/Mistral-7B-Instruct-v0.2"
    weights_gib = request.arch.params_total_published * 2 / 2**30  # the repository's 16-bit weights

    def cache_gib(objects: list[dict[str, Any]]) -> int:
        pod = pod_spec(by_kind(objects)["Deployment"])
        size = next(v for v in pod["volumes"] if v["name"] == "hf-cache")["emptyDir"]["sizeLimit"]
        assert pod["containers"][0]["resources"]["requests"]["ephemeral-storage"] == size  # the kubelet evicts above
        return int(size.removesuffix("Gi"))

    assert cache_gib(rendered(path)) >= 2 * weights_gib * 1.1
    chat_request, _ = planned(EXAMPLES[0])  # a repository with one copy of its weights keeps a cache of one
    assert cache_gib(rendered(EXAMPLES[0])) < 2 * chat_request.arch.params_total_published * 2 / 2**30


@pytest.mark.parametrize("stem", ["deepseek-r1-shapes", "gpt-oss-120b-h100"])
def test_a_model_published_in_fp8_or_mxfp4_is_cached_at_that_size(stem: str) -> None:
    # DeepSeek-R1's own repository holds block-scaled FP8 weights (about 642 GiB), gpt-oss-120b's MXFP4 experts
    # (about 61 GiB): the engine downloads those, not a 16-bit copy, which only an engine quantising at load reads.
    # The pod's cache and start-up budget were sized from 16-bit weights (1377 GiB for DeepSeek-R1).
    request, candidate = planned(next(p for p in EXAMPLES if p.stem == stem))
    assert candidate.checkpoint == request.served_model and candidate.provenance["checkpoint"] == "catalog"
    planned_gib = weight_bytes(request.arch, weight_precision(candidate.precision)) / 2**30
    sixteen_bit_gib = weight_bytes(request.arch, weight_precision("bf16")) / 2**30
    sizing = manifests.pod_sizing(request, candidate, candidate.gpus_per_replica)
    assert planned_gib * 1.1 <= sizing.cache_gib <= planned_gib * 1.1 + 4 < sixteen_bit_gib


def test_a_checkpoint_that_keeps_layers_16_bit_is_cached_at_its_own_size() -> None:
    # Meta's FP8 Llama 3.1 405B keeps its attention and its first and last layers 16-bit (docs/engines.md): 454 GiB
    # of weights to download, where an all-linear FP8 repository of the model holds 382. The cache had been sized
    # for the latter, too small for the repository the deployment names.
    example = EXAMPLES[0].parents[1] / "platform" / "llama-405b-bf16-h100.yaml"
    data = yaml.safe_load(example.read_text(encoding="utf-8"))["spec"]
    data["model"] = {"name": "meta-llama/Llama-3.1-405B-Instruct-FP8"}
    data["constraints"]["tensorParallelSizes"] = [8]
    request = resolve_plan(parse_plan(data))
    candidate = plan(request).recommendation
    assert candidate is not None and candidate.checkpoint == "meta-llama/Llama-3.1-405B-Instruct-FP8"
    held_gib = weight_bytes(request.arch, checkpoint_precision("fp8", candidate.checkpoint)) / 2**30
    all_linear_gib = weight_bytes(request.arch, weight_precision("fp8")) / 2**30
    assert held_gib == pytest.approx(454, abs=1) and all_linear_gib == pytest.approx(382, abs=1)
    sizing = manifests.pod_sizing(request, candidate, candidate.gpus_per_replica)
    assert held_gib * 1.1 <= sizing.cache_gib <= held_gib * 1.1 + 4


# ----------------------------------------------------------------------------------------------------------
# Valid objects


@pytest.mark.parametrize("path", IN_A_NODE, ids=lambda p: p.stem)
def test_rendered_objects_are_valid_kubernetes_objects(path: Path) -> None:
    for obj in rendered(path):
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "inferplan"
        assert obj["metadata"]["labels"]["inferplan.io/plan"] == "llm"
        assert_valid(obj)


def test_a_recommendation_renders_to_the_same_bytes_in_any_process() -> None:
    """The digest the operator writes in a status (`manifests.digest`) is the sha256 of what `inferplan render`
    prints for that recommendation, so a reviewer can check a rendered file against the status: the same bytes
    from fresh processes whose string hashing (set and dict-of-set orders) differs, and a render that leaves
    the recommendation it was given as it was."""
    path = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")  # engine files: a ConfigMap too
    request, candidate = planned(path)
    before = candidate.model_copy(deep=True)
    objects = render(request, candidate, name="llm", namespace="platform")  # the plan's, as the operator renders
    assert candidate == before
    text = to_yaml(objects)
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "inferplan.cli", "render", str(path), "--no-verify", "--name",
                               "llm", "--namespace", "platform"], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.stdout == text, f"inferplan render differs with PYTHONHASHSEED={seed}"
        digest = "sha256:" + hashlib.sha256(done.stdout.encode("utf-8")).hexdigest()
        assert digest in done.stderr and manifests.manifests_digest(objects) == digest


@pytest.mark.parametrize("path", IN_A_NODE, ids=lambda p: p.stem)
def test_the_yaml_is_the_same_whichever_emitter_pyyaml_has(path: Path) -> None:
    """to_yaml uses libyaml's emitter where PyYAML has it: a digest must not depend on whether it does."""
    import yaml

    for target in ("deployment", "kserve"):
        objects = rendered(path, target)
        pure = "---\n".join(yaml.dump(dict(o), Dumper=yaml.SafeDumper, sort_keys=False, width=2**31 - 1)
                            for o in objects)
        assert to_yaml(objects) == pure


# Fields of the custom kinds, from their published API types: KServe's Python SDK 0.16.0
# (kserve/models/v1beta1_inference_service*.py and v1beta1_predictor_spec.py, attribute_map: a PodSpec inline
# plus ComponentExtensionSpec), KEDA's from @kubernetes-models/keda 2.0.0 (keda.sh/v1alpha1/ScaledObjectSpec.d.ts,
# ScaleTriggers.d.ts, ScaleTarget.d.ts, AdvancedConfig.d.ts), LeaderWorkerSet's from the Go types of
# sigs.k8s.io/lws api/leaderworkerset/v1 (LeaderWorkerSetSpec, LeaderWorkerTemplate; no registry package ships
# them, so transcribed).
POD_SPEC_FIELDS = {"containers", "volumes", "nodeSelector", "tolerations"}
KSERVE_PREDICTOR_FIELDS = {"minReplicas", "maxReplicas", "containers", "volumes", "nodeSelector", "tolerations",
                           "annotations", "labels", "scaleMetric", "scaleTarget", "deploymentStrategy", "autoScaling"}
LWS_SPEC_FIELDS = {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}
LWS_TEMPLATE_FIELDS = {"leaderTemplate", "workerTemplate", "size", "restartPolicy", "subGroupPolicy",
                       "volumeClaimTemplates"}
LWS_RESTART_POLICIES = {"RecreateGroupOnPodRestart", "None", "Default"}


def test_inference_service_runs_the_same_container() -> None:
    _, candidate = planned(EXAMPLES[0])
    objects = by_kind(rendered(EXAMPLES[0], target="kserve"))
    assert set(objects) == {"InferenceService"}
    isvc = objects["InferenceService"]
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1"
    predictor = isvc["spec"]["predictor"]
    assert set(isvc["spec"]) == {"predictor"} and set(predictor) <= KSERVE_PREDICTOR_FIELDS
    assert predictor["minReplicas"] == candidate.replicas <= predictor["maxReplicas"]
    deployment_pod = pod_spec(by_kind(rendered(EXAMPLES[0]))["Deployment"])
    (container,) = predictor["containers"]
    assert container == {**deployment_pod["containers"][0], "name": "kserve-container"}
    for field in ("volumes", "nodeSelector"):
        assert predictor[field] == deployment_pod[field]
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    assert_valid(as_pod({k: predictor[k] for k in POD_SPEC_FIELDS}))
    # Its maximum is the autoscaling bound, which says where it comes from (the intervals' high end, here).
    from inferplan.deploy.bounds import replica_bounds

    bounds = replica_bounds(*planned(EXAMPLES[0]))
    assert predictor["maxReplicas"] == bounds.max
    assert isvc["metadata"]["annotations"]["inferplan.io/max-replicas-from"] == bounds.max_from


def test_inference_service_keeps_the_config_map_of_engine_files() -> None:
    path = next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8")
    assert [o["kind"] for o in rendered(path, target="kserve")] == ["ConfigMap", "InferenceService"]


# ----------------------------------------------------------------------------------------------------------
# A replica over nodes: LeaderWorkerSet


@pytest.mark.parametrize("stem", ["phi-4-tensor-parallel", "moe-qwen3-30b-a3b"])  # vLLM, SGLang (NVIDIA)
def test_a_replica_over_nodes_is_a_leader_worker_set(stem: str) -> None:
    path = next(p for p in EXAMPLES if p.stem == stem)
    request, candidate = over_two_nodes(path)
    per_node = request.gpus_per_node[candidate.gpu_type]
    objects = by_kind(render(request, candidate, name="llm", namespace="serving"))
    assert set(objects) == {"LeaderWorkerSet", "PodDisruptionBudget", "Service"}
    lws = objects["LeaderWorkerSet"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert set(lws["spec"]) <= LWS_SPEC_FIELDS and set(lws["spec"]["leaderWorkerTemplate"]) <= LWS_TEMPLATE_FIELDS
    template = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == candidate.replicas and template["size"] == 2
    assert template["restartPolicy"] in LWS_RESTART_POLICIES
    resource = GPU_VENDORS["nvidia"].resource
    launch = {}
    for role in ("leaderTemplate", "workerTemplate"):
        pod = template[role]["spec"]
        assert pod["nodeSelector"] == candidate.node_selector
        container = pod["containers"][0]
        assert container["resources"]["limits"][resource] == str(per_node)  # a node's GPUs per pod
        launch[role] = " ".join([*container.get("command", []), *container["args"]])
        assert_valid(as_pod(pod))
    assert "startupProbe" in template["leaderTemplate"]["spec"]["containers"][0]
    assert "readinessProbe" not in template["workerTemplate"]["spec"]["containers"][0]  # workers serve no HTTP
    leader = launch["leaderTemplate"]
    assert candidate.checkpoint in leader and str(2 * per_node) in leader
    if request.engine == "vllm":
        assert "ray start --head" in leader and "--distributed-executor-backend ray" in leader
        assert "ray start --address=$(LWS_LEADER_ADDRESS):6379" in launch["workerTemplate"]
    else:
        for role in ("leaderTemplate", "workerTemplate"):
            args = template[role]["spec"]["containers"][0]["args"]
            assert args[args.index("--nnodes") + 1] == "2"
            assert args[args.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
            assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
            assert flag_problems("sglang", request.engine_version, args) == []


@pytest.mark.parametrize("stem", ["phi-4-tensor-parallel", "moe-qwen3-30b-a3b"])  # vLLM, SGLang (NVIDIA)
def test_the_service_of_a_leader_worker_set_reaches_its_leaders_and_leaves_the_lws_its_name(stem: str) -> None:
    """LeaderWorkerSet's controller makes a headless Service named after the LeaderWorkerSet (only where no Service
    of that name exists), through which every pod resolves LWS_LEADER_ADDRESS (<leader pod>.<LWS name>.<namespace>):
    a rendered Service of that name would leave the workers unable to find their leader. The clients' Service keeps
    the plan's name, as for every other shape, and selects the leader pods by a label their template carries
    (LeaderWorkerSet labels no pod with a role), never the workers, which serve no HTTP."""
    request, candidate = over_two_nodes(next(p for p in EXAMPLES if p.stem == stem))
    objects = by_kind(render(request, candidate, name="llm", namespace="serving"))
    lws, service = objects["LeaderWorkerSet"], objects["Service"]
    assert service["metadata"]["name"] == "llm"
    assert lws["metadata"]["name"] != service["metadata"]["name"]
    assert lws["metadata"]["labels"]["inferplan.io/plan"] == "llm"
    template = lws["spec"]["leaderWorkerTemplate"]
    selector = service["spec"]["selector"].items()
    assert selector <= template["leaderTemplate"]["metadata"]["labels"].items()
    assert not selector <= template["workerTemplate"]["metadata"]["labels"].items()


def test_pipeline_stages_over_nodes_are_a_leader_worker_set_of_a_node_per_stage() -> None:
    """The 405B example's recommendation: two stages of 8 H100, one pod per node, the stages in the leader's
    arguments after the tensor-parallel size of one node."""
    request, candidate = planned(next(p for p in EXAMPLES if p.stem == "llama-405b-bf16-h100"))
    assert (candidate.pipeline_parallel, candidate.gpus_per_replica, candidate.nodes_per_replica) == (2, 16, 2)
    lws = by_kind(render(request, candidate, name="llm"))["LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and lws["spec"]["replicas"] == candidate.replicas
    for role in ("leaderTemplate", "workerTemplate"):
        container = template[role]["spec"]["containers"][0]
        assert container["resources"]["limits"][GPU_VENDORS["nvidia"].resource] == "8"
        assert_valid(as_pod(template[role]["spec"]))
    leader = " ".join(template["leaderTemplate"]["spec"]["containers"][0]["args"])
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2" in leader and "ray start --head" in leader


def test_a_replica_over_nodes_is_not_rendered_where_the_engine_or_target_cannot_run_it() -> None:
    request, candidate = over_two_nodes(next(p for p in EXAMPLES if p.stem == "tgi-mistral-7b"))
    with pytest.raises(ValueError, match=r"vllm .*sglang"):
        render(request, candidate, name="llm")
    request, candidate = over_two_nodes(EXAMPLES[0])
    with pytest.raises(ValueError, match="LeaderWorkerSet"):
        render(request, candidate, name="llm", target="kserve")


# ----------------------------------------------------------------------------------------------------------
# Disaggregated pools (SGLang): two Deployments, sglang-router and a Service


def _values(args: list[str], flag: str) -> list[str]:
    """The values after `flag` up to the next flag."""
    at = args.index(flag) + 1
    end = next((i for i in range(at, len(args)) if args[i].startswith("--")), len(args))
    return args[at:end]


def test_a_disaggregated_sglang_plan_renders_its_pools_a_router_and_a_service() -> None:
    request, candidate = disaggregated("sglang")
    objects = render(request, candidate, name="llm", namespace="serving")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Deployment", "llm-prefill"), ("PodDisruptionBudget", "llm-prefill"), ("Deployment", "llm-decode"),
        ("PodDisruptionBudget", "llm-decode"), ("ServiceAccount", "llm-router"), ("Role", "llm-router"),
        ("RoleBinding", "llm-router"), ("Deployment", "llm-router"), ("PodDisruptionBudget", "llm-router"),
        ("Service", "llm")]  # both pools run 2 replicas here
    for obj in objects:
        assert obj["metadata"]["labels"]["inferplan.io/plan"] == "llm"
        assert_valid(obj)
    named = {o["metadata"]["name"]: o for o in objects if o["kind"] != "PodDisruptionBudget"}
    roles = {r.role: r for r in candidate.roles}
    pods = {}
    for role in ("prefill", "decode"):
        pool, planned_role = named[f"llm-{role}"], roles[role]
        pod = pod_spec(pool)
        (container,) = pod["containers"]
        assert pool["spec"]["replicas"] == planned_role.replicas
        assert pod["nodeSelector"] == planned_role.node_selector
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(planned_role.gpus_per_replica)
        assert container["args"][:len(planned_role.engine_args)] == planned_role.engine_args
        assert _values(container["args"], "--disaggregation-mode") == [role]
        assert flag_problems("sglang", request.engine_version, container["args"]) == []
        assert pool["spec"]["selector"]["matchLabels"].items() <= pool["spec"]["template"]["metadata"]["labels"].items()
        pods[role] = pool["spec"]["template"]["metadata"]
    # The router finds each pool's pods by their labels (and only that pool's), on the port they serve, and a
    # prefill pod's bootstrap port in its annotation, the one its server listens on.
    prefill_args = pod_spec(named["llm-prefill"])["containers"][0]["args"]
    assert pods["prefill"]["annotations"] == {"sglang.ai/bootstrap-port": _values(prefill_args,
                                                                                 "--disaggregation-bootstrap-port")[0]}
    router = named["llm-router"]
    (container,) = pod_spec(router)["containers"]
    args = container["args"]
    assert router_flag_problems(args) == []
    assert container["command"] == ["python3", "-m", "sglang_router.launch_router"]
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        wanted = dict(kv.split("=", 1) for kv in _values(args, f"--{role}-selector"))
        assert wanted.items() <= pods[role]["labels"].items() and not wanted.items() <= pods[other]["labels"].items()
    assert _values(args, "--service-discovery-port") == [str(PORT)] and "--pd-disaggregation" in args
    # Routed as verification simulates the pools (simulate_disaggregated): that many routers, each round robin.
    from inferplan.planner.catalog.engine_args import ROUTER_REPLICAS

    assert router["spec"]["replicas"] == ROUTER_REPLICAS and _values(args, "--policy") == ["round_robin"]
    # The Service reaches the router only; the router runs as the account its Role lets watch pods.
    selector = named["llm"]["spec"]["selector"]
    assert selector.items() <= router["spec"]["template"]["metadata"]["labels"].items()
    assert not any(selector.items() <= p["labels"].items() for p in pods.values())
    assert pod_spec(router)["serviceAccountName"] == named["llm-router"]["metadata"]["name"]
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llm-router", "namespace": "serving"}]
    rule = next(o for o in objects if o["kind"] == "Role")["rules"][0]
    assert rule["resources"] == ["pods"] and {"list", "watch"} <= set(rule["verbs"])


def test_a_disaggregated_recommendation_is_no_single_deployment() -> None:
    """`deployment` refuses a candidate of two pools (its top-level fields are the decode pool's: a Deployment of them
    would stand for neither); `pool_deployment` is each pool's, as `render` makes it."""
    request, candidate = disaggregated("sglang")
    with pytest.raises(ValueError, match="prefill and decode pools"):
        manifests.deployment(request, candidate, name="llm")
    objects = {o["metadata"]["name"]: o for o in render(request, candidate, name="llm", namespace="serving")
               if o["kind"] == "Deployment"}
    for role in ("prefill", "decode"):
        assert manifests.pool_deployment(request, candidate, name="llm", role=role,
                                         namespace="serving") == objects[f"llm-{role}"]
    with pytest.raises(ValueError, match="prefill, decode"):
        manifests.pool_deployment(request, candidate, name="llm", role="router")


def test_a_disaggregated_plan_is_not_rendered_where_nothing_would_route_it() -> None:
    request, candidate = disaggregated("vllm")
    with pytest.raises(ValueError, match="P/D proxy"):
        render(request, candidate, name="llm")
    request, candidate = disaggregated("sglang")
    with pytest.raises(ValueError, match="--target deployment"):
        render(request, candidate, name="llm", target="kserve")


# ----------------------------------------------------------------------------------------------------------
# Disruption budgets: a node drain takes one replica at a time


def _budgets(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "PodDisruptionBudget"}


def _pod_labels(workload: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of every kind of pod a Deployment or LeaderWorkerSet runs."""
    if workload["kind"] == "Deployment":
        return [workload["spec"]["template"]["metadata"]["labels"]]
    template = workload["spec"]["leaderWorkerTemplate"]
    return [template[role]["metadata"]["labels"] for role in ("leaderTemplate", "workerTemplate")]


def _selects(budget: dict[str, Any], labels: dict[str, str]) -> bool:
    return budget["spec"]["selector"]["matchLabels"].items() <= labels.items()


def assert_budgets(objects: list[dict[str, Any]]) -> None:
    """Every workload of 2 or more replicas has one PodDisruptionBudget of its own name: maxUnavailable 1 (never a
    minAvailable, which blocks every drain of a lone replica), a Deployment's selector, every pod of a
    LeaderWorkerSet, and no pod of another workload; a workload of one replica has none."""
    budgets = _budgets(objects)
    workloads = [o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]
    guarded = set()
    for workload in workloads:
        name = workload["metadata"]["name"]
        if workload["spec"].get("replicas", 1) < 2:
            assert name not in budgets, name
            continue
        budget = budgets[name]
        guarded.add(name)
        assert budget["apiVersion"] == "policy/v1"
        assert budget["spec"]["maxUnavailable"] == 1 and "minAvailable" not in budget["spec"]
        assert budget["metadata"]["labels"] == workload["metadata"]["labels"]
        assert budget["metadata"].get("namespace") == workload["metadata"].get("namespace")
        if workload["kind"] == "Deployment":
            assert budget["spec"]["selector"] == workload["spec"]["selector"]
        assert all(_selects(budget, labels) for labels in _pod_labels(workload)), name
        for other in workloads:
            if other is not workload:
                assert not any(_selects(budget, labels) for labels in _pod_labels(other)), (name, other["metadata"])
        assert_valid(budget)
        at = objects.index(workload)
        assert objects[at + 1] is budget  # right after what it guards
    assert set(budgets) == guarded


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_workload_of_two_or_more_replicas_has_a_disruption_budget(path: Path) -> None:
    """A drain of the nodes a plan runs on evicts its replicas one at a time, never all of them: the plan's
    availability floor (constraints.minReplicas, 2 by default) holds through it."""
    objects = rendered(path)
    assert any(o["kind"] == "PodDisruptionBudget" for o in objects)  # every example runs 2 or more replicas
    assert_budgets(objects)


def test_each_pool_and_the_router_of_a_disaggregated_plan_has_its_own_disruption_budget() -> None:
    request, candidate = disaggregated("sglang")
    objects = render(request, candidate, name="llm", namespace="serving")
    assert_budgets(objects)
    pools = {r.role: r.replicas for r in candidate.roles}
    assert set(_budgets(objects)) == {"llm-router", *(f"llm-{role}" for role, n in pools.items() if n >= 2)}
    one = candidate.model_copy(update={"roles": [r.model_copy(update={"replicas": 1, "gpus": r.gpus_per_replica})
                                                 for r in candidate.roles]})
    objects = render(request, one, name="llm", namespace="serving")
    assert_budgets(objects)
    assert set(_budgets(objects)) == {"llm-router"}  # two routers always


@pytest.mark.parametrize("stem", ["phi-4-tensor-parallel", "moe-qwen3-30b-a3b"])
def test_the_disruption_budget_of_a_leader_worker_set_guards_whole_groups(stem: str) -> None:
    """LeaderWorkerSet recreates a group when any of its pods goes, so the budget covers the workers too, not only
    the leaders: one evicted pod (or a group coming back) uses it up, and a drain takes one group at a time."""
    request, candidate = over_two_nodes(next(p for p in EXAMPLES if p.stem == stem))
    candidate = candidate.model_copy(update={"replicas": 3, "gpus": 3 * candidate.gpus_per_replica})
    objects = render(request, candidate, name="llm", namespace="serving")
    assert [o["kind"] for o in objects] == ["LeaderWorkerSet", "PodDisruptionBudget", "Service"]
    assert_budgets(objects)
    lws, budget = objects[0], objects[1]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert _selects(budget, template["workerTemplate"]["metadata"]["labels"])
    assert budget["metadata"]["name"] == lws["metadata"]["name"]


def test_one_replica_gets_no_disruption_budget_unless_an_autoscaler_may_add_more() -> None:
    """With one replica a budget of maxUnavailable 1 protects nothing (and minAvailable 1 would block every drain):
    none is rendered. Handed to an autoscaler that may run 2 or more, the workload gets its budget; maxUnavailable
    follows whatever count the autoscaler sets."""
    from inferplan.deploy.autoscaling import hand_replicas_to_autoscaler
    from inferplan.deploy.bounds import replica_bounds

    request, candidate = planned(EXAMPLES[0])
    one = candidate.model_copy(update={"replicas": 1, "gpus": candidate.gpus_per_replica})
    objects = render(request, one, name="llm", namespace="serving")
    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    bounds = replica_bounds(request, one)
    assert bounds.max >= 2
    handed = hand_replicas_to_autoscaler(objects, bounds)
    assert [o["kind"] for o in handed] == ["Deployment", "PodDisruptionBudget", "Service"]
    assert handed[1] == manifests.pod_disruption_budget(objects[0])
    capped = replica_bounds(dataclasses.replace(request, max_replicas=1, min_replicas=1), one)
    assert capped.max == 1
    assert [o["kind"] for o in hand_replicas_to_autoscaler(objects, capped)] == ["Deployment", "Service"]
    two = render(request, candidate, name="llm", namespace="serving")  # already budgeted: not twice
    handed = hand_replicas_to_autoscaler(two, replica_bounds(request, candidate))
    assert [o["kind"] for o in handed] == ["Deployment", "PodDisruptionBudget", "Service"]



# ----------------------------------------------------------------------------------------------------------
# Images


def test_published_images_for_each_engine_and_vendor() -> None:
    assert engine_image("vllm", None, "nvidia") == f"vllm/vllm-openai:v{DEFAULT_VERSIONS['vllm']}"
    assert engine_image("vllm", "v0.6.3.post1", "nvidia") == "vllm/vllm-openai:v0.6.3.post1"
    assert engine_image("sglang", "0.5.2", "nvidia") == "lmsysorg/sglang:v0.5.2"
    assert engine_image("sglang", "0.5.2", "amd", "cdna3") == "lmsysorg/sglang:v0.5.2-rocm630-mi30x"
    assert engine_image("sglang", "0.5.2", "amd", "cdna4") == "lmsysorg/sglang:v0.5.2-rocm700-mi35x"  # MI355X
    assert engine_image("sglang", "0.4.6.post5", "amd") == "lmsysorg/sglang:v0.4.6.post5-rocm630"
    assert engine_image("tgi", "3.3.7", "nvidia") == "ghcr.io/huggingface/text-generation-inference:3.3.7"
    assert engine_image("tgi", "3.3.7", "amd") == "ghcr.io/huggingface/text-generation-inference:3.3.7-rocm"
    assert engine_image("tensorrt-llm", "1.0.0", "nvidia") == "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
    assert engine_image("lmdeploy", None, "nvidia").startswith("openmmlab/lmdeploy:v")
    assert set(RENDERABLE_ENGINES) == {"vllm", "sglang", "tgi", "tensorrt-llm", "lmdeploy"}


@pytest.mark.parametrize("engine", ["llama.cpp", "mlc-llm", "exllama"])
def test_engines_without_a_server_image_say_which_can_be_rendered(engine: str) -> None:
    with pytest.raises(ValueError, match="vllm") as raised:
        engine_image(engine, None, "nvidia")
    assert engine in str(raised.value) and "tensorrt-llm" in str(raised.value)


def test_vllm_on_amd_runs_a_rocm_image_of_the_pinned_release_or_the_first_published_one() -> None:
    # vLLM publishes vllm/vllm-openai-rocm:v<version> from 0.16.0 on, for gfx942 and gfx950 alike; an older
    # release of the 0.11 line (the pinned 0.11.2) runs the first one. The 0.6 line has AMD's MI300 build only.
    for family in ("cdna3", "cdna4"):
        assert engine_image("vllm", None, "amd", family) == "vllm/vllm-openai-rocm:v0.16.0"
        assert engine_image("vllm", "0.17.1", "amd", family) == "vllm/vllm-openai-rocm:v0.17.1"
    assert engine_image("vllm", "0.6.3.post1", "amd", "cdna3") == "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4"
    with pytest.raises(ValueError, match="cdna4"):
        engine_image("vllm", "0.6.3.post1", "amd", "cdna4")


def test_the_planner_plans_an_amd_family_only_where_the_release_line_has_an_image_for_it() -> None:
    """The families the planner lets each line run on (`engine_args.ROCM_FAMILIES`) are those it renders images
    for: a release line without a build for a GPU's family is refused at planning, never left for `render` to fail
    on."""
    for (engine, line), families in ROCM_FAMILIES.items():
        version = {"0.6": "0.6.3.post1", "0.11": None, "0.4": "0.4.6.post5", "0.5": None, "2": "2.4.1",
                   "3": None}[line]
        for family in ("cdna3", "cdna4"):
            gpu = "MI355X" if family == "cdna4" else "MI300X"
            problem = engine_gpu_problem(engine, version, "amd", family, gpu)
            if family in families:
                assert problem is None and engine_image(engine, version, "amd", family)
            else:
                assert problem == (f"{engine} {line}.x has no ROCm build for {family} GPUs ({gpu}); its builds run on "
                                   f"{', '.join(sorted(families))}: plan a later release (engine.version)")
                with pytest.raises(ValueError, match=family):
                    engine_image(engine, version, "amd", family)
    assert engine_gpu_problem("tensorrt-llm", None, "amd", "cdna3", "MI300X") == (
        "tensorrt-llm runs on NVIDIA GPUs only; MI300X is an AMD GPU")


@pytest.mark.parametrize("path", [p for p in IN_A_NODE if p.stem in ("amd-only-cluster", "qwen3-235b-mi355x")],
                         ids=lambda p: p.stem)
def test_a_recommendation_on_amd_gpus_renders_with_a_rocm_image_and_amd_resources(path: Path) -> None:
    request, candidate = planned(path)
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    assert gpu.vendor == "amd"
    pod = pod_spec(by_kind(render(request, candidate, name="llm"))["Deployment"])  # no image given
    container = pod["containers"][0]
    assert container["image"].startswith("vllm/vllm-openai-rocm:v")
    assert container["resources"]["limits"]["amd.com/gpu"] == str(candidate.gpus_per_replica)
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert pod["nodeSelector"] == {"amd.com/gpu.product-name": gpu.product_label}


def test_no_image_for_a_vendor_says_how_to_give_one() -> None:
    with pytest.raises(ValueError, match=r"--image or spec\.engine\.image"):
        engine_image("tensorrt-llm", None, "amd")
    with pytest.raises(ValueError, match=r"--image or spec\.engine\.image"):
        engine_image("sglang", "0.4.6.post5", "amd", "cdna4")  # ROCm 6.3 builds predate MI355X


def test_image_given_to_render_wins_over_the_plan_which_wins_over_the_published_one() -> None:
    path = EXAMPLES[0]
    request, candidate = planned(path)
    spec = load_plan_file(path).model_dump(by_alias=True, exclude_none=True)
    spec["engine"]["image"] = "registry.example.com/mirror/vllm-openai:v0.11.2"
    with_image = resolve_plan(parse_plan(spec), path.parent)
    assert with_image.engine_image == "registry.example.com/mirror/vllm-openai:v0.11.2"

    def image(req: PlanRequest, override: str | None = None) -> str:
        return pod_spec(by_kind(render(req, candidate, name="llm", image=override))["Deployment"])["containers"][0][
            "image"]

    assert image(request) == "vllm/vllm-openai:v0.11.2"
    assert image(with_image) == "registry.example.com/mirror/vllm-openai:v0.11.2"
    assert image(with_image, "localhost:5000/vllm:dev") == "localhost:5000/vllm:dev"


@pytest.mark.parametrize("bad", ["vllm/vllm-openai:v0.11.2 --trust-remote-code", "Vllm/x:1", "a//b", "x:"])
def test_spec_engine_image_must_be_an_image_reference(bad: str) -> None:
    spec = load_plan_file(EXAMPLES[0]).model_dump(by_alias=True, exclude_none=True)
    spec["engine"]["image"] = bad
    with pytest.raises(PlanError) as raised:
        parse_plan(spec)
    ((field, message),) = raised.value.problems
    assert field == "engine.image" and "image reference" in message


# ----------------------------------------------------------------------------------------------------------
# Names


@pytest.mark.parametrize(("text", "name"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3-1-8b-instruct"),
    ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
    ("acme/3B-chat_v2", "llm-3b-chat-v2"),  # a Service name starts with a letter
    ("x" * 80, "x" * 63),
])
def test_names_derived_from_the_model_are_dns_labels(text: str, name: str) -> None:
    assert dns_label(text) == name
    assert manifests.check_name(name) == name


def test_a_name_that_cannot_name_a_service_is_refused() -> None:
    request, candidate = planned(EXAMPLES[0])
    with pytest.raises(ValueError, match="DNS-1035"):
        render(request, candidate, name="Chat.v2")
    with pytest.raises(ValueError, match="unknown target"):
        render(request, candidate, name="chat", target="helm")


def _name(length: int) -> str:
    return ("llm-" + "x" * length)[:length]


def test_a_name_too_long_for_what_is_derived_from_it_is_refused_naming_the_longest_allowed() -> None:
    # render checked NAME <= 63 only: KServe's predictor label (isvc.NAME-predictor), a LeaderWorkerSet's worker
    # StatefulSet (NAME-lws-<group>, whose pods' controller-revision-hash label adds a hash) went over 63 characters,
    # and a disaggregated plan's error named NAME-prefill, not the name given.
    request, candidate = planned(EXAMPLES[0])
    assert render(request, candidate, name=_name(48), target="kserve")
    with pytest.raises(ValueError, match=f"name '{_name(49)}' is 49 characters, too long for KServe.*"
                                         "isvc.NAME-predictor.*the longest name allowed is 48 characters"):
        render(request, candidate, name=_name(49), target="kserve")

    request, candidate = over_two_nodes(next(p for p in EXAMPLES if p.stem == "phi-4-tensor-parallel"))
    last_group = max(candidate.replicas, replica_bounds(request, candidate).max) - 1
    longest = 52 - len(f"-lws-{last_group}")
    statefulsets = {f"{o['metadata']['name']}-{last_group}" for o in render(request, candidate, name=_name(longest))
                    if o["kind"] == "LeaderWorkerSet"}
    assert [len(s) for s in statefulsets] == [52]
    with pytest.raises(ValueError, match=f"name '{_name(longest + 1)}' is {longest + 1} characters, too long for a "
                                         f"replica over nodes.*NAME-lws-{last_group}.*the longest name allowed is "
                                         f"{longest} characters"):
        render(request, candidate, name=_name(longest + 1))

    request, candidate = disaggregated("sglang")
    assert render(request, candidate, name=_name(55))
    for name in (_name(56), _name(63)):
        with pytest.raises(ValueError) as refused:
            render(request, candidate, name=name)
        assert str(refused.value).startswith(f"name '{name}' is {len(name)} characters, too long for a "
                                             "disaggregated deployment: it names NAME-prefill")
        assert "the longest name allowed is 55 characters" in str(refused.value)
        assert f"{name}-prefill" not in str(refused.value)
        with pytest.raises(ValueError, match="the longest name allowed is 55"):
            manifests.pool_deployment(request, candidate, name=name, role="decode")


@pytest.mark.parametrize("engine", sorted(manifests.SERVING_FLAGS))
def test_listen_and_metrics_flags_are_accepted_by_every_pinned_engine_line(engine: str) -> None:
    from inferplan.planner.catalog.engine_args import VERSION_LINES, engine_flags

    for line in engine_flags()[engine]:
        version = engine_flags()[engine][line]["version"]
        assert flag_problems(engine, version, list(manifests.SERVING_FLAGS[engine])) == [], (engine, line)
    assert engine in VERSION_LINES


def test_a_version_naming_only_a_minor_line_renders_a_published_release() -> None:
    """`engine.version: "0.11"` rendered `vllm/vllm-openai:v0.11`, a tag that does not exist (images are tagged by
    release): a line is the pinned release where that is of the line, else its first release."""
    assert engine_image("vllm", "0.11", "nvidia") == f"vllm/vllm-openai:v{DEFAULT_VERSIONS['vllm']}"
    assert engine_image("vllm", "v0.10", "nvidia") == "vllm/vllm-openai:v0.10.0"
    sglang = DEFAULT_VERSIONS["sglang"]
    assert engine_image("sglang", "0.5", "amd", "cdna3") == f"lmsysorg/sglang:v{sglang}-rocm630-mi30x"
    assert engine_image("vllm", "0.11.1", "nvidia") == "vllm/vllm-openai:v0.11.1"  # a release stays as given
