"""The operator's settings from INFERPLAN_* variables."""

from __future__ import annotations

import pytest

from inferplan.operator.settings import OperatorSettings, SettingsError, load_settings


def test_no_variables_watch_all_namespaces_with_defaults() -> None:
    settings = load_settings({})
    assert settings == OperatorSettings()
    assert settings.all_namespaces and settings.metrics_port == 8080 and settings.health_port == 8081


def test_variables_are_read_and_trimmed() -> None:
    settings = load_settings({"INFERPLAN_NAMESPACES": " llm, team-a ,,", "INFERPLAN_RESYNC_SECONDS": "120",
                              "INFERPLAN_LOG_LEVEL": "debug", "INFERPLAN_METRICS_PORT": "0",
                              "INFERPLAN_CHECK_SECONDS": "0.5", "INFERPLAN_PLANNER_THREADS": "4"})
    assert settings.namespaces == ("llm", "team-a") and not settings.all_namespaces
    assert (settings.resync_seconds, settings.check_seconds, settings.log_level) == (120.0, 0.5, "DEBUG")
    assert (settings.metrics_port, settings.planner_threads) == (0, 4)


@pytest.mark.parametrize(("env", "message"), [
    ({"INFERPLAN_RESYNC_SECONDS": "soon"}, "INFERPLAN_RESYNC_SECONDS must be a number"),
    ({"INFERPLAN_RESYNC_SECONDS": "0"}, "INFERPLAN_RESYNC_SECONDS must be >= 1"),
    ({"INFERPLAN_METRICS_PORT": "70000"}, "INFERPLAN_METRICS_PORT must be a port number"),
    ({"INFERPLAN_HEALTH_PORT": "8081.5"}, "INFERPLAN_HEALTH_PORT must be an integer"),
    ({"INFERPLAN_LOG_LEVEL": "chatty"}, "INFERPLAN_LOG_LEVEL must be one of"),
    ({"INFERPLAN_PLANNER_THREADS": "0"}, "INFERPLAN_PLANNER_THREADS must be >= 1"),
])
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(env)


def test_verify_setting() -> None:
    assert load_settings({}).verify  # on by default: the recommendation passes its own simulator
    assert not load_settings({"INFERPLAN_VERIFY": "false"}).verify
    with pytest.raises(SettingsError, match="INFERPLAN_VERIFY must be true or false"):
        load_settings({"INFERPLAN_VERIFY": "maybe"})


def test_planner_processes_default_to_two_and_zero_means_threads() -> None:
    assert load_settings({}).planner_processes == 2
    assert load_settings({"INFERPLAN_PLANNER_PROCESSES": "0"}).planner_processes == 0
    with pytest.raises(SettingsError, match="INFERPLAN_PLANNER_PROCESSES must be >= 0"):
        load_settings({"INFERPLAN_PLANNER_PROCESSES": "-1"})


def test_peering_is_off_by_default_and_named_by_its_object() -> None:
    default = load_settings({})
    assert default.peering is None and default.peering_priority is None and default.peering_lifetime == 30
    settings = load_settings({"INFERPLAN_PEERING": " inferplan-peering ", "INFERPLAN_PEERING_PRIORITY": "100",
                              "INFERPLAN_PEERING_LIFETIME": "15"})
    assert (settings.peering, settings.peering_priority, settings.peering_lifetime) == ("inferplan-peering", 100, 15)


@pytest.mark.parametrize(("env", "message"), [
    ({"INFERPLAN_PEERING": "Not_A_Name"}, "INFERPLAN_PEERING must be a Kubernetes object name"),
    ({"INFERPLAN_PEERING": "x" * 254}, "INFERPLAN_PEERING must be a Kubernetes object name"),
    ({"INFERPLAN_PEERING_PRIORITY": "high"}, "INFERPLAN_PEERING_PRIORITY must be an integer"),
    ({"INFERPLAN_PEERING_PRIORITY": "-1"}, "INFERPLAN_PEERING_PRIORITY must be >= 0"),
    ({"INFERPLAN_PEERING_PRIORITY": str(2**31)}, "INFERPLAN_PEERING_PRIORITY must be <= 2147483647"),
    ({"INFERPLAN_PEERING_LIFETIME": "2"}, "INFERPLAN_PEERING_LIFETIME must be >= 5"),
])
def test_bad_peering_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(env)


@pytest.mark.parametrize("name", ["INFERPLAN_RESYNC_SECONDS", "INFERPLAN_CHECK_SECONDS", "INFERPLAN_OBSERVE_SECONDS"])
@pytest.mark.parametrize("raw", ["nan", "inf", "1e999", "Infinity"])
def test_periods_that_are_not_finite_name_the_variable(name: str, raw: str) -> None:
    # INFERPLAN_CHECK_SECONDS=nan passed the minimum (NaN compares false): the check loop then spun on a zero
    # wait and its periodic scan (resync, inventory) never came; inf meant never.
    with pytest.raises(SettingsError, match=f"{name} must be a finite number, got '{raw}'"):
        load_settings({name: raw})


@pytest.mark.parametrize("raw", ["llm team-a", "llm;team-a", "team-*", "!kube-system", "Team-A", "x" * 64])
def test_namespaces_that_are_not_names_name_the_variable(raw: str) -> None:
    # Each was taken as one namespace: "llm team-a" (a list written with spaces) watched no namespace at all,
    # without a word; kopf took "team-*" as a pattern, which the peering check and the chart's Roles cannot.
    with pytest.raises(SettingsError, match="INFERPLAN_NAMESPACES must be namespace names separated by commas"):
        load_settings({"INFERPLAN_NAMESPACES": raw})
    assert load_settings({"INFERPLAN_NAMESPACES": "llm,team-a," + "x" * 63}).namespaces == ("llm", "team-a", "x" * 63)


def test_metrics_and_health_on_one_port_name_both_variables() -> None:
    # Accepted before: /metrics (prometheus_client) and /healthz (kopf) are two servers, and the second to start
    # failed to bind with "address already in use" after the operator had started.
    with pytest.raises(SettingsError, match="INFERPLAN_METRICS_PORT and INFERPLAN_HEALTH_PORT must be different"):
        load_settings({"INFERPLAN_METRICS_PORT": "9000", "INFERPLAN_HEALTH_PORT": "9000"})
    with pytest.raises(SettingsError, match="both are 8081"):
        load_settings({"INFERPLAN_METRICS_PORT": "8081"})
    off = load_settings({"INFERPLAN_METRICS_PORT": "0", "INFERPLAN_HEALTH_PORT": "0"})
    assert (off.metrics_port, off.health_port) == (0, 0)


@pytest.mark.parametrize("content", ["- name: main\n  url: http://p:9090\n".encode("utf-16"),
                                     "# r\xe9gion\n- name: main\n  url: http://p:9090\n".encode("latin-1")])
def test_a_prometheus_file_that_is_not_utf8_names_the_variable_and_the_file(tmp_path, content: bytes) -> None:
    # A UTF-16 file (a Windows editor) or Latin-1 text stopped the operator with a UnicodeDecodeError traceback.
    path = tmp_path / "prometheus.yaml"
    path.write_bytes(content)
    with pytest.raises(SettingsError, match=f"INFERPLAN_PROMETHEUS_CONFIG: {path} is not UTF-8 text"):
        load_settings({"INFERPLAN_PROMETHEUS_CONFIG": str(path)})


def test_a_prometheus_file_that_is_not_yaml_is_told_without_quoting_its_line(tmp_path, capsys) -> None:
    """YAML's message quoted the broken line, `url: http://admin:hunter2@prom:9090: x`, and the operator printed it
    to its log; it says the line and column now."""
    from inferplan.operator.main import run

    path = tmp_path / "prometheus.yaml"
    path.write_text("- name: main\n  url: http://admin:hunter2@prom:9090: x\n")
    with pytest.raises(SettingsError) as caught:
        load_settings({"INFERPLAN_PROMETHEUS_CONFIG": str(path)})
    assert "hunter2" not in str(caught.value)
    assert str(caught.value) == (f"INFERPLAN_PROMETHEUS_CONFIG: {path} is not YAML: mapping values are not allowed "
                                 "here (line 2, column 38)")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("INFERPLAN_PROMETHEUS_CONFIG", str(path))
        assert run() == 2
    assert "hunter2" not in capsys.readouterr().err
