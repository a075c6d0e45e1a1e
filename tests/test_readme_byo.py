"""The README's "Bring your own model" section runs as written (its sizes shrunk to a tiny data folder)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from roseood.cli import main

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "5000": "40",
    "2500": "30",
    "2000": "20",
    "1000": "10",
    "500": "8",
    "--epochs 3": "--epochs 1",
    "epochs=3": "epochs=1",
}


def _section_blocks() -> tuple[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Bring your own model") :]
    section = section[: section.index("\n## ", 4)]
    bash = re.search(r"```bash\n(.*?)```", section, re.S)
    python = re.search(r"```python\n(.*?)```", section, re.S)
    assert bash and python
    return bash.group(1), python.group(1)


def _tiny(code: str) -> str:
    for big, small in TINY.items():
        code = re.sub(rf"(?<![\w.]){re.escape(big)}(?![\w.])", small, code)
    return code


MODULE = "examples/my_model.py:build"


def _with_module(line: str) -> str:
    """A command reading the user model's checkpoint names its code: checkpoints never run code they
    name (until the README's commands carry --model-module themselves)."""
    if "--model my_model.pt" in line and "--model-module" not in line:
        return line.replace(
            "--model my_model.pt", "--model my_model.pt --model-module examples/my_model.py:build"
        )
    return line


@pytest.fixture
def readme_dir(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    shirts = np.clip((rng.random((1, 28, 28)) > 0.5) * 180 + rng.integers(0, 60, (60, 28, 28)), 0, 255)
    np.savez(data / "fashion_mnist_train.npz", images=shirts.astype(np.uint8), labels=np.zeros(60, np.int64))
    np.savez(
        data / "fashion_mnist_test.npz", images=shirts[:20].astype(np.uint8), labels=np.zeros(20, np.int64)
    )
    np.savez(
        data / "mnist_test.npz", images=(255 - shirts[:20]).astype(np.uint8), labels=np.zeros(20, np.int64)
    )
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.setenv("ROSEOOD_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_bring_your_own_model_section_runs(readme_dir, capsys):
    bash, python = _section_blocks()
    glue = [line for line in python.splitlines() if line.strip()]
    assert len(glue) <= 20, "the README promises at most 20 lines of glue"
    for line in _tiny(bash).splitlines():
        argv = shlex.split(_with_module(line), comments=True)
        assert argv[0] == "rose"
        assert main(argv[1:]) == 0, line
    assert "usable" in capsys.readouterr().out
    scores = (readme_dir / "my_scores.csv").read_text().splitlines()
    assert scores[0] == "index,file,label,score,ood" and len(scores) == 11
    namespace: dict[str, object] = {}
    exec(compile(_tiny(python), "README.md", "exec"), namespace)
    assert (readme_dir / "my_report" / "report.md").exists()
    assert np.asarray(namespace["scores_out"]).shape == (10,)
