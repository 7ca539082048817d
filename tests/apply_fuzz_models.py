"""Random small model files for the --apply fuzz test (test_apply_fuzz.py), one per seed.

Each forward mixes the spellings users write: `F.relu(x)`, `torch.relu(x)`, `x.relu()`,
activation modules (`nn.ReLU(inplace=True)`, `nn.GELU()`, ...), LayerNorm, BatchNorm1d and
Linear calls, arithmetic with constants, in-place ops (`x.add_(y)`, `x *= 2.0`),
parenthesised multi-line expressions with comments, names rebound and read twice, softmax
and mean reductions, views split and merged back, numbers computed from sizes, helper
methods (also called with one tensor twice), a module-level function, a loop over layers,
branches (`if self.flag:` and one FX cannot trace), comments and blank lines, and a return
of one value or a tuple. Seeded: `make_model(seed)` always gives the same file.
"""

from __future__ import annotations

import random

# Modules the widened forwards also call: `kind -> constructor` ({d}: the last dim).
WIDE_MODS = {"lnx": "nn.LayerNorm({d}, elementwise_affine=False)", "rms": "nn.RMSNorm({d})",
             "seq": "nn.Sequential(nn.LayerNorm({d}), nn.GELU())", "blk": "Block({d})",
             "scl": "Scale()", "p": "nn.Parameter(torch.randn({d}))"}

ACTS = {"relu": "nn.ReLU()", "relu_ip": "nn.ReLU(inplace=True)", "gelu": "nn.GELU()",
        "silu": "nn.SiLU()", "sigmoid": "nn.Sigmoid()", "tanh": "nn.Tanh()",
        "gelu_tanh": "nn.GELU(approximate='tanh')"}


class Gen:
    """Builds one forward: its lines, the modules it calls and its helper methods."""

    def __init__(self, rng: random.Random, dims: tuple[int, ...], inputs: list[str]) -> None:
        self.rng, self.dims, self.inputs = rng, dims, inputs
        self.mods: dict[str, str] = {}  # attribute -> constructor text
        self.live: list[str] = list(inputs)  # names holding a tensor of the input's shape
        self.helpers: list[str] = []  # helper methods' source
        self.lines: list[str] = []  # forward's body, unindented

    @property
    def d(self) -> int:
        return self.dims[-1]

    def module(self, kind: str) -> str:
        same = [n for n, v in self.mods.items() if n.startswith(kind)]
        if same and self.rng.random() < 0.3:
            return "self." + self.rng.choice(same)
        name = f"{kind}{len(same)}"
        if kind == "ln":
            self.mods[name] = f"nn.LayerNorm({self.d})"
        elif kind == "bn":
            self.mods[name] = f"nn.BatchNorm1d({self.dims[1]})"
        elif kind == "fc":
            self.mods[name] = f"nn.Linear({self.d}, {self.d})"
        elif kind in WIDE_MODS:
            self.mods[name] = WIDE_MODS[kind].format(d=self.d)
        else:
            self.mods[name] = ACTS[self.rng.choice(sorted(ACTS))]
        return "self." + name

    def leaf(self) -> str:
        if self.rng.random() < 0.7:  # recent values: fewer dead statements
            return self.rng.choice(self.live[-3:])
        return self.rng.choice(self.live)

    def atom(self, e: str) -> str:
        return e if e.replace("_", "").replace(".", "").isalnum() or e.endswith(")") and \
            _balanced_call(e) else f"({e})"

    def expr(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.25:
            return self.leaf()
        k = r.random()
        if k < 0.35:
            e = self.expr(depth - 1)
            spell = r.choice(["F.relu({})", "torch.relu({})", "{a}.relu()", "F.gelu({})",
                              "torch.sigmoid({})", "{a}.sigmoid()", "torch.tanh({})",
                              "F.silu({})", "ACT", "ACT", "{a}.exp().clamp(max=4.0)",
                              "torch.abs({})", "-{a}", "{a}.neg()", "{a}.clamp(-1.0, 1.0)",
                              "F.leaky_relu({}, 0.1)", "F.layer_norm({}, (D,))",
                              "{a}.float()", "torch.where({a} > 0, {a}, {a} * 0.1)",
                              "{a}.contiguous()", "{a}.clone()", "DROP",
                              "F.relu({}, inplace=True)", "F.softplus({})", "F.elu({})",
                              "F.hardswish({})", "torch.erf({})", "{a}.pow(2)",
                              "torch.clamp({}, min=0.0)", "F.normalize({}, dim=-1)",
                              "F.log_softmax({}, dim=-1)", "{a}.square()", "F.relu6({})",
                              "{a} * PARAM", "{a} * PARAM + PARAM", "MOD",
                              "{a}.masked_fill({a} > 0.5, 0.0)", "({a} > 0).float() * {a}",
                              "torch.sign({a}) * {a}.abs().sqrt()", "{a}.floor()",
                              "{a}.flip(-1)", "{a}.roll(1, -1)", "{a}.cumsum(-1) * 0.1",
                              "torch.cat([{a}[..., :HALF], {a}[..., HALF:] * 2.0], -1)"])
            spell = spell.replace("HALF", str(self.d // 2))
            if "PARAM" in spell:  # each a parameter of the last dim's size, maybe shared
                out = spell.format(a=self.atom(e))
                while "PARAM" in out:
                    out = out.replace("PARAM", self.module("p"), 1)
                return out
            if spell == "MOD":
                return f"{self.module(r.choice(['lnx', 'rms', 'seq', 'blk', 'scl']))}({e})"
            if spell == "ACT":
                return f"{self.module('act')}({e})"
            if spell == "DROP":
                self.mods.setdefault("drop", "nn.Dropout(0.1)")
                return f"self.drop({e})"
            return spell.replace("D", str(self.d)).format(e, a=self.atom(e))
        if k < 0.65:
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            op = r.choice(["{a} + {b}", "{a} * {b}", "{a} - {b}", "{a} * 2.0 + {b}",
                           "{a} * 0.5", "{a} + 1.0", "{a} / 2.0", "2.0 * {a} - {b}",
                           "torch.add({a}, {b}, alpha=2.0)", "{a}.mul({b})",
                           "torch.maximum({a}, {b})", "{a}.sub({b})",
                           "torch.where({a} > {b}, {a}, {b})", "{a}.add({b}, alpha=0.5)",
                           "torch.addcmul({a}, {a}, {b}, value=0.5)", "{a} ** 2 + {b}",
                           "{a}.div({b}.abs() + 1.0)", "torch.lerp({a}, {b}, 0.3)",
                           "blend({a}, {b})"])
            return op.format(a=self.atom(a), b=self.atom(b))
        if k < 0.8:
            e = self.expr(depth - 1)
            a = self.atom(e)
            return r.choice([f"{a}.softmax(-1)", f"F.softmax({e}, dim=-1)",
                             f"torch.softmax({e}, dim=-1)", f"{a} - {a}.mean(-1, keepdim=True)",
                             f"{a} * {a}.mean(-1, keepdim=True)",
                             f"{a} - {a}.amax(-1, keepdim=True)",
                             f"{a} * torch.rsqrt({a}.pow(2).mean(-1, keepdim=True) + 1e-6)",
                             f"{a} - torch.logsumexp({a}, -1, keepdim=True)",
                             f"{a} * {a}.var(-1, keepdim=True)",
                             f"{a} - {a}.mean(dim=-1, keepdim=True)",
                             f"{a} / {a}.abs().sum(-1, keepdim=True).clamp(min=1.0)",
                             f"{a} - {a}.max(-1, keepdim=True).values",
                             f"{a} - torch.max({a}, -1, keepdim=True)[0]",
                             f"{a} / ({a}.norm(dim=-1, keepdim=True) + 1e-6)",
                             f"{a} * {a}.std(-1, keepdim=True)"])
        e = self.expr(depth - 1)
        kind = r.choice(["ln", "ln", "bn", "fc", "fc"])
        return f"{self.module(kind)}({e})"

    def target(self) -> str:
        if self.rng.random() < 0.5:
            return self.rng.choice(self.live)
        name = self.rng.choice(["h", "a", "b", "t", "u", "z", "y2", "out"]) + \
            str(self.rng.randrange(3))
        return name

    def assign(self, v: str, e: str) -> None:
        r = self.rng
        if r.random() < 0.15 and (" + " in e or " * " in e):  # multi-line in parentheses
            op = " + " if " + " in e else " * "
            head, _, tail = e.partition(op)
            if head.count("(") == head.count(")"):
                note = "  # part two" if r.random() < 0.4 else ""
                self.lines += [f"{v} = (", f"    {head}{note}", f"    {op.strip()} {tail}",
                               ")"]
                self._bind(v)
                return
        self.lines.append(f"{v} = {e}")
        self._bind(v)

    def _bind(self, *names: str) -> None:
        for v in names:
            if v not in self.live:
                self.live.append(v)

    def statement(self) -> None:
        r = self.rng
        k = r.random()
        if k < 0.06:
            self.lines.append(r.choice(["# a comment in forward", "", "# TODO: keep me"]))
        elif k < 0.14:
            v, w = self.leaf(), self.leaf()
            self.lines.append(r.choice([f"{v}.add_({w})", f"{v}.mul_(0.5)", f"{v}.relu_()",
                                        f"{v} += {w}", f"{v} *= 2.0", f"{v}.sigmoid_()"]))
        elif k < 0.22:
            self._view_block()
        elif k < 0.28 and len(self.helpers) < 2:
            self._helper()
        elif k < 0.32:
            v = self.leaf()
            self.lines.append(f"{v} = {self.module('act')}({v})")
        elif k < 0.36:  # a Python number from a size, read in the fused lines
            n = f"s{len(self.lines)}"
            self.lines.append(r.choice([f"{n} = {self.leaf()}.size(-1) ** -0.5",
                                        f"{n} = 1.0 / {self.leaf()}.shape[0]",
                                        f"{n} = {self.leaf()}.shape[-1]"]))
            self.assign(self.target(), f"{self.atom(self.expr(1))} * {n}")
        elif k < 0.40 and self.helpers:  # a helper again, on other arguments
            self.assign(self.target(), f"self.mix{r.randrange(len(self.helpers))}("
                                       f"{self.leaf()}, {self.expr(1)})")
        elif k < 0.43:
            self.assign(self.target(), f"gate({self.expr(1)})")
        elif k < 0.46:
            v = self.leaf()
            self.mods.setdefault("blocks", f"nn.ModuleList(nn.LayerNorm({self.d}) "
                                           "for _ in range(2))")
            self.lines += ["for blk in self.blocks:",
                           f"    {v} = {r.choice(['torch.relu', 'F.gelu'])}(blk({v})) + {v}"]
        elif k < 0.49:
            v = self.leaf()
            self.mods.setdefault("flag", "True")
            cond = r.choice([f"{v}.dim() >= 2", "self.flag"])
            self.lines += [f"if {cond}:", f"    {v} = {self.expr(2)}"]
        elif k < 0.51 and self.helpers:  # one tensor for both parameters
            v = self.leaf()
            self.assign(self.target(), f"self.mix{r.randrange(len(self.helpers))}({v}, {v})")
        elif k < 0.62:
            self._wide_statement()
        else:
            self.assign(self.target(), self.expr(r.randint(1, 3)))

    def _wide_statement(self) -> None:
        """Statement forms beyond `name = expr`: annotations, unpacking, chained targets,
        in-place activations, `with`, semicolons, continuations, conditional expressions,
        chunk and cat, keyword helper calls, `del`, item assignment."""
        r = self.rng
        v, w = self.leaf(), self.leaf()
        k = r.randrange(14)
        if k == 0:
            t = self.target()
            self.lines.append(f"{t}: torch.Tensor = {self.expr(2)}")
            self._bind(t)
        elif k == 1:
            a, b = self.target(), self.target()
            if a != b:
                self.lines.append(f"{a}, {b} = {self.expr(1)}, {self.expr(1)}")
                self._bind(a, b)
        elif k == 2:
            a, b = self.target(), self.target()
            self.lines.append(f"{a} = {b} = {self.expr(2)}")
            self._bind(a, b)
        elif k == 3:
            self.lines.append(r.choice([f"{v} = F.relu({v}, inplace=True)", f"torch.relu_({v})",
                                        f"{v}.clamp_(min=-1.0)", f"{v} -= {w}", f"{v} /= 2.0",
                                        f"{v}.mul_({w}).add_(1.0)", f"F.silu({v}, inplace=True)",
                                        f"{v}.tanh_()"]))
        elif k == 4:
            t = self.target()
            self.lines += ["with torch.no_grad():", f"    {t} = {self.expr(2)}"]
            self._bind(t)
        elif k == 5:
            a, b = self.target(), self.target()
            self.lines.append(f"{a} = {self.expr(1)}; {b} = {self.expr(1)}")
            self._bind(a, b)
        elif k == 6:
            t = self.target()
            self.lines += [f"{t} = {self.atom(self.expr(1))} * 2.0 + \\",
                           f"    {self.atom(self.expr(1))}"]
            self._bind(t)
        elif k == 7:
            self.mods.setdefault("flag", "True")
            self.assign(self.target(), f"{self.atom(self.expr(1))} if self.flag else "
                                       f"{self.atom(self.expr(1))}")
        elif k == 8 and self.d % 2 == 0:
            p, q = f"p{len(self.lines)}", f"q{len(self.lines)}"
            self.lines.append(f"{p}, {q} = {v}.chunk(2, dim=-1)")
            self.assign(self.target(), f"torch.cat([{p} * 2.0, F.gelu({q})], dim=-1)")
        elif k == 10 and len(self.live) > len(self.inputs) + 1:
            gone = r.choice(self.live[len(self.inputs):-1])  # never the newest: it returns
            self.lines.append(f"del {gone}")
            self.live.remove(gone)
        elif k == 11:
            self.lines.append(f"{v}[..., 0] = {r.choice(['0.0', '1.5'])}")
        elif k == 12:  # a branch the trace skips (flag is True); the check also runs it
            self.mods.setdefault("flag", "True")
            self.lines += ["if not self.flag:", "    " + r.choice(
                [f"{v} += {w}", f"{v} = {self.expr(1)}", f"{v}.mul_(0.5)"])]
        elif k == 9 and self.helpers:
            self.assign(self.target(), f"self.mix{r.randrange(len(self.helpers))}"
                                       f"({v}, b={self.expr(1)})")
        else:
            self.assign(self.target(), f"{self.module('blk')}({v}) * 0.5 + {w}")

    def _view_block(self) -> None:
        r = self.rng
        src = self.leaf()
        t = f"t{len(self.lines)}"
        if len(self.dims) == 3:
            self.lines.append(f"{t} = {src}.transpose(1, 2)")
            self.lines.append(f"{t} = {r.choice(['F.gelu', 'torch.tanh', 'torch.relu'])}({t})"
                              f" * 2.0")
            self.assign(self.target(), f"{t}.transpose(1, 2) + {self.leaf()}")
        else:
            view = r.choice([f"{src}.view({src}.size(0), -1, 4)",
                             f"{src}.reshape({src}.shape[0], 4, -1)",
                             f"{src}.view(-1, 4, {self.d // 4})"])
            self.lines.append(f"{t} = {view}")
            self.lines.append(f"{t} = {t}.softmax(-1) * 3.0" if r.random() < 0.5 else
                              f"{t} = F.silu({t}) + 1.0")
            back = r.choice([f"{t}.flatten(1)", f"{t}.reshape({src}.shape)",
                             f"{t}.view({src}.size(0), -1)"])
            self.assign(self.target(), f"{back} * {self.leaf()}")

    def _helper(self) -> None:
        r = self.rng
        name = f"mix{len(self.helpers)}"
        body = r.choice([
            ["h = F.gelu(a)", "return h * b + 1.0"],
            ["return torch.sigmoid(a) * b"],
            ["a = a * 2.0", "a = torch.relu(a)", "return a + b"],
            ["s = a + b", "# helper comment", "return s * torch.rsqrt(s.pow(2).mean(-1, "
             "keepdim=True) + 1e-6)"],
        ])
        self.helpers.append("\n".join([f"    def {name}(self, a, b):",
                                       *("        " + line for line in body)]))
        self.assign(self.target(), f"self.{name}({self.leaf()}, {self.expr(1)})")

    def ret(self) -> str:
        r = self.rng
        k = r.random()
        a, b = self.leaf(), self.leaf()
        if k < 0.4:
            return f"return {self.live[-1]}"
        if k < 0.6:
            return f"return {self.live[-1]}, {a}"
        if k < 0.75:
            return f"return {self.live[-1]} + {a}"
        if k < 0.9:
            return f"return ({a}, {b}.sum(-1))"
        return f"return {self.expr(2)}"


def _balanced_call(e: str) -> bool:
    """`f(...)` or `a.b(...)` whose outer parentheses close at the end."""
    i = e.find("(")
    if i <= 0 or not e[:i].replace(".", "").replace("_", "").isalnum():
        return False
    depth = 0
    for j, c in enumerate(e[i:], i):
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return j == len(e) - 1
    return False


def make_model(seed: int) -> tuple[str, list[tuple[int, ...]]]:
    r = random.Random(seed)
    dims = r.choice([(4, 32), (2, 8, 16), (4, 16), (1, 32), (1, 8, 16), (3, 6, 12)])
    inputs = ["x"] if r.random() < 0.6 else ["x", "y"]
    g = Gen(r, dims, inputs)
    for _ in range(r.randint(3, 9)):
        g.statement()
    ret = g.ret()  # before the modules are listed: it may add one
    body = "\n".join("        " + line if line else "" for line in g.lines)
    inits = "\n".join(f"        self.{n} = {v}" for n, v in g.mods.items()) or "        pass"
    helpers = "\n\n".join(g.helpers)
    src = f'''"""Fuzzed model {seed}."""

import torch
import torch.nn as nn
import torch.nn.functional as F


def gate(t):
    return t * torch.sigmoid(t)


def blend(a, b):
    return a * 0.5 + torch.tanh(b)


class Scale(nn.Module):
    def forward(self, t):
        return t * 2.0 + 1.0


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, t):
        return t + F.gelu(self.norm(t)) * 0.5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
{inits}

    def forward(self, {", ".join(inputs)}):
        # forward starts
{body}
        {ret}
{"" if not helpers else chr(10) + helpers + chr(10)}'''
    return src, [dims] * len(inputs)
