"""Test set-up: runtime shape/type checking of perm_circuits with jaxtyping + beartype.

The import hook must be installed before anything imports perm_circuits, which is why it lives
at the top of the root conftest.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")

from jaxtyping import install_import_hook  # noqa: E402

with install_import_hook("perm_circuits", "beartype.beartype"):
    import perm_circuits  # noqa: F401,E402
    import perm_circuits.evaluate  # noqa: F401,E402
    import perm_circuits.posterior  # noqa: F401,E402
    import perm_circuits.tasks.permutation_data  # noqa: F401,E402
    import perm_circuits.train  # noqa: F401,E402
    import perm_circuits.analysis  # noqa: F401,E402
    import perm_circuits.views  # noqa: F401,E402
    import perm_circuits.views.figures  # noqa: F401,E402
    import perm_circuits.views.circuit_graph  # noqa: F401,E402
    import perm_circuits.discovery  # noqa: F401,E402
    import perm_circuits.discovery.ground_truth  # noqa: F401,E402
    import perm_circuits.discovery.scoring  # noqa: F401,E402
    import perm_circuits.reports  # noqa: F401,E402

    for _name in perm_circuits.discovery.__all__:  # lazy too: load them under the hook
        getattr(perm_circuits.discovery, _name)

    # The package's top-level names load on first use; load them all under the hook so every
    # module they come from is checked, as when `import perm_circuits` loaded them eagerly.
    for _name in perm_circuits.__all__:
        getattr(perm_circuits, _name)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def task():
    from perm_circuits import TaskConfig

    return TaskConfig(repeat_ratio=0.3)


@pytest.fixture(scope="session")
def pretrained():
    """Loader for shipped models, cached per session (skips nothing: they ship with the package)."""
    from perm_circuits import load_pretrained

    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_pretrained(name)
        return cache[name]

    return get


# ----------------------------------------------------------------------------- shared expensive results
# Session-scoped: computed once per xdist worker, by whichever test file asks first.  Keep the
# files that use one of these in one file, or one folder, so --dist loadfile can share it.


@pytest.fixture(scope="session")
def d32h2_roles(pretrained):
    """``head_roles`` of the shipped d32h2 under every ablation mode (n_pair=1000, n_boot=200, no
    circuit step): the verdict the study's tests judge (tests/analysis/study/test_pretrained_roles.py)."""
    from perm_circuits.analysis import head_roles

    return head_roles(pretrained("d32h2"), n_pair=1000, n_boot=200, circuits=False)
