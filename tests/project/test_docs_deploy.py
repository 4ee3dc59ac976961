"""docs/deploy.md's quoted `inferplan.io/replica-bounds` annotations are what `inferplan render --autoscaling hpa`
writes for the chat example, as it is and with `slo.confidence: "0.99"`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferplan.cli import main

REPO = Path(__file__).resolve().parents[2]
CHAT = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"


def _quoted() -> list[str]:
    """The doc's two replica-bounds blocks, each as one line."""
    doc = (REPO / "docs" / "deploy.md").read_text()
    section = doc.split("The autoscaler's annotation `inferplan.io/replica-bounds`", 1)[1]
    blocks = section.split("\n```\n")[1:4:2]
    return [" ".join(block.splitlines()) for block in blocks]


def _rendered(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["render", str(path), "--autoscaling", "hpa"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    (hpa,) = [o for o in objects if o and o["kind"] == "HorizontalPodAutoscaler"]
    return hpa["metadata"]["annotations"]["inferplan.io/replica-bounds"]


@pytest.mark.parametrize("confidence", [None, "0.99"])
def test_the_quoted_replica_bounds_are_those_render_writes(confidence: str | None, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = CHAT
    if confidence is not None:
        manifest = yaml.safe_load(CHAT.read_text())
        manifest["spec"]["slo"]["confidence"] = confidence
        path = tmp_path / "chat.yaml"
        path.write_text(yaml.safe_dump(manifest))
    assert _rendered(path, capsys) == _quoted()[confidence is not None]
