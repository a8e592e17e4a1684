"""Importing a user's code: a ``package.module:attribute`` reference, a module name, or exactly the
``.py`` file (or package folder) the user names, under a private module name so that it never shadows
an installed module (``yaml.py``) nor is shadowed by one.  Used by the task registry and by the CLI's
``--import``."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["file_module_name", "import_module_or_file", "load_object"]


def load_object(reference: str) -> Any:
    """The object ``"package.module:attribute"`` names (imports the module)."""
    import importlib

    if not isinstance(reference, str) or reference.count(":") != 1:
        raise ValueError(f"expected a 'package.module:attribute' reference, got {reference!r}")
    module, attribute = reference.split(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"cannot load {reference!r}: {error}") from None


def file_module_name(path: str | os.PathLike) -> str:
    """The private module name a user's file (or package folder) is imported under by
    :func:`import_module_or_file`: ``_perm_circuits_user_<stem>_<hash of its resolved path>``, so
    that it never shadows, nor is shadowed by, an installed module of the same name (``yaml.py``)."""
    import hashlib
    import re
    from pathlib import Path

    resolved = Path(path).resolve()
    if resolved.name == "__init__.py":
        resolved = resolved.parent
    stem = re.sub(r"\W", "_", resolved.stem if resolved.suffix == ".py" else resolved.name) or "module"
    digest = hashlib.sha1(str(resolved).encode("utf-8")).hexdigest()[:12]
    return f"_perm_circuits_user_{stem}_{digest}"


def import_module_or_file(reference: str, file: str | None = None) -> Any:
    """The module that defines (and registers) a task, imported.

    ``reference`` is a ``.py`` file, a package folder, or a module name.  A file or folder (a path,
    or a bare name with ``NAME.py`` in the current folder) runs exactly that file, whatever it is
    named (``yaml.py``, ``ray.py``, a folder named like a standard module), under the private name
    :func:`file_module_name`; a file already imported is not run twice.  Any other name is imported
    as usual (the current folder on the path).  ``file``: the module's file, loaded under the name
    ``reference`` (a sweep worker re-importing what its driver imported).

    Raises:
        ValueError: naming the file or name, when it is missing, does not import, fails to parse,
            raises or calls ``sys.exit`` while it runs.
    """
    import importlib
    import sys
    from pathlib import Path

    if not isinstance(reference, str) or not reference:
        raise TypeError(f"a module must be named by a non-empty string (a module name or a .py file), got {reference!r}")
    if file is not None:
        return _import_file(reference, Path(file))
    if reference.endswith(".py") or "/" in reference or os.sep in reference or reference in (".", ".."):
        path = Path(reference)
        if not (path.is_file() or (path.is_dir() and (path / "__init__.py").is_file())):
            raise ValueError(f"cannot import {reference!r}: no such .py file or package folder")
        return _import_file(file_module_name(path), path)
    if reference.isidentifier():
        local = Path(reference + ".py")
        if local.is_file():  # the user's NAME.py here, not an installed NAME
            return _import_file(file_module_name(local), local)
        if (Path(reference) / "__init__.py").is_file():
            return _import_file(file_module_name(reference), Path(reference))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(reference)
    except ImportError as error:
        raise ValueError(f"cannot import {reference!r} (a module name or a .py file expected): {error}") from None
    except SyntaxError as error:
        raise ValueError(f"cannot import {reference!r}: syntax error in {error.filename} line {error.lineno}: "
                         f"{error.msg}") from None
    except SystemExit as exit_:
        raise ValueError(f"cannot import {reference!r}: it called sys.exit({exit_.code!r}) while imported") from None
    except Exception as error:  # noqa: BLE001 - the user's module raised
        raise ValueError(f"cannot import {reference!r}: it raised {type(error).__name__}: {error}") from None


def _import_file(name: str, path: Any) -> Any:
    """Run the file (or package folder) ``path`` as module ``name`` (once: a module already imported
    from that file is returned); one-line ValueError naming the file when it does not run."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(path)
    if path.name == "__init__.py":
        path = path.parent
    package = path.is_dir()
    source = path / "__init__.py" if package else path
    if not source.is_file():
        raise ValueError(f"cannot import {str(path)!r}: no such .py file or package folder")
    resolved = source.resolve()
    loaded = sys.modules.get(name)
    if loaded is not None:
        here = getattr(loaded, "__file__", None)
        if here is not None and Path(here).resolve() == resolved:
            return loaded
        raise ValueError(f"cannot import {str(path)!r} as module {name!r}: another module of that name is already "
                         f"imported ({here or 'built in'}); rename the file")
    for module in list(sys.modules.values()):  # imported already (e.g. by a plain import): not run twice
        here = getattr(module, "__file__", None)
        if isinstance(here, str) and here.endswith(source.name) and Path(here).resolve() == resolved:
            return module
    spec = importlib.util.spec_from_file_location(name, source,
                                                  submodule_search_locations=[str(path)] if package else None)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except SyntaxError as error:
        del sys.modules[name]
        raise ValueError(f"cannot import {str(path)!r}: syntax error at line {error.lineno}: {error.msg}") from None
    except SystemExit as exit_:
        del sys.modules[name]
        raise ValueError(f"cannot import {str(path)!r}: it called sys.exit({exit_.code!r}) while imported") from None
    except Exception as error:  # noqa: BLE001 - the user's file raised
        del sys.modules[name]
        raise ValueError(f"cannot import {str(path)!r}: it raised {type(error).__name__}: {error}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module
