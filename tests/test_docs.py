"""The documentation site builds offline with ``mkdocs build --strict`` (API pages from docstrings)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("mkdocs") is None and not (Path(sys.executable).parent / "mkdocs").exists(), reason="mkdocs is not installed (pip install -e '.[dev]')")
def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    html = (tmp_path / "site" / "api" / "core" / "index.html").read_text()
    assert "bayes_posterior" in html and "load_pretrained" in html
    assert "fonts.googleapis" not in (tmp_path / "site" / "index.html").read_text()
