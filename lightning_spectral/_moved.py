"""Module paths of release 0.1 that moved when the package was laid out by layer (docs/changelog.md lists each).

``import lightning_spectral.features`` and the like keep working for one more release: a finder at the end of
``sys.meta_path`` (consulted only when no module of that name exists) gives a module whose names are read from
the new places, with one ``FutureWarning`` naming the new import. Names that left the package (the recipes' models)
raise an ``ImportError`` that says where they are now.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

MOVED: dict[str, tuple[str, ...]] = {
    "lightning_spectral.features": ("lightning_spectral.kernels",),
    "lightning_spectral.linalg": ("lightning_spectral.algebra",),
    "lightning_spectral.distributed": ("lightning_spectral.sync",),
    "lightning_spectral.metrics.sync": ("lightning_spectral.sync",),
    "lightning_spectral.viz": ("lightning_spectral.pictures",),
    "lightning_spectral.loggers": ("lightning_spectral.pictures",),
    "lightning_spectral.files": ("lightning_spectral.io",),
    "lightning_spectral.ood": ("lightning_spectral.metrics", "lightning_spectral.functional"),
    "lightning_spectral.callbacks.spec_align_solver": ("lightning_spectral.functional.spec_align_solver",),
    "lightning_spectral.generative": ("lightning_spectral.data",),
    "lightning_spectral.clip": (),
}
LEFT_THE_PACKAGE = {
    "DigitsVAE": "recipes/digits_vae.py",
    "ConditionalDigitsVAE": "recipes/digits_vae.py",
    "CLIPFineTune": "recipes/clip_finetune.py",
}
REPLACED = {"log_image": "log_picture", "log_figure": "log_picture"}


class _MovedModule(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None

    def exec_module(self, module: ModuleType) -> None:
        old, targets = module.__name__, MOVED[module.__name__]
        where = " and ".join(targets) or "the recipes"
        warnings.warn(f"{old} moved to {where}: import from there ({old} goes in the next release)", FutureWarning, 2)
        homes = [importlib.import_module(name) for name in targets]

        def __getattr__(name: str) -> Any:
            for home in homes:
                if hasattr(home, name):
                    return getattr(home, name)
            if name in LEFT_THE_PACKAGE:
                raise ImportError(f"{old}.{name} left the package: it is the recipes' own, in {LEFT_THE_PACKAGE[name]}")
            if name in REPLACED:
                raise ImportError(f"{old}.{name} is gone: use lightning_spectral.pictures.{REPLACED[name]}")
            raise AttributeError(f"module {old!r} (moved to {where}) has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _MovedModule())


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
