"""Where the import system would load a module of thunder from, found without importing anything.

The engine hashes every file a series changes before any of them is imported (``interpreter.py`` is
imported while ``import thunder`` runs, ``transforms/autodiff.py`` only later), so it asks the other
meta-path finders, package by package, exactly what the import system will ask them: an imported parent
package's ``__path__``, or else the search locations of the parent's spec.
"""

from __future__ import annotations

import os
import sys


def module_name(path: str) -> str:
    """thunder/core/jit_ext.py -> thunder.core.jit_ext; thunder/core/__init__.py -> thunder.core."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_folder(spec) -> str:
    """The folder of the package a spec finds: its ``__init__.py``'s, or a namespace package's first location."""
    return os.path.dirname(spec.origin) if spec.origin else list(spec.submodule_search_locations)[0]


class Locator:
    """Finds specs through every meta-path finder but ``skip`` (the overlay's own), remembering them."""

    def __init__(self, skip=None):
        self.skip = skip
        self.specs: dict = {}

    def spec(self, name: str):
        if name not in self.specs:
            self.specs[name] = self._find(name)
        return self.specs[name]

    def _find(self, name: str):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__spec__", None) is not None:
            return module.__spec__
        parent_name, _, _ = name.rpartition(".")
        path = None
        if parent_name:
            parent = self.spec(parent_name)
            if parent is None or parent.submodule_search_locations is None:
                return None
            imported = sys.modules.get(parent_name)
            path = getattr(imported, "__path__", None) or parent.submodule_search_locations
        for finder in sys.meta_path:
            if finder is self.skip or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path)
            if spec is not None:
                return spec
        return None

    def source_file(self, name: str) -> str | None:
        """The ``.py`` file module ``name`` would be loaded from; None when there is none."""
        spec = self.spec(name)
        origin = getattr(spec, "origin", None)
        return origin if origin and spec.has_location and origin.endswith(".py") else None
