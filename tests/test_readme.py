"""The README's Python example runs as written (and what it prints is what it claims)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    assert len(blocks[0].strip().splitlines()) <= 12
    exec(compile(blocks[0], "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "1.0 1.0"  # d32h2 recall and elimination accuracy
    assert float(out[1]) == pytest.approx(0.178, abs=0.02)  # mean-ablating L0H1 breaks recall
    assert "recall_accuracy" in out[2] and [line.split()[0] for line in out[4:]] == ["1", "2"]  # 2 epochs
    assert float(out[-1].split()[1]) < 1.3  # test loss after 2 short epochs, down from ln 6 = 1.79


def test_readme_names_the_ci_commands():
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    setup = 'pip install "torch==2.13.*" && pip install -e ".[dev]" && bash scripts/install_chromium.sh'
    test = "python -m pytest -q -n 2 --dist loadfile"
    assert setup in text and test in text
    assert test in ci and 'pip install -q "torch==2.13.*"' in ci and 'pip install -q -e ".[dev]"' in ci
