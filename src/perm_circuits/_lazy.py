"""Lazy top-level names for a package (PEP 562): ``import perm_circuits`` loads no torch.

A package's ``__init__`` lists its re-exports as imports under ``if TYPE_CHECKING:`` (seen by
editors and type checkers) and ends with ``attach(__name__, __file__)``, which reads that block with
:mod:`ast` and imports each name's module on first access.  Names that are also submodule names
(``train``, ``evaluate``, ...) keep meaning the re-exported object after the submodule is imported.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from pathlib import Path


def type_checking_imports(package: str, init_file: str) -> dict[str, tuple[str, str]]:
    """Each name imported under ``if TYPE_CHECKING:`` in ``init_file`` -> ``(module, attribute)``
    (``module`` is the package itself for ``from package import sub``)."""
    tree = ast.parse(Path(init_file).read_text())
    exports: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom) or stmt.level != 0 or stmt.module is None:
                raise ValueError(f"{init_file}: only absolute 'from X import Y' lines may sit under TYPE_CHECKING")
            for alias in stmt.names:
                exports[alias.asname or alias.name] = (stmt.module, alias.name)
    return exports


class LazyPackage(types.ModuleType):
    """A package module whose re-exported names are imported on first attribute access."""

    _lazy_exports: dict[str, tuple[str, str]]

    def __getattr__(self, name: str) -> object:
        exports = self.__dict__.get("_lazy_exports", {})
        if name not in exports:
            try:  # a plain submodule that nothing re-exports, e.g. perm_circuits.views
                return importlib.import_module(f"{self.__name__}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{self.__name__}.{name}":
                    raise
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None
        module, attribute = exports[name]
        if module == self.__name__:  # `from package import sub`: a submodule
            value = importlib.import_module(f"{module}.{attribute}")
        else:
            value = getattr(importlib.import_module(module), attribute)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: object) -> None:
        # The import system binds `package.sub` after importing a submodule. Where `sub` is also a
        # re-exported name bound to something else (the function `train` of module `train`), keep
        # the re-export: the submodule stays reachable through sys.modules and `import package.sub`.
        exports = self.__dict__.get("_lazy_exports", {})
        if isinstance(value, types.ModuleType) and name in exports:
            module, attribute = exports[name]
            if f"{module}.{attribute}" != value.__name__:
                return
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.__dict__.get("_lazy_exports", {})))


def attach(package: str, init_file: str) -> None:
    """Make the names under ``if TYPE_CHECKING:`` in ``init_file`` lazy attributes of ``package``."""
    module = sys.modules[package]
    module.__dict__["_lazy_exports"] = type_checking_imports(package, init_file)
    module.__class__ = LazyPackage
