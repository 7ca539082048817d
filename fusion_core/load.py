"""Load a model: import its file or module, pick the class or factory, build it in eval mode.

Reads the model's source (a ``.py`` path, ``path.py:NAME`` or ``package.module:NAME``),
and the packages above a file inside one; writes nothing. A file inside a package (its
folder has an ``__init__.py``) is imported as ``package.module``, with the folder above
the top package on ``sys.path`` for the import, so its relative imports resolve.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch.nn as nn

from . import _interpret  # noqa: F401  (first: sets TRITON_INTERPRET before triton loads)
from .build import build_model, exit_status, user_line
from .errors import Fix, ModelLoadError
from .ir.trace import is_library_file
from .source_trees import parse_source


@dataclass(frozen=True)
class ModelSource:
    """A model file's bytes as they were imported: what its traced line numbers refer to,
    and what `--apply` checks the file against before writing; and how the model was
    built from it (`--apply` builds the rewritten file's model the same way)."""

    path: str  # the file name its code objects (and so its stack traces) carry
    data: bytes = field(repr=False)
    factory: str | None = None  # the class or function called to build the model
    kwargs: tuple[tuple[str, Any], ...] = ()  # the keyword arguments it was called with

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def split_model_ref(text: str) -> tuple[str, str | None]:
    """`path.py:NAME` or `package.module:NAME` -> (path or module, NAME); else (text, None).

    Only an identifier after the last colon is a name: `C:\\models\\m.py` stays a path."""
    head, sep, tail = text.rpartition(":")
    if sep and head and tail.isidentifier():
        return head, tail
    return text, None


def is_module_path(target: str) -> bool:
    """`package.module` (dotted identifiers, no such file here), not a file's path."""
    return (not target.endswith(".py") and all(p.isidentifier() for p in target.split("."))
            and not Path(target).exists())


def package_module(path: Path) -> tuple[Path, str] | None:
    """(folder above the top package, `package.module`) for a file inside a package (its
    folders up to the top one hold an ``__init__.py``); None for a file outside any."""
    p = path.resolve()
    parts = [] if p.name == "__init__.py" else [p.stem]
    folder = p.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts or (len(parts) == 1 and p.name != "__init__.py") or not parts[-1].isidentifier():
        return None
    return folder, ".".join(parts)


def import_model_file(path: str | Path):
    """Import `path` as a module and return it (see `import_model_source`)."""
    return import_model_source(path)[0]


def import_model_source(path: str | Path):
    """Import `path` from one read of its bytes; return the module and those bytes.

    The module is compiled from the bytes kept, so a file saved again while the analysis
    runs cannot make the mapped lines (or `--apply`) disagree with the imported code.
    A file outside any package is named after the file; one inside a package gets its
    dotted name, after the packages above it are imported (see `package_module`).
    """
    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"model file not found: {path}", Fix.MODEL_FILE)
    if p.suffix != ".py":
        raise ModelLoadError(f"cannot import {path}: not a Python file (pass a .py file)")
    found = package_module(p)
    if found is None:
        return _exec_file(f"fusion_model_{p.stem}", p, str(path), [p.resolve().parent])
    root, name = found
    with _on_sys_path([root]):
        _import_parents(name, root, str(path))
    return _exec_file(name, p, str(path), [root, p.resolve().parent], keep_previous=True)


def import_module_source(dotted: str):
    """Import the module `package.module` (importable from the current folder or the
    environment) from one read of its file, as `import_model_source` does a path."""
    with _on_sys_path([Path.cwd()]):  # as `python -m` would: the current folder first
        try:
            spec = importlib.util.find_spec(dotted)  # imports the packages above it
        except Exception as e:  # noqa: BLE001 - a package's __init__ may raise anything
            spec, problem = None, f"{type(e).__name__}: {e}"
        else:
            problem = "no such module"
    if spec is None:
        raise ModelLoadError(
            f"cannot import {dotted}: {problem} (give a module importable from the current "
            "folder, e.g. package.module:Class, or the path of a .py file)")
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise ModelLoadError(f"cannot import {dotted}: it is not a Python source file "
                             f"({spec.origin or 'a namespace package'}); give a .py module")
    p = Path(spec.origin)
    root = p.parent
    for _ in range(dotted.count(".") + (p.name == "__init__.py")):
        root = root.parent
    return _exec_file(dotted, p, dotted, [root.resolve(), p.resolve().parent],
                      keep_previous=True)


@contextlib.contextmanager
def _on_sys_path(folders: list[Path]) -> Iterator[None]:
    """`folders` first on sys.path for the block (imports the model makes at import time)."""
    added = [str(f) for f in folders]
    sys.path[:0] = added
    try:
        yield
    finally:
        for f in added:
            if f in sys.path:
                sys.path.remove(f)


def _import_parents(name: str, root: Path, given: str) -> None:
    """Import the packages above module `name` (its relative imports need them), and check
    that each is the folder under `root` it names, not another package of the same name."""
    parts = name.split(".")[:-1]
    for i in range(len(parts)):
        package, where = ".".join(parts[:i + 1]), root.joinpath(*parts[:i + 1])
        try:
            module = importlib.import_module(package)
        except Exception as e:  # noqa: BLE001 - anything the package's __init__ raises
            raise ModelLoadError(
                f"{given} is in package {package} ({where}), and importing that package "
                f"failed: {type(e).__name__}: {e} (fix its __init__.py)") from e
        paths = [Path(x).resolve() for x in getattr(module, "__path__", [])]
        if where not in paths:
            raise ModelLoadError(
                f"{given} is in package {package} ({where}), but another package of that "
                f"name is already imported (from {', '.join(map(str, paths)) or '?'}): "
                "rename one of them")


def _exec_file(name: str, p: Path, given: str, folders: list[Path],
               keep_previous: bool = False):
    """Run the file `p` as module `name`, `folders` on sys.path meanwhile; (module, source).

    `keep_previous`: `name` is the user's own module name; a module already imported under
    it gets its place in sys.modules back afterwards (other code holds its classes)."""
    is_package = p.name == "__init__.py"
    spec = importlib.util.spec_from_file_location(
        name, p, submodule_search_locations=[str(p.parent)] if is_package else None)
    if spec is None or spec.loader is None or spec.origin is None:
        raise ModelLoadError(f"cannot import {given}: not a Python file (pass a .py file)")
    try:
        source = ModelSource(spec.origin, p.read_bytes())
    except OSError as e:
        raise ModelLoadError(f"cannot read {given}: {e.strerror or e} (check its "
                             "permissions)") from e
    module = importlib.util.module_from_spec(spec)
    # Dataclasses and pickling look modules up by name: ours is registered while it runs.
    previous = sys.modules.get(name) if keep_previous else None
    sys.modules[name] = module
    imported = False
    try:
        # sibling imports (e.g. an applied `*_fused` module) resolve
        with _on_sys_path(folders):
            # compiled from the tree the source map and the class lookup read too
            tree = parse_source(source.data, source.path)
            exec(compile(tree, source.path, "exec", dont_inherit=True), module.__dict__)
        imported = True
    except SyntaxError as e:
        line = f":{e.lineno}" if e.lineno else ""
        raise ModelLoadError(
            f"{given}{line}: syntax error: {e.msg} (fix the file and retry)") from e
    except SystemExit as e:  # a script-style file: its exit must not end the analyzer
        raise ModelLoadError(
            f"model file {given}{user_line(e, p)} exited with status {exit_status(e)} while "
            "importing it: move the sys.exit() (or the script code) under "
            "`if __name__ == '__main__':`") from e
    except Exception as e:  # noqa: BLE001 - anything the user's module raises at import
        raise ModelLoadError(
            f"{given}{user_line(e, p)}: importing the model file failed: "
            f"{type(e).__name__}: {e} (fix the import or install the missing package)") from e
    finally:
        if previous is not None:
            sys.modules[name] = previous
        elif not imported:
            sys.modules.pop(name, None)
    return module, source


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
        tree = parse_source(text, module.__file__)
    except (OSError, SyntaxError, TypeError, ValueError):
        return {}
    return {n.name: (n.lineno, ast.get_source_segment(text, n) or "")
            for n in tree.body if isinstance(n, ast.ClassDef)}


def pick_class(module, path: str | Path, class_name: str | None) -> type[nn.Module]:
    """The class `class_name` defined in the module, else its one top-level nn.Module class."""
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


def pick_factory(module, where: str | Path, name: str | None) -> Callable[..., Any]:
    """What builds the model: the module's attribute `name` (an nn.Module class, defined
    there or imported into it, or a function returning a model), else its one root class."""
    if name is None:
        return pick_class(module, where, None)
    obj = vars(module).get(name)
    if obj is None:
        found = ", ".join(c.__name__ for c in module_classes(module)) or "none"
        raise ModelLoadError(f"no nn.Module class {name!r} in {where}, nor a function of that "
                             f"name (classes found: {found})")
    if not callable(obj) or inspect.isclass(obj) and not issubclass(obj, nn.Module):
        what = "a class" if inspect.isclass(obj) else f"a {type(obj).__name__}"
        raise ModelLoadError(f"{name} in {where} is {what}, not an nn.Module class or a "
                             "function that returns a model (name one of those)")
    return obj


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


def instantiate(cls: Callable[..., Any], path: str | Path,
                model_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """`cls(**model_kwargs)` from the file `path`, in eval mode (see `build.build_model`)."""
    return build_model(cls, model_kwargs, path)


def load_model(path: str | Path, class_name: str | None = None,
               model_kwargs: Mapping[str, Any] | None = None) -> nn.Module:
    """Import the model's file or module, pick its class or factory, and return the model
    it builds (with `model_kwargs`) in eval mode.

    `path`: `file.py`, `file.py:NAME` or `package.module:NAME`, NAME a class or a function
    returning the model; `class_name` is NAME given apart (the CLI's --model-class).
    """
    return load_model_source(path, class_name, model_kwargs)[0]


def load_model_source(path: str | Path, class_name: str | None = None,
                      model_kwargs: Mapping[str, Any] | None = None
                      ) -> tuple[nn.Module, ModelSource]:
    """`load_model`, plus the file's bytes as imported and how the model was built."""
    target, name = split_model_ref(os.fspath(path))
    if name is not None and class_name is not None and name != class_name:
        raise ModelLoadError(f"the model is named twice, {name} in {path} and {class_name} "
                             "as the class: give the name once")
    name = name or class_name
    if is_module_path(target):
        module, source = import_module_source(target)
    else:
        module, source = import_model_source(target)
    factory = pick_factory(module, target, name)
    kwargs = dict(model_kwargs or {})
    model = build_model(factory, kwargs, source.path)
    return model, replace(source, factory=getattr(factory, "__name__", name),
                          kwargs=tuple(kwargs.items()))
