"""Every cluster's kernel, generated once, with identical kernels found.

Reads an ``Analysis``; writes a ``KernelSet``: per cluster its ``codegen.Kernel`` or the one
line saying why none was generated, and for each cluster whose kernel is the same as an
earlier cluster's up to names (the 12 layers of a transformer give 12 copies of one
softmax) the cluster that has it first. The CLI hands this one set to ``--out-dir``,
validation and ``--apply``, so no step generates a kernel again, and validation loads and
checks each distinct kernel once.

"Up to names" is decided on the parsed source: docstrings dropped, and the names that
carry the cluster or graph values (the launcher, its kernel and autograd class, the
launcher's parameters) renamed by position. Any other difference (an op, a constant, a
block size, a dtype) keeps two kernels apart.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..analysis.types import Cluster
from ..names import JIT_PARTS, function_class_name, jit_function_name
from ..pipeline import Analysis

if TYPE_CHECKING:
    from ..codegen import Kernel


@dataclass(frozen=True)
class KernelSet:
    kernels: Mapping[int, Kernel]  # cluster index -> its generated kernel
    failed: Mapping[int, str]  # cluster index -> why no kernel was generated (one line)
    same_as: Mapping[int, int]  # cluster index -> earlier cluster with the same kernel

    @property
    def distinct(self) -> tuple[int, ...]:
        """Clusters whose kernel is the first of its kind, in cluster order."""
        return tuple(i for i in sorted(self.kernels) if i not in self.same_as)


def one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def build_kernels(analysis: Analysis, clusters: tuple[Cluster, ...] | None = None
                  ) -> KernelSet:
    """Generate each cluster's kernel once; a cluster that cannot be lowered gets a reason."""
    from .. import codegen

    kernels: dict[int, Kernel] = {}
    failed: dict[int, str] = {}
    for c in analysis.clusters if clusters is None else clusters:
        try:
            kernels[c.index] = codegen.generate(analysis, c)
        except codegen.LoweringError as e:  # one cluster's limit must not cost the others
            failed[c.index] = one_line(e)
    return kernel_set(kernels, failed)


def kernel_set(kernels: Mapping[int, Kernel], failed: Mapping[int, str]) -> KernelSet:
    """The set of kernels a caller already generated, identical ones found."""
    same_as: dict[int, int] = {}
    first_with: dict[str, int] = {}
    for index in sorted(kernels):
        kernel = kernels[index]
        key = same_source_key(kernel.source, kernel.name, kernel.cluster_index,
                              kernel.outputs)
        if key in first_with:
            same_as[index] = first_with[key]
        else:
            first_with[key] = index
    return KernelSet(dict(kernels), dict(failed), same_as)


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: Mapping[str, str], kernel_name: str) -> None:
        self.names = names
        self.kernel_name = kernel_name

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.names.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        _drop_docstring(node)
        return self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        _drop_docstring(node)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        # Messages and the NAME constant spell the launcher's name, and refusals quote
        # its parameters (`transpose`), which are value names too.
        if isinstance(node.value, str):
            text = node.value.replace(self.kernel_name, "K")
            node.value = re.sub(r"`([A-Za-z_]\w*)`",
                                lambda m: f"`{self.names.get(m[1], m[1])}`", text)
        return node


def _drop_docstring(node: ast.Module | ast.FunctionDef | ast.ClassDef) -> None:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]


def same_source_key(source: str, kernel_name: str, cluster_index: int,
                    outputs: tuple[str, ...] = ()) -> str:
    """A key two kernels share exactly when their sources are the same up to names; the
    results' value `outputs`, which refusals quote, count as names too."""
    tree = ast.parse(source)
    _drop_docstring(tree)
    names = {kernel_name: "K", function_class_name(cluster_index): "KFunction",
             **{jit_function_name(cluster_index, part): f"K_{part}" for part in JIT_PARTS},
             **{value: f"result{i}" for i, value in enumerate(outputs)}}
    launcher = next((n for n in tree.body if isinstance(n, ast.FunctionDef)
                     and n.name == kernel_name), None)
    if launcher is not None:  # its parameters are the graph's value names
        params = {a.arg: f"arg{i}" for i, a in enumerate(launcher.args.args)}
        names.update(params)
        # and so are the locals that load one again through another map (`q_map1`)
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else getattr(node, "arg", None)
            again = re.fullmatch(r"(.+)_map(\d+)", name) if isinstance(name, str) else None
            if again and again[1] in params and name not in names:
                names[name] = f"{params[again[1]]}_map{again[2]}"
    return ast.dump(_Renamer(names, kernel_name).visit(tree))
