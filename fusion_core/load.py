"""Load a model file: import it by path, pick the nn.Module class, build it in eval mode."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch.nn as nn

from . import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .errors import Fix, ModelLoadError
from .ir.trace import is_library_file


@dataclass(frozen=True)
class ModelSource:
    """A model file's bytes as they were imported: what its traced line numbers refer to,
    and what `--apply` checks the file against before writing."""

    path: str  # the file name its code objects (and so its stack traces) carry
    data: bytes = field(repr=False)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def import_model_file(path: str | Path):
    """Import `path` as a module (named after the file) and return it."""
    return import_model_source(path)[0]


def import_model_source(path: str | Path):
    """Import `path` from one read of its bytes; return the module and those bytes.

    The module is compiled from the bytes kept, so a file saved again while the analysis
    runs cannot make the mapped lines (or `--apply`) disagree with the imported code.
    """
    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"model file not found: {path}", Fix.MODEL_FILE)
    name = f"fusion_model_{p.stem}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None or spec.origin is None:
        raise ModelLoadError(f"cannot import {path}: not a Python file (pass a .py file)")
    try:
        source = ModelSource(spec.origin, p.read_bytes())
    except OSError as e:
        raise ModelLoadError(f"cannot read {path}: {e.strerror or e} (check its "
                             "permissions)") from e
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    folder = str(p.resolve().parent)
    sys.path.insert(0, folder)  # sibling imports (e.g. an applied `*_fused` module) resolve
    try:
        exec(compile(source.data, source.path, "exec", dont_inherit=True), module.__dict__)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        line = f":{e.lineno}" if e.lineno else ""
        raise ModelLoadError(
            f"{path}{line}: syntax error: {e.msg} (fix the file and retry)") from e
    except SystemExit as e:  # a script-style file: its exit must not end the analyzer
        sys.modules.pop(name, None)
        raise ModelLoadError(
            f"model file {path}{user_line(e, p)} exited with status {exit_status(e)} while "
            "importing it: move the sys.exit() (or the script code) under "
            "`if __name__ == '__main__':`") from e
    except Exception as e:  # noqa: BLE001 - anything the user's module raises at import
        sys.modules.pop(name, None)
        line = user_line(e, p)
        raise ModelLoadError(
            f"{path}{line}: importing the model file failed: {type(e).__name__}: {e} "
            "(fix the import or install the missing package)") from e
    finally:
        if folder in sys.path:
            sys.path.remove(folder)
    return module, source


def exit_status(e: SystemExit) -> str:
    """The process status `sys.exit(code)` asks for, as Python would set it."""
    if e.code is None or isinstance(e.code, int):
        return str(e.code or 0)
    return f"1 ({e.code})"


def user_line(exc: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve() == path.resolve()]
    return f":{frames[-1].lineno}" if frames else ""


def user_exit_frame(exc: BaseException) -> str | None:
    """`file:line` of the innermost frame of the user's code in `exc`'s traceback: not an
    installed library's, not fusion-advisor's own, not generated (`<...>`); None if none."""
    ours = Path(__file__).resolve().parent
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not is_library_file(f.filename)
              and not Path(f.filename).resolve().is_relative_to(ours)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def module_classes(module) -> list[type[nn.Module]]:
    """nn.Module subclasses defined in `module` itself (not imported into it), in file order."""
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, nn.Module)
             and obj.__module__ == module.__name__]
    if len(found) < 2:
        return found
    lines = {name: line for name, (line, _) in class_sources(module).items()}
    return sorted(found, key=lambda c: lines.get(c.__name__, sys.maxsize))


def class_sources(module) -> dict[str, tuple[int, str]]:
    """Line and source text of each top-level class in the module's file, from one parse.

    (`inspect.getsource` re-parses the whole file for every class it is asked about.)
    """
    try:
        text = Path(module.__file__).read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, TypeError, ValueError):
        return {}
    return {n.name: (n.lineno, ast.get_source_segment(text, n) or "")
            for n in tree.body if isinstance(n, ast.ClassDef)}


def pick_class(module, path: str | Path, class_name: str | None) -> type[nn.Module]:
    classes = module_classes(module)
    names = [c.__name__ for c in classes]
    if class_name is not None:
        for c in classes:
            if c.__name__ == class_name:
                return c
        raise ModelLoadError(
            f"no nn.Module class {class_name!r} in {path} "
            f"(classes found: {', '.join(names) or 'none'})")
    if not classes:
        raise ModelLoadError(f"no nn.Module subclass defined in {path} (define one to analyze)")
    roots = _roots(module, classes)
    if len(roots) == 1:
        return roots[0]
    raise ModelLoadError(
        f"{path} defines several nn.Module classes ({', '.join(c.__name__ for c in roots)})",
        Fix.MODEL_CLASS)


def _roots(module, classes: list[type[nn.Module]]) -> list[type[nn.Module]]:
    """Classes no other class in the file builds as a submodule (the model's top level)."""
    if len(classes) < 2:
        return classes
    sources = class_sources(module)
    used: set[str] = set()
    for c in classes:
        src = sources.get(c.__name__, (0, ""))[1]
        used.update(o.__name__ for o in classes if o is not c and f"{o.__name__}(" in src)
    return [c for c in classes if c.__name__ not in used]


def instantiate(cls: type[nn.Module], path: str | Path) -> nn.Module:
    required = [p.name for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if required:
        raise ModelLoadError(
            f"{cls.__name__}() needs arguments ({', '.join(required)}): give them defaults "
            f"in {path} so the analyzer can build the model with no arguments")
    try:
        model = cls()
    except SystemExit as e:
        raise ModelLoadError(
            f"{cls.__name__}() ({Path(path).name}{user_line(e, Path(path))}) called "
            f"sys.exit() (status {exit_status(e)}) while the analyzer built it: remove the "
            "exit from the constructor") from e
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(
            f"{cls.__name__}() raised {type(e).__name__}: {e} (fix the constructor)") from e
    return model.eval()


def load_model(path: str | Path, class_name: str | None = None) -> nn.Module:
    """Import `path`, pick the model class, and return an instance in eval mode."""
    return load_model_source(path, class_name)[0]


def load_model_source(path: str | Path, class_name: str | None = None
                      ) -> tuple[nn.Module, ModelSource]:
    """`load_model`, plus the file's bytes as imported."""
    module, source = import_model_source(path)
    return instantiate(pick_class(module, path, class_name), path), source
