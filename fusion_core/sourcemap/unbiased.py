"""A layer's call spelled without its bias, for a kernel that adds the bias itself.

Reads the user's file (its imports) and the layer a call names; writes nothing. On a GPU
target the bias passes (``ir/conv_bias.py``, ``ir/linear_bias.py``) split a biased
convolution or linear into a bias-free call and an ``add`` that joins the next kernel, as
Inductor does. The source's `self.conv1(x)` adds the bias itself, so an edit keeping it
as the kernel's argument would add it twice: the edit spells the call bias-free instead
(`F.conv2d(x, self.conv1.weight, None, self.conv1.stride, ...)`) and passes the bias to
the kernel. ``unify_calls.py`` applies the rule; ``NotSpelled`` says why it cannot.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

import torch.nn as nn

from ..ir.bias_split import hooked


class NotSpelled(Exception):
    """Why no bias-free spelling computes the layer's call."""


# The layers whose one-argument forward is exactly the functional call below, by class.
_FUNCTIONS: dict[type[nn.Module], str] = {
    nn.Conv1d: "conv1d", nn.Conv2d: "conv2d", nn.Conv3d: "conv3d", nn.Linear: "linear",
}
_FORWARDS = ("forward", "_conv_forward")  # what a subclass may redefine (timm's Conv2dSame)


def _function(layer: nn.Module) -> tuple[str | None, str | None]:
    """(the function computing `layer`'s call, the method of its class that replaces its
    base's forward): a subclass keeping both methods (`class MyConv(nn.Conv2d): pass`, a
    parametrized layer) computes the same call."""
    cls = type(layer)
    for base, name in _FUNCTIONS.items():
        if isinstance(layer, base):
            own = next((m for m in _FORWARDS if getattr(cls, m, None) is not getattr(
                base, m, None)), None)
            return (name, None) if own is None else (None, own)
    return None, None


def functional_name(tree: ast.Module, shadowed: Collection[str] = ()
                    ) -> tuple[str, str | None]:
    """How the file names `torch.nn.functional` (`F`, `nn.functional`, in full), and the
    import line an edit must add when none of its imports reaches it. `shadowed`: the names
    the edited function binds itself (`B, C, F, H, W = x.shape`), which no spelling uses."""
    found: list[tuple[int, str]] = []
    for st in tree.body:  # the module's own imports: those every function sees
        if isinstance(st, ast.Import):
            for a in st.names:
                if a.name == "torch.nn.functional" and a.asname:
                    found.append((0, a.asname))
                elif a.name == "torch.nn" and a.asname:
                    found.append((1, f"{a.asname}.functional"))
                elif a.name.split(".")[0] == "torch" and not a.asname:
                    found.append((2, "torch.nn.functional"))  # `import torch` binds `torch`
        elif isinstance(st, ast.ImportFrom) and st.level == 0:
            for a in st.names:
                if st.module == "torch.nn" and a.name == "functional":
                    found.append((0, a.asname or "functional"))
                elif st.module == "torch" and a.name == "nn":
                    found.append((1, f"{a.asname or 'nn'}.functional"))
    found = [f for f in found if f[1].split(".")[0] not in shadowed]
    if found:
        return min(found)[1], None
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))} | {
        (a.asname or a.name).split(".")[0] for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    if "F" not in taken:
        return "F", "import torch.nn.functional as F"
    return "torch.nn.functional", "import torch"


# Transposed convolutions are refused, with the spelling that applies (their arguments'
# order differs: output_padding, groups, then dilation).
_TRANSPOSED: dict[type[nn.Module], str] = {
    nn.ConvTranspose1d: "conv_transpose1d", nn.ConvTranspose2d: "conv_transpose2d",
    nn.ConvTranspose3d: "conv_transpose3d",
}


def _broadcast(ones: int) -> str:
    """The bias reshaped against (N, C, *spatial): `.reshape(-1, 1, 1)` for 2 spatial dims."""
    return f".reshape(-1{', 1' * ones})" if ones else ""


def unbiased_call(layer: nn.Module, func: str, arg: str, functional: str) -> str:
    """`func(arg)` (the source's `self.conv1(x)`, `layer` the module it names) without its
    bias, as `functional` spells the module's function; raises ``NotSpelled``."""
    name, own = _function(layer)
    if own is not None:
        raise NotSpelled(f"`{func}` is a {type(layer).__name__}, whose class defines its own "
                         f"`{own}`: an edit spells without its bias only a Conv1d, Conv2d, "
                         "Conv3d or Linear, or a subclass that keeps their forward")
    if name is None:
        why = (f"`{func}` is a {type(layer).__name__}, and an edit spells a call without its "
               "bias only for a Conv1d, Conv2d, Conv3d or Linear")
        transposed = _TRANSPOSED.get(type(layer))
        if transposed is not None and getattr(layer, "bias", None) is not None:
            ones = layer.weight.dim() - 2
            why += (f"; to apply, add the bias in your code: `{functional}.{transposed}({arg}, "
                    f"{func}.weight, None, {func}.stride, {func}.padding, {func}.output_padding,"
                    f" {func}.groups, {func}.dilation) + {func}.bias{_broadcast(ones)}`")
        raise NotSpelled(why)
    kind = hooked(layer)
    if kind is not None:  # a module call runs them; the function below would not
        raise NotSpelled(f"`{func}` has a {kind} registered, which would not run if an edit "
                         f"called `{functional}.{name}` in its place")
    if name == "linear":
        return f"{functional}.linear({arg}, {func}.weight)"
    mode = getattr(layer, "padding_mode", "zeros")
    if mode != "zeros":  # its forward pads first: F.conv2d alone would not
        raise NotSpelled(f"`{func}` pads with padding_mode={mode!r}, which `{functional}."
                         f"{name}` does not: an edit spells without its bias only a "
                         "convolution with padding_mode='zeros'")
    return (f"{functional}.{name}({arg}, {func}.weight, None, {func}.stride, {func}.padding, "
            f"{func}.dilation, {func}.groups)")


def bias_apart(call: ast.Call, ones: int) -> str:
    """`F.conv2d(x, w, b, padding=1)`, a function given its bias, as the spelling whose add
    a kernel can take: `F.conv2d(x, w, None, padding=1) + b.reshape(-1, 1, 1)` (`ones`:
    the bias' dims of 1 in the graph); "" when the call names no bias."""
    bare = ast.Call(call.func, list(call.args), [ast.keyword(k.arg, k.value)
                                                 for k in call.keywords])
    bias: ast.expr | None = None
    if len(bare.args) > 2:  # F.linear, F.conv*: (input, weight, bias, ...)
        bias, bare.args[2] = bare.args[2], ast.Constant(None)
    for k in bare.keywords:
        if k.arg == "bias":
            bias, k.value = k.value, ast.Constant(None)
    if bias is None or isinstance(bias, ast.Starred):
        return ""
    text = ast.unparse(bias)
    if not isinstance(bias, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        text = f"({text})"  # `(self.b * 2.0).reshape(...)`, `+ (b if c else d)`
    return (f"; to apply, add the bias in your code: `{ast.unparse(bare)} + "
            f"{text}{_broadcast(ones)}`")
