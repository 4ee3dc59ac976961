"""deployment_change: what a GitOps review sees when the running Deployment is compared with the rendered one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from inferplan.deploy.diff import asks_for_a_gpu, deployment_change, launch_tokens, secret_name, split_launch
from inferplan.planner.catalog.engine_args import engine_flags, router_flags


def _deployment(replicas: int = 2, args: list[str] | None = None, gpus: int = 1,
                product: str = "NVIDIA-A100-SXM4-80GB", image: str = "vllm/vllm-openai:v0.11.2",
                command: list[str] | None = None, extra_selector: dict[str, str] | None = None) -> dict[str, Any]:
    container = {
        "name": "vllm",
        "image": image,
        "command": ["vllm", "serve"] if command is None else command,
        "args": ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128", "--tensor-parallel-size", str(gpus)]
        if args is None else args,
        "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "8"}, "requests": {"cpu": "4"}},
        "env": [{"name": "HF_HOME", "value": "/cache"}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat"},
        "spec": {"replicas": replicas, "template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": product, **(extra_selector or {})},
            "containers": [{"name": "sidecar", "image": "busybox"}, container],
        }}},
    }


def test_the_same_deployment_is_in_sync() -> None:
    change = deployment_change(_deployment(), _deployment())
    assert change.in_sync
    assert change.patch == {}
    assert change.summary == ()


def test_spelling_and_order_of_flags_do_not_count() -> None:
    current = _deployment(args=["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size=1", "--max-num-seqs=128"])
    assert deployment_change(current, _deployment()).in_sync


def test_a_shell_wrapped_launch_is_read_as_the_command_it_runs() -> None:
    current = _deployment(command=["sh", "-c"], args=[
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 128 --tensor-parallel-size 1"])
    assert deployment_change(current, _deployment()).in_sync


def test_each_difference_is_a_line_and_the_patch_sets_it() -> None:
    current = _deployment(replicas=2, gpus=1, product="NVIDIA-A100-SXM4-80GB",
                          args=["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128", "--enforce-eager"])
    desired = _deployment(replicas=3, gpus=2, product="NVIDIA-H100-80GB-HBM3", image="vllm/vllm-openai:v0.12.0",
                          args=["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256",
                                "--tensor-parallel-size", "2"])
    change = deployment_change(current, desired)
    assert set(change.summary) == {
        "replicas: 2 -> 3",
        "image: vllm/vllm-openai:v0.11.2 -> vllm/vllm-openai:v0.12.0",
        "args: - --enforce-eager",
        "args: --max-num-seqs 128 -> 256",
        "args: + --tensor-parallel-size 2",
        "resources.limits.nvidia.com/gpu: 1 -> 2",
        "nodeSelector.nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB -> NVIDIA-H100-80GB-HBM3",
    }
    assert change.patch["spec"]["replicas"] == 3
    pod = change.patch["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    [container] = pod["containers"]
    assert container["name"] == "vllm"  # the running container's name: strategic merge matches on it
    assert container["args"] == desired["spec"]["template"]["spec"]["containers"][1]["args"]
    assert container["command"] == ["vllm", "serve"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}  # the CPU the user set stays


def test_what_the_recommendation_does_not_decide_is_left_alone() -> None:
    current = _deployment(extra_selector={"pool": "serving"})
    desired = copy.deepcopy(_deployment())
    desired["spec"]["template"]["spec"]["containers"][1]["env"] = []
    change = deployment_change(current, desired)
    assert change.in_sync, change.summary


def test_another_vendor_removes_the_old_gpu_resource_and_label() -> None:
    current = _deployment()
    desired = _deployment()
    pod = desired["spec"]["template"]["spec"]
    pod["nodeSelector"] = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}
    pod["containers"][1]["resources"] = {"limits": {"amd.com/gpu": 1}}
    change = deployment_change(current, desired)
    patch_pod = change.patch["spec"]["template"]["spec"]
    assert patch_pod["nodeSelector"] == {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
                                         "nvidia.com/gpu.product": None}
    assert patch_pod["containers"][0]["resources"] == {"limits": {"amd.com/gpu": 1, "nvidia.com/gpu": None}}


def test_a_deployment_without_replicas_runs_one() -> None:
    current = _deployment()
    del current["spec"]["replicas"]
    assert deployment_change(current, _deployment(replicas=1)).in_sync
    assert deployment_change(current, _deployment(replicas=2)).summary == ("replicas: 1 -> 2",)


def test_not_a_deployment_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a Deployment, got a StatefulSet"):
        deployment_change({"kind": "StatefulSet"}, _deployment())
    with pytest.raises(ValueError, match="no container"):
        deployment_change({"kind": "Deployment", "spec": {}}, _deployment())


def test_launch_parsing() -> None:
    assert launch_tokens({"command": ["/bin/sh", "-c", "vllm serve m --x 1"]}) == ["vllm", "serve", "m", "--x", "1"]
    assert split_launch(["vllm", "serve", "m", "--a=1", "--flag", "--b", "2", "--a", "3"]) == (
        ("vllm", "serve", "m"), {"--a": "3", "--flag": None, "--b": "2"})


def test_quantities_are_compared_by_amount_and_a_gpu_request_equal_to_its_limit_is_no_difference() -> None:
    running, rendered = _deployment(), _deployment()
    limits = running["spec"]["template"]["spec"]["containers"][1]["resources"]
    limits["limits"]["cpu"], limits["requests"]["cpu"] = "8000m", "4.0"
    rendered["spec"]["template"]["spec"]["containers"][1]["resources"]["limits"]["memory"] = "19Gi"
    limits["limits"]["memory"] = "19456Mi"
    limits["requests"]["nvidia.com/gpu"] = "1"  # the API server's default where the manifest leaves it out
    assert deployment_change(running, rendered).in_sync
    limits["limits"]["memory"] = "20Gi"
    assert deployment_change(running, rendered).summary == ("resources.limits.memory: 20Gi -> 19Gi",)


@pytest.mark.parametrize(("where", "value", "says"), [
    (("spec",), "oops", "spec: expected a mapping"),
    (("metadata",), "x", "metadata: expected a mapping"),
    (("spec", "replicas"), "2", "spec.replicas: expected a whole number"),
    (("spec", "template", "spec", "nodeSelector"), ["a"], "spec.template.spec.nodeSelector: expected a mapping"),
])
def test_a_malformed_deployment_is_refused_with_the_path_of_the_field(where: tuple[str, ...], value: Any,
                                                                      says: str) -> None:
    running = _deployment()
    node: Any = running
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(ValueError, match=f"the Deployment is malformed: {says}"):
        deployment_change(running, _deployment())


def test_a_malformed_container_field_is_refused_with_its_path() -> None:
    running = _deployment()
    running["spec"]["template"]["spec"]["containers"][1]["args"] = "--max-num-seqs 5"
    with pytest.raises(ValueError, match=r"containers\[1\]\.args: expected a list of strings"):
        deployment_change(running, _deployment())
    running["spec"]["template"]["spec"]["containers"][1]["args"] = []
    running["spec"]["template"]["spec"]["containers"][1]["resources"] = {"limits": ["nvidia.com/gpu"]}
    with pytest.raises(ValueError, match=r"containers\[1\]\.resources\.limits: expected a mapping"):
        deployment_change(running, _deployment())


def test_a_deployment_without_a_gpu_container_is_told_apart() -> None:
    assert asks_for_a_gpu(_deployment())
    web = _deployment()
    del web["spec"]["template"]["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"]
    assert not asks_for_a_gpu(web)


def test_a_shell_script_that_runs_other_commands_first_is_read_as_the_engines_command() -> None:
    """`bash -c "pip install -U hf_transfer && vllm serve REPO ..."` had been read from `pip`: the served
    checkpoint and every flag after `-U` were mistaken (the FP8 checkpoint's precision went unread)."""
    script = ("pip install -U hf_transfer && HF_HUB_ENABLE_HF_TRANSFER=1 exec vllm serve "
              "nvidia/Llama-3.1-70B-Instruct-FP8 --tensor-parallel-size=4 --max-num-seqs 96; echo done")
    tokens = ["vllm", "serve", "nvidia/Llama-3.1-70B-Instruct-FP8", "--tensor-parallel-size=4", "--max-num-seqs", "96"]
    assert launch_tokens({"command": ["bash", "-c", script]}) == tokens
    assert launch_tokens({"command": ["/bin/sh", "-c"], "args": [script]}) == tokens
    assert launch_tokens({"command": ["sh", "-c", "python3 -m sglang.launch_server --tp 2 | tee /log"]}) == [
        "python3", "-m", "sglang.launch_server", "--tp", "2"]


def test_diff_patches_the_engine_container_that_asks_for_gpus_under_requests_only() -> None:
    """A sidecar first and the engine's GPUs under requests only: the sidecar had been compared and patched."""
    current = {"spec": {"template": {"spec": {"containers": [
        {"name": "proxy", "image": "envoyproxy/envoy"},
        {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", "m"],
         "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}
    desired = {"spec": {"template": {"spec": {"containers": [
        {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", "m"],
         "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    change = deployment_change(current, desired)
    assert all("envoy" not in line for line in change.summary), change.summary
    assert change.patch["spec"]["template"]["spec"]["containers"][0]["name"] == "engine"


SECRETS = ("sk-SECRET123", "hf_SECRET456", "hunter2", "sk-NEW789", "pw SECRET 0")


@pytest.mark.parametrize("running", [
    ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "128", "--tensor-parallel-size", "1",
     "--api-key", "sk-SECRET123", "--hf-token=hf_SECRET456", "--download-dir", "https://me:hunter2@models.example"],
    ["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "64", "--tensor-parallel-size", "1", "--api-key=sk-NEW789"],
])
def test_the_values_of_secret_flags_are_not_echoed(running: list[str]) -> None:
    """`args: - --api-key sk-SECRET123` had been in the summary, which the operator writes into a plan's status for
    every plan reader to see; the value is <redacted> now, and the patch holds the rendered arguments alone."""
    desired = _deployment(args=["meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256",
                                "--tensor-parallel-size", "1", "--api-key", "sk-RENDERED"])
    change = deployment_change(_deployment(args=running), desired)
    shown = "\n".join(change.summary)
    assert not any(secret in shown or secret in change.patch_json() for secret in SECRETS), shown
    assert "args: --max-num-seqs 128 -> 256" in change.summary or "args: --max-num-seqs 64 -> 256" in change.summary
    assert ("args: - --hf-token <redacted>" in change.summary) == ("--hf-token=hf_SECRET456" in running)
    assert "args: --api-key <redacted> -> <redacted>" in change.summary  # it differs, and says so
    if "--download-dir" in running:
        assert "args: - --download-dir https://<redacted>@models.example" in change.summary
    # The patch restores what the recommendation sets: its own arguments, whole.
    assert change.patch["spec"]["template"]["spec"]["containers"][0]["args"] == desired["spec"]["template"]["spec"][
        "containers"][1]["args"]


def test_secrets_in_the_command_words_are_not_echoed() -> None:
    """An entry point that sets a variable (`env HF_TOKEN=... vllm serve`), and a script that no shell could split
    (an unbalanced quote), had been quoted whole in the `command:` line."""
    desired = _deployment()
    for command, args in ((["env", "HF_TOKEN=hf_SECRET456", "vllm", "serve"], None),
                          (["sh", "-c"], ["vllm serve m --api-key 'pw SECRET 0' --oracle-password hunter2 '"])):
        change = deployment_change(_deployment(command=command, args=args), desired)
        [line] = [line for line in change.summary if line.startswith("command:")]
        assert not any(secret in line for secret in SECRETS), line
        assert "<redacted>" in line


def test_the_engines_secret_flags_are_told_by_name() -> None:
    """Of every flag the pinned engines and the router accept, these hold a secret; token counts and key files
    (which the planner may set, and a review must read) do not."""
    tables = [table["flags"] for lines in engine_flags().values() for table in lines.values()]
    flags = {flag for table in [*tables, router_flags()["flags"]] for flag in table}
    assert {flag for flag in flags if secret_name(flag)} == {
        "--api-key", "--api-keys", "--hf-token", "--ngrok-authtoken", "--oracle-password",
        "--allow-credentials", "--no-allow-credentials"}
    assert all(secret_name(name) for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "--db-secret",
                                              "AWS_SECRET_ACCESS_KEY", "--password", "--client_secret"))
    assert not any(secret_name(name) for name in ("--max-num-batched-tokens", "--tokenizer", "--ssl-keyfile",
                                                  "--speculative-token-map", "--max-total-tokens", "HF_HOME"))


def test_a_deployment_without_the_gpu_taints_toleration_is_told_to_add_it() -> None:
    """GPU nodes carry nvidia.com/gpu=present:NoSchedule on GKE: a Deployment whose pods do not tolerate it stays
    Pending there, so the review shows the toleration the rendered pods have, and the patch keeps the running
    pods' own tolerations (strategic merge replaces the list)."""
    own = {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
    current = _deployment()
    current["spec"]["template"]["spec"]["tolerations"] = [own]
    desired = _deployment()
    desired["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    change = deployment_change(current, desired)
    assert change.summary == ("tolerations: + nvidia.com/gpu:NoSchedule (Exists)",)
    assert change.patch["spec"]["template"]["spec"]["tolerations"] == [
        own, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize("running", [
    [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    [{"key": "nvidia.com/gpu", "operator": "Exists"}],  # every effect
    [{"operator": "Exists"}],  # every taint
])
def test_a_toleration_that_covers_the_gpu_taint_is_in_sync(running: list[dict[str, str]]) -> None:
    current = _deployment()
    current["spec"]["template"]["spec"]["tolerations"] = running
    desired = _deployment()
    desired["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert deployment_change(current, desired).in_sync
