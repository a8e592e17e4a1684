"""Every CLI error a user can cause ends in one line (exit 2), a closed stdout
(``| head``) ends quietly, ``--debug`` / ``PERM_CIRCUITS_DEBUG=1`` show the traceback, and an
unreachable Ray address is refused in seconds with nothing written."""

from __future__ import annotations

import errno
import io
import os
import socket
import sys
import time

import pytest

from perm_circuits import cli
from perm_circuits.cli import main
from perm_circuits.ray_address import check_ray_address


@pytest.fixture
def failing_report(monkeypatch):
    """``sweep-report`` whose page writer raises the error set in the returned dict (or prints a path)."""
    import perm_circuits.views.sweep_report as sweep_report

    state: dict = {"error": None}

    def write(source, out, force=False, title=None):
        if state["error"] is not None:
            raise state["error"]
        return "x" * 100_000  # printed: enough to hit a closed pipe

    monkeypatch.setattr(sweep_report, "write_sweep_report", write)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    return state


def _run(tmp_path, *extra: str) -> list[str]:
    return ["sweep-report", str(tmp_path), "--out", str(tmp_path / "page.html"), *extra]


@pytest.mark.parametrize("error, code, words", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "page.html"), 2, "OSError: [Errno 28] No space left on device"),
    (PermissionError(errno.EACCES, "Permission denied", "x"), 2, "PermissionError: [Errno 13] Permission denied"),
    (RecursionError("maximum recursion depth exceeded\nwhile decoding a JSON object"), 2,
     "RecursionError: maximum recursion depth exceeded while decoding a JSON object"),
    (ValueError("a bad value\nover two lines"), 2, "error: a bad value over two lines"),
    (RuntimeError("a bug of ours"), 1, "RuntimeError: a bug of ours (an unexpected error: run with --debug"),
])
def test_errors_end_in_one_line(tmp_path, capsys, failing_report, error, code, words):
    failing_report["error"] = error
    assert main(_run(tmp_path)) == code
    captured = capsys.readouterr()
    assert captured.err.startswith("perm-circuits sweep-report: error: ") and captured.err.count("\n") == 1
    assert words in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_debug_flag_and_variable_show_the_traceback(tmp_path, failing_report, monkeypatch):
    failing_report["error"] = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    for argv in (["--debug", *_run(tmp_path)], _run(tmp_path, "--debug")):
        with pytest.raises(OSError, match="No space left"):
            main(argv)
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(OSError, match="No space left"):
        main(_run(tmp_path))
    monkeypatch.setenv(cli.DEBUG_ENV, "0")
    assert main(_run(tmp_path)) == 2


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader is gone (``perm-circuits ... | head -1`` after head exits)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_a_closed_pipe_ends_quietly(tmp_path, capsys, failing_report, monkeypatch):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(_run(tmp_path)) == 141  # 128 + SIGPIPE, as a Unix tool killed by the closed pipe
    assert capsys.readouterr().err == ""  # no traceback, no message


def test_an_import_file_that_fails_is_one_line_naming_it(tmp_path, capsys):
    cases = {
        "raises.py": ("raise RuntimeError('no GPU here')\n", "it raised RuntimeError: no GPU here"),
        "broken.py": ("def f(:\n", "syntax error at line 1"),
        "leaves.py": ("import sys\nsys.exit(0)\n", "it called sys.exit(0) while imported"),
    }
    for name, (text, words) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        assert main(["evaluate", "d16h1", "--import", str(path)]) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--import {path}: cannot import {str(path)!r}: {words}" in err, err


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once closed


def test_an_unreachable_ray_address_fails_fast_before_writing(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text("[grid]\nseed = [0]\n")
    out = tmp_path / "sweep"
    address = f"127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    assert main(["sweep", str(spec), "--backend", "ray", "--address", address, "--quiet", "--out", str(out)]) == 2
    assert time.perf_counter() - start < 10.0
    err = capsys.readouterr().err
    assert f"cannot reach a Ray cluster at address {address!r}" in err and err.count("\n") == 1
    assert not out.exists()  # no spec.json, no folder


def test_check_ray_address_parses_and_bounds_its_wait():
    for bad in ("10.0.0.1", "host:port", ":6379", "h:70000"):
        with pytest.raises(ValueError, match=r"is not HOST:PORT"):
            check_ray_address(bad)
    with pytest.raises(TypeError, match="non-empty string"):
        check_ray_address("")
    check_ray_address("auto")  # Ray's own lookup: left to Ray
    with socket.socket() as server:  # something listening: accepted
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        check_ray_address(f"ray://127.0.0.1:{server.getsockname()[1]}", timeout=2.0)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"cannot reach a Ray cluster .*Connection refused"):
        check_ray_address(f"127.0.0.1:{_closed_port()}", timeout=1.0)
    assert time.perf_counter() - start < 2.0


def test_run_sweep_checks_the_ray_address_before_writing(tmp_path):
    from perm_circuits.sweep import run_sweep

    out = tmp_path / "sweep"
    address = f"127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    with pytest.raises(ValueError, match="cannot reach a Ray cluster"):
        run_sweep({"grid": {"seed": [0]}}, out, backend="ray", address=address, progress=False)
    assert time.perf_counter() - start < 10.0 and not out.exists()
