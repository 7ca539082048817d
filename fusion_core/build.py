"""Build a model from a class or a factory function, with keyword arguments.

Reads the callable's signature before calling it, so a missing or misspelt argument is
one line naming the arguments (and how to give them) instead of a ``TypeError`` from
inside the constructor; whatever the call itself raises is one line too. Writes nothing.
"""

from __future__ import annotations

import functools
import inspect
import json
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch.nn as nn

from .errors import Fix, ModelLoadError

# Kinds of parameter a keyword argument can fill
NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def exit_status(e: SystemExit) -> str:
    """The process status `sys.exit(code)` asks for, as Python would set it."""
    if e.code is None or isinstance(e.code, int):
        return str(e.code or 0)
    return f"1 ({e.code})"


def user_line(exc: BaseException, path: Path) -> str:
    """`:line` of the innermost frame of `exc` in the file `path`, "" when none is."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() == path.resolve()
    ]
    return f":{frames[-1].lineno}" if frames else ""


def _unwrapped(factory: Callable[..., Any], kwargs: Mapping[str, Any]
               ) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """The function a (nested) functools.partial wraps, with every argument the call passes
    it: the partial's own first, keywords given at the call overriding its keywords."""
    args, merged = (), dict(kwargs)
    while isinstance(factory, functools.partial):
        args, merged = factory.args + args, {**factory.keywords, **merged}
        factory = factory.func
    return factory, args, merged


def label_of(factory: Callable[..., Any]) -> str:
    """How a message names the callable: its name; a functools.partial's, the function's
    it wraps (the user wrote `partial(make_moe, ...)`, never a function called `partial`)."""
    factory = _unwrapped(factory, {})[0]
    return getattr(factory, "__qualname__", None) or type(factory).__name__


def call_text(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> str:
    """The call as the user would write it: `make_moe(8, note='x')` for
    `partial(make_moe, 8, note='x')` called with no more arguments."""
    func, args, merged = _unwrapped(factory, kwargs)
    given = [*map(repr, args), *(f"{k}={v!r}" for k, v in merged.items())]
    return f"{label_of(func)}({', '.join(given)})"


def check_arguments(factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments the callable does not take, and arguments it needs that
    were not given; a callable without a readable signature is left to the call."""
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # some builtins and C extensions have none
        return
    label = label_of(factory)
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        named = [p.name for p in params if p.kind in NAMED]
        unknown = [k for k in kwargs if k not in named]
        if unknown:
            raise ModelLoadError(
                f"{label}() takes no argument {', '.join(map(repr, unknown))} "
                f"(its arguments: {', '.join(named) or 'none'})",
                Fix.MODEL_KWARGS,
            )
    missing = [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in kwargs
    ]
    if missing:
        example = dict.fromkeys(missing, "...")
        raise ModelLoadError(
            f"{label}() needs arguments ({', '.join(missing)})",
            Fix.MODEL_ARGS,
            {
                "label": label,
                "example_json": json.dumps(example).replace('"..."', "..."),
                "example_py": repr(example).replace("'...'", "..."),
            },
        )


# Raised by the constructor's code whatever its arguments: a typo, a missing import or
# attribute. Anything else (a ValueError from nn.GroupNorm, an assert on a size) is taken as
# a value the constructor rejects: the arguments are what to change first.
CODE_ERRORS = (NameError, AttributeError, ImportError, SyntaxError, NotImplementedError)


def _raised(e: Exception, shown: str, factory: Callable[..., Any], kwargs: Mapping[str, Any],
            path: str | Path | None) -> ModelLoadError:
    """The constructor's exception as one line, with the fix its cause calls for: the code
    (CODE_ERRORS), the values given, or, none given, its defaults when it has some."""
    first = (str(e).splitlines() or [""])[0]
    line = user_line(e, Path(path)) if path else ""
    at = f" at {Path(path).name}{line}" if line else ""
    problem = f"{shown} raised {type(e).__name__}: {first}{at}"
    if isinstance(e, CODE_ERRORS):
        return ModelLoadError(problem, Fix.CONSTRUCTOR_CODE) if kwargs else (
            ModelLoadError(f"{problem} (fix the constructor)"))
    if kwargs:
        return ModelLoadError(problem, Fix.MODEL_VALUES)
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        params = []
    defaults = {p.name: p.default for p in params
                if p.kind in NAMED and p.default is not p.empty}
    if not defaults:
        return ModelLoadError(f"{problem} (fix the constructor)")
    example = dict.fromkeys(defaults, "...")
    return ModelLoadError(problem, Fix.MODEL_DEFAULTS, {
        "defaults": _ran_with(factory, defaults),
        "example_json": json.dumps(example).replace('"..."', "..."),
        "example_py": repr(example).replace("'...'", "...")})


def _ran_with(factory: Callable[..., Any], defaults: Mapping[str, Any]) -> str:
    """The keyword values the constructor ran with, said by where they came from: a
    functools.partial's bound keywords are the user's values, not the function's defaults
    (its signature shows both as defaults)."""
    bound = factory.keywords if isinstance(factory, functools.partial) else {}
    groups = (("the values its partial binds", [k for k in defaults if k in bound]),
              ("its defaults", [k for k in defaults if k not in bound]))
    return " and ".join(f"{what} ({', '.join(f'{k}={defaults[k]!r}' for k in names)})"
                        for what, names in groups if names)


def build_model(
    factory: Callable[..., Any],
    model_kwargs: Mapping[str, Any] | None = None,
    path: str | Path | None = None,
) -> nn.Module:
    """`factory(**model_kwargs)` (a class or a function returning an nn.Module), in eval
    mode. `path`: the file the factory comes from, to point at its line on an exit."""
    kwargs = dict(model_kwargs or {})
    check_arguments(factory, kwargs)
    shown = call_text(factory, kwargs)
    try:
        model = factory(**kwargs)
    except SystemExit as e:
        where = f" ({Path(path).name}{user_line(e, Path(path))})" if path else ""
        raise ModelLoadError(
            f"{shown}{where} called sys.exit() (status {exit_status(e)}) while the analyzer "
            "built it: remove the exit from the constructor"
        ) from e
    except Exception as e:  # noqa: BLE001 - whatever the user's constructor raises
        raise _raised(e, shown, factory, kwargs, path) from e
    if not isinstance(model, nn.Module):
        raise ModelLoadError(
            f"{shown} returned {type(model).__name__}, not an nn.Module "
            "(name a class, or a function that returns the model)"
        )
    return model.eval()
