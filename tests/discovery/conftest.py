"""Runtime shape/type checking of perm_circuits.discovery (jaxtyping + beartype), as the root conftest does."""

from __future__ import annotations

from jaxtyping import install_import_hook

with install_import_hook("perm_circuits.discovery", "beartype.beartype"):
    import perm_circuits.discovery  # noqa: F401
