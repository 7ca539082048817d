"""Ops and values named the way the user wrote them, for every message.

The graph's node names (`add_6`, `getitem_3`, `output`) and torch.export's overloads
(`cat.default`) are words the user never wrote. ``said`` names a value by its op and line
(`add` (line 61), `torch.cat` (line 40)), a parameter or buffer by its attribute path
(`self.bn.running_mean`), what a torch layer computes by the layer's call (`self.bn`
(line 12)); ``aten_call`` finds the call an exported aten op came from on its source line;
``return_loc`` finds the `return` that hands back the model's results, so the output node
(FX records no frame for it) is named by that line. ``place`` says a line: bare (`line 61`)
in a model written in one file, with its file (`blocks.py:61`) in one whose ops span several,
where a bare number would not say which file it is in.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import re
from collections.abc import Collection, Iterable

from ..names import module_written, written
from ..source_trees import parse_source
from .graph import FusionGraph, Node, OpKind, SourceLoc

# Dotted prefixes that name a module rather than a value: `torch.cat(…)`, `F.relu(…)`.
_MODULE_HEADS = ("torch", "F", "nn", "functional")
# Attributes the capture makes for a tensor a forward creates (`torch.tensor([2.0])`): FX's
# `_tensor_constant0`, torch.export's `lifted_tensor_0`; no path the user wrote.
_MADE_CONSTANT = re.compile(r"_?(tensor_constant|lifted_tensor(_constant)?)_?\d+")
# torch's sub-namespaces whose builtins are named with the namespace as a prefix:
# `torch.special.expit` is the builtin `special_expit`, and aten's op of that name.
_NAMESPACES = ("special", "linalg", "fft")


def namespaced(name: str) -> str:
    """`special.expit` for the builtin or aten name `special_expit`; other names as given."""
    head, _, rest = name.partition("_")
    return f"{head}.{rest}" if head in _NAMESPACES and rest else name


def spelled_op(node: Node) -> str:
    """The op as the user called it: `self.proj1` for a layer, `torch.roll` for a call we do
    not fuse (its registry op is only "opaque"), else the op (`add`, not `add_6`)."""
    if node.target.startswith("self."):
        return written(node.target)
    if (values := _max_values(node)) is not None:
        return values
    if node.kind in (OpKind.OPAQUE, OpKind.INPLACE) and node.op != "meta" and node.target:
        return node.target
    if node.target.startswith(".") and node.target[1:].removesuffix("()") != node.op:
        return node.target  # a method spelled otherwise than its op: `.half()` is a `to`
    return node.op


def _max_values(node: Node) -> str | None:
    """`torch.max(x, 1)[0]`, `x.max(1).values` or `x.min(1)` as its line spells it, where the
    capture made that max or min over a dim an `amax`/`amin` (ir/max_values.py): the user
    wrote no `amax`. None where the line holds no one such expression."""
    name = node.target.removeprefix("torch.").removeprefix(".").removesuffix("()")
    if node.op not in ("amax", "amin") or name not in ("max", "min") or node.source is None:
        return None
    code = node.source.code
    tree = _parsed(code)
    if tree is None:  # a line that is no statement on its own (a call's first line)
        return None
    calls = [e for e in ast.walk(tree) if isinstance(e, ast.Call) and name == (
        e.func.attr if isinstance(e.func, ast.Attribute) else getattr(e.func, "id", ""))]
    reads = [e for e in ast.walk(tree) if (
        isinstance(e, ast.Attribute) and e.attr == "values"
        or isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Constant)
        and e.slice.value == 0) and e.value in calls]
    return _only({ast.get_source_segment(code, e) for e in reads or calls})


def place(g: FusionGraph, loc: SourceLoc) -> str:
    """`line 61`, or `blocks.py:61` where the model's ops are in several files: messages
    (the pytest plugin's above all, quoting them amid other files) then say which one."""
    files = g.source_files
    if len(files) < 2 and loc.file in files:
        return f"line {loc.line}"
    base = os.path.basename(loc.file)
    unique = [os.path.basename(f) for f in files].count(base) <= 1
    return f"{base if unique else loc.file}:{loc.line}"


def said(g: FusionGraph, name: str) -> str:
    """A graph value as the user wrote it, with its line where it has one."""
    node = g[name]
    src = node.source
    if node.kind is OpKind.OUTPUT:
        ret = return_loc(g, node.refs)
        return "the model's result" + (f", returned at {place(g, ret)}" if ret else "")
    if node.op == "meta" and src is not None:
        return f"a shape, size or dtype read at {place(g, src)} (`{src.code}`)"
    if node.kind is OpKind.CONSTANT:
        return _attribute(g, node)
    if node.kind is OpKind.INPUT:
        return f"`{node.label}`"  # the forward's parameter
    where, op = place(g, src) if src else "", spelled_op(node)
    if op.startswith("self."):  # a layer's call: by the variable that called it, if one did
        return layer_said(node.target.removeprefix("self."), src, where)
    layer, alone = _layer_called(g, node, where)
    if layer:
        return layer if alone else f"`{op}` in {layer}"
    if node.kind is OpKind.INPLACE and src is not None and f".{node.op}(" not in src.code and (
            written_ := item_assignment(src.code)):
        return f"`{written_}` ({where})"  # `a[:, 0] = 1.0`, exported as `fill_`
    sliced = (_subscript(src.code) if node.kind is OpKind.VIEW and src is not None
              and node.op in ("getitem", "slice", "select") else None)
    if sliced is None and node.kind is OpKind.VIEW and node.op == "getitem" and node.refs:
        return f"a piece of {said(g, node.refs[0])}"  # `a, b = h.chunk(2)`: no subscript
    return (sliced or f"`{op}`") + (f" ({where})" if where else "")


def subscript_written(code: str) -> str | None:
    """The subscript a line writes, unquoted (`hs[0]`), where it writes exactly one; None
    otherwise (the graph records lines, not columns)."""
    return _only(_subscripts(code))


def item_assignment(code: str) -> str | None:
    """The line where it is one statement assigning into subscripts (`a[:, 0] = 1.0`,
    `a[..., :2] *= 0.5`), else None."""
    tree = _parsed(code.strip())
    stmt = tree.body[0] if tree is not None and len(tree.body) == 1 else None
    targets = (stmt.targets if isinstance(stmt, ast.Assign) else
               [stmt.target] if isinstance(stmt, ast.AugAssign) else [])
    return code.strip() if targets and all(isinstance(t, ast.Subscript) for t in targets) \
        else None


def method_written(code: str, methods: Collection[str]) -> str | None:
    """The call of one of `methods` a line writes, from its dot (`.to("cpu")`), where it
    writes exactly one on the line; None otherwise (the graph records lines, not columns)."""
    tree = _parsed(code)
    if tree is None:
        return None
    raw = code.encode()  # ast's columns count UTF-8 bytes
    return _only({raw[e.func.value.end_col_offset:e.end_col_offset].decode().lstrip(") \t")
                  for e in ast.walk(tree)
                  if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)
                  and e.func.attr in methods and e.end_lineno == e.func.value.end_lineno == 1})


def _only(found: set[str]) -> str | None:
    return found.pop() if len(found) == 1 else None


def _subscripts(code: str) -> set[str]:
    tree = _parsed(code)
    if tree is None:
        return set()
    return {ast.get_source_segment(code, e) for e in ast.walk(tree)
            if isinstance(e, ast.Subscript)}


def _subscript(code: str) -> str | None:
    """A subscript as the line writes it (`` `x[..., :half]` ``, `` `hs[0]` ``); "a slice"
    where the line has several (the graph records no column to tell them apart); None where
    it has none."""
    found = _subscripts(code)
    return f"`{found.pop()}`" if len(found) == 1 else "a slice" if found else None


def layer_said(path: str, loc: SourceLoc | None, where: str = "") -> str:
    """A module (`blocks.1`) as the user reaches it, `self.blocks[1]`; where line `loc` calls
    it otherwise, by that spelling first: through a variable (`for blk in self.blocks:
    x = blk(x)`: `blk` (`self.blocks[1]`)), or from inside its parent's forward (`self.qkv`
    (`self.blocks[0].attn.qkv`)). `where` (`line 23`) joins the parenthesis."""
    full = module_written(path)
    spelled = _called(path, loc) if loc is not None else None
    if spelled and spelled != full:
        return f"`{spelled}` (`{full}`{', ' + where if where else ''})"
    return f"`{full}`" + (f" ({where})" if where else "")


def _attribute(g: FusionGraph, node: Node) -> str:
    """A get_attr value by the path its target holds (`self.down[1].weight`; the node's name,
    `down_1_weight`, is no Python); a tensor the forward made by the line that made it."""
    if not _MADE_CONSTANT.fullmatch(node.target):
        return f"`{module_written(node.target)}`" if node.target else f"`{node.name}`"
    # export records no frame for its lifted constant: its reader's line is where it was made
    src = node.source or next((s for u in g.users[node.name] if (s := g[u].source)), None)
    return f"a tensor made at {place(g, src)}" if src else "a tensor the forward makes"


def _layer_called(g: FusionGraph, node: Node, where: str) -> tuple[str, bool]:
    """(`self.bn` (line 12), alone) where `node` is computed by a torch layer's call on its
    line (`d = self.bn(x)`): the layer's forward is torch's, so its op (`batch_norm`) sits at
    a line that spells no `batch_norm`. `alone`: the only op the call ran. ("", False) where
    the line does not call the node's module."""
    src = node.source
    if not node.module or src is None or _called(node.module, src) is None:
        return "", False
    ran = [m for m in g.nodes if m.module == node.module and m.source == src
           and m.kind not in (OpKind.INPUT, OpKind.CONSTANT, OpKind.OUTPUT)]
    return layer_said(node.module, src, where), len(ran) == 1


def _called(path: str, loc: SourceLoc) -> str | None:
    """The text line `loc` calls the module at `path` by: its path (`self.blocks[0].ln`),
    the path from the block whose forward the line is in on (`self.ln`), or a variable
    (`called_as`); None where the line does not call it."""
    parts = path.split(".")
    tails = (written("self." + ".".join(parts[i:])) for i in range(len(parts)))
    return next((t for t in tails if _calls(t, loc.code)), None) or called_as(path, loc)


def _calls(callee: str, code: str) -> bool:
    """Whether `code` calls `callee` (`self.norm(`, `blk(`), not an attribute of it."""
    return re.search(rf"(?<![\w.]){re.escape(callee)}\s*\(", code) is not None


def called_as(path: str, loc: SourceLoc) -> str | None:
    """How line `loc` calls the module at `path` (`blocks.1`) where no literal index names
    it: `blk`, the variable of a for loop over its container (`for blk in self.blocks:`,
    also through `enumerate`, `zip`, `reversed` and a slice), or `self.blocks[i]`, indexed
    by a variable; `blk.attn` for `blocks.1.attn` called as `blk.attn(…)`. None where the
    line writes its path (`self.blocks[1](x)`) or does not call it."""
    parts = path.split(".")
    tree = _tree(loc.file) if any(p.isdigit() for p in parts) else None
    loops = [names for start, end, names in (_loops(tree) if tree is not None else ())
             if start < loc.line <= end]
    for i in (i for i in reversed(range(len(parts))) if parts[i].isdigit()):
        container = module_written(".".join(parts[:i]))
        rest = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts[i + 1:])
        indexed = re.search(rf"(?<![\w.]){re.escape(container)}\[([^\[\]]+)\]"
                            rf"{re.escape(rest)}(?=\s*\()", loc.code)
        if indexed and not indexed.group(1).strip().isdigit():
            return indexed.group(0)
        for names in loops:
            for var, over in names:
                if over == container and _calls(var + rest, loc.code):
                    return var + rest
    return None


@functools.lru_cache(maxsize=16)
def _loops(tree: ast.Module) -> tuple[tuple[int, int, tuple[tuple[str, str], ...]], ...]:
    """(first line, last line, (variable, what it walks) pairs) of each for loop of a file:
    walked once per file, not once per op `said` names."""
    return tuple((loop.lineno, loop.end_lineno or loop.lineno,
                  tuple((v, ast.unparse(over)) for v, over in _iterated(loop.target, loop.iter)))
                 for loop in ast.walk(tree) if isinstance(loop, (ast.For, ast.AsyncFor)))


def _iterated(target: ast.expr, over: ast.expr) -> Iterable[tuple[str, ast.expr]]:
    """(variable, what it walks) of a for loop: `blk` and `self.blocks` of `for blk in
    self.blocks`, of `for i, blk in enumerate(self.blocks)` and of `zip`'s pairs."""
    call = over if isinstance(over, ast.Call) and isinstance(over.func, ast.Name) else None
    if isinstance(target, ast.Name):
        if call is not None and call.func.id == "reversed" and len(call.args) == 1:
            yield from _iterated(target, call.args[0])
        elif isinstance(over, ast.Subscript) and isinstance(over.slice, ast.Slice):
            yield target.id, over.value  # `for blk in self.blocks[1:]`
        else:
            yield target.id, over
    elif isinstance(target, ast.Tuple) and call is not None:
        if call.func.id == "enumerate" and len(target.elts) == 2 and call.args:
            yield from _iterated(target.elts[1], call.args[0])
        elif call.func.id == "zip" and len(target.elts) == len(call.args):
            for t, a in zip(target.elts, call.args, strict=True):
                yield from _iterated(t, a)


def said_all(g: FusionGraph, names: Iterable[str]) -> str:
    """Several values, each once: `h.shape[-1]` read twice on a line is one phrase."""
    return ", ".join(dict.fromkeys(said(g, n) for n in names))


def aten_call(packet: str, code: str) -> str:
    """The call on `code` (the source line) that an exported `aten.<packet>` came from:
    `torch.cat`, `F.silu`, `.add_()` for a method; the bare op where the line spells it
    otherwise (`a + b` is `add`)."""
    packet = namespaced(packet)  # `torch.special.erfinv(…)` is `aten.special_erfinv`
    for m in re.finditer(rf"(?<![\w.])((?:[A-Za-z_]\w*\.)*){re.escape(packet)}\s*\(", code):
        prefix = m.group(1)
        if not prefix:
            return packet  # `from torch import cat`
        if prefix.split(".")[0] in _MODULE_HEADS:
            # torch.nn.functional as FX's targets spell it, so both frontends say `F.gelu`
            return re.sub(r"^(torch\.)?(nn\.)?functional\.", "F.", prefix) + packet
        return f".{packet}()"
    return packet


def return_loc(g: FusionGraph, results: Iterable[str]) -> SourceLoc | None:
    """The `return` of the model's forward that hands back `results` (node names): the
    first one after the lines that computed them, in the function their outermost frame
    ran in. None where no result has a line (the model returns its input)."""
    frames = [s.chain[0] for r in results if (s := g[r].source) is not None]
    if not frames:
        return None
    top = max(frames, key=lambda f: f.line)
    tree = _tree(top.file)
    for fn in ast.walk(tree) if tree is not None else ():
        if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == top.function
                and fn.lineno <= top.line <= (fn.end_lineno or fn.lineno)):
            rets = sorted((r for r in _own_returns(fn) if r.lineno >= top.line),
                          key=lambda r: r.lineno)
            if rets:
                line = rets[0].lineno
                code = linecache.getline(top.file, line).strip()
                return SourceLoc(top.file, line, top.function, code)
    return None


def _tree(file: str) -> ast.Module | None:
    """The file as it is now: a plugin session outlives edits of the model file."""
    linecache.checkcache(file)
    try:
        return parse_source("".join(linecache.getlines(file)), file)
    except (SyntaxError, ValueError):
        return None


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> ast.Module | None:
    """A recorded line's code, parsed once."""
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _own_returns(fn: ast.AST) -> Iterable[ast.Return]:
    """The `return`s of `fn` itself, not of functions or lambdas defined inside it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Return):
            yield n
        elif not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                ast.ClassDef)):
            todo += ast.iter_child_nodes(n)
