"""The package layers: analysis and the IR never import the passes built on them.

Every module of ``fusion_core/analysis`` and ``fusion_core/ir`` is parsed with ``ast`` and
each import statement in it, at module level or inside a function, is resolved to the
module it names; none may be the code generator, validation, the source map or the
reports (the pipeline hands the code generator's dry run to legality instead).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOWER_LAYERS = ("analysis", "ir")
FORBIDDEN = tuple(f"fusion_core.{p}" for p in ("codegen", "validate", "sourcemap", "report"))


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, the text of `module`
    (dotted, e.g. ``fusion_core.analysis.legality``), nested ones included. `from . import
    x` names both the package and ``package.x`` (x may be a module)."""
    package = module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _modules() -> list[Path]:
    return sorted(p for layer in LOWER_LAYERS for p in (ROOT / "fusion_core" / layer).rglob("*.py"))


def _violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).with_suffix("")
    module = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    if rel.name == "__init__":  # a package's own relative imports start from itself
        module += ".__init__"
    return [
        f"{rel}.py:{line} imports {name}"
        for line, name in imported_modules(path.read_text(), module)
        if forbidden(name)
    ]


def forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_the_resolver_sees_nested_and_relative_imports():
    source = (
        "from ..codegen.lower import dry_run\n"
        "def f():\n"
        "    from .. import report\n"
        "    import fusion_core.validate.run\n"
        "from .group import ordered\n"
    )
    names = [n for _, n in imported_modules(source, "fusion_core.analysis.legality")]
    assert "fusion_core.codegen.lower" in names
    assert "fusion_core.report" in names  # `from .. import report`, inside a function
    assert "fusion_core.validate.run" in names
    assert "fusion_core.analysis.group" in names
    assert [n for n in names if forbidden(n)] == [
        "fusion_core.codegen.lower",
        "fusion_core.codegen.lower.dry_run",
        "fusion_core.report",
        "fusion_core.validate.run",
    ]
    assert not forbidden("fusion_core.reporting") and not forbidden("fusion_core.ir.views")


def test_there_are_modules_to_check():
    names = {p.name for p in _modules()}
    assert {"legality.py", "group.py", "views.py", "iteration.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_analysis_and_ir_import_no_later_pass(path):
    assert _violations(path) == []
