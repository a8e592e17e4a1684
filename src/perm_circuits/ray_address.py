"""A Ray cluster's address, probed before anything is written or started.

``ray.init(address=...)`` on an address where nothing listens retries for about 20 s and ends in
chained tracebacks; :func:`check_ray_address` refuses it in a few seconds with one line.  It
imports nothing heavy (no torch, no Ray), so the CLI runs it first.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["RAY_CONNECT_TIMEOUT", "check_ray_address"]

RAY_CONNECT_TIMEOUT = 5.0
"""Seconds :func:`check_ray_address` waits for a Ray head to accept a connection."""


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Refuse, within about ``timeout`` seconds, a Ray ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``)
    where nothing accepts a TCP connection: a one-line ValueError naming it, before anything is written
    or Ray retries for 20 s.  ``"auto"`` and ``"local"`` (Ray's own lookups) are left to Ray."""
    import socket

    if not isinstance(address, str) or not address.strip():
        raise TypeError(f"address must be a non-empty string such as '10.0.0.1:6379', got {address!r}")
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"Ray address {address!r} is not HOST:PORT (such as 10.0.0.1:6379)")
    outcome: dict[str, Any] = {}

    def probe() -> None:
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            outcome["ok"] = True
        except OSError as error:
            outcome["error"] = error.strerror or str(error) or type(error).__name__

    thread = threading.Thread(target=probe, daemon=True)  # the name lookup has no timeout of its own
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome.get("ok"):
        reason = outcome.get("error", f"no answer within {timeout:g} s")
        raise ValueError(f"cannot reach a Ray cluster at address {address!r} ({reason}); start one there "
                         "(ray start --head) or leave the address out for a local instance")
