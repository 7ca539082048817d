"""Import torchvision and timm model definitions where torchvision's C extension is missing.

Test and benchmark environments only (never imported by fusion_core). The registry's only
torchvision wheels for torch 2.13 are CUDA builds: with the CPU torch their `_C` extension
does not load, and `import torchvision` then fails in `torchvision._meta_registrations`,
which registers fake kernels for C-extension ops (`torchvision::nms`, `roi_align`, …) that
were never defined. The model definitions use none of those ops, so when (and only when)
that import fails this way, the registrations are skipped and torchvision imported again;
calling one of its detection ops then fails as it would without the extension. Where
torchvision imports normally (the GPU machine), nothing is changed.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from types import ModuleType

_REGISTRATIONS = "torchvision._meta_registrations"


def import_torchvision() -> ModuleType | None:
    """torchvision, or None when it is not installed (or cannot be imported at all)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "failed to load image Python extension"
        try:
            return importlib.import_module("torchvision")
        except ImportError:
            return None
        except RuntimeError as e:
            if "torchvision::" not in str(e):
                raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]  # the half-imported package
        sys.modules[_REGISTRATIONS] = types.ModuleType(_REGISTRATIONS)
        try:
            return importlib.import_module("torchvision")
        except (ImportError, RuntimeError):
            return None


def import_timm() -> ModuleType | None:
    """timm (which imports torchvision first), or None when either cannot be imported."""
    if import_torchvision() is None:
        return None
    try:
        return importlib.import_module("timm")
    except ImportError:
        return None


def import_transformers() -> ModuleType | None:
    """transformers, or None when it is not installed. Its model classes import torchvision
    lazily (through its image utilities), so torchvision is made importable first."""
    import_torchvision()
    try:
        return importlib.import_module("transformers")
    except ImportError:
        return None
