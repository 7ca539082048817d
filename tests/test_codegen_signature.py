"""One typed signature per kernel (``codegen/signature.py``): the ``@triton.jit`` parameter
lists and the launcher's calls agree for every kernel form (flat, tiled, one reduction, a
looped one, several over the same rows, split rows; spans, row spans and strides), the
launcher computes exactly the strides the kernel reads, and split kernels identical up to
names deduplicate.

Structural checks on the generated source's syntax tree: nothing is launched."""

import ast

import pytest
import torch
import torch.nn.functional as F
from codegen_harness import Lambda

from fusion_core.codegen import Tuning, emit, generate
from fusion_core.codegen.lower import plan
from fusion_core.codegen.signature import (
    N_COLS,
    N_ROWS,
    Family,
    KernelParams,
    strides_local,
)
from fusion_core.names import jit_function_name
from fusion_core.pipeline import analyze
from fusion_core.validate.kernels import same_source_key

# Rows of 4096 loop over blocks of 256 and may split into chunks of 1024 (as in
# test_codegen_split_rows.py): every kernel form at small shapes.
SPLIT = Tuning(max_block=256, loop_block=256, split_min_cols=1024)

FORMS = {
    "flat": (lambda m, x: (x * 2.0).relu() + 1.0, (4, 8), {}),
    # beside a contiguous operand (alone, `x.t()` is iterated in its memory order: flat)
    "tiled": (lambda m, x: x.t() * 2.0 + m.b, (16, 8), {"tiled": True}),
    "single": (lambda m, x: F.softmax(x * 0.5, dim=-1) * 3.0, (4, 64), {}),
    "looped": (lambda m, x: (x * 2.0).sum(-1), (4, 512), {"looped": True}),
    "several": (lambda m, x: F.softmax(x, -1) + x.mean(-1, keepdim=True), (4, 64), {}),
    "split": (lambda m, x: F.softmax(x * 0.5 + 1.0, dim=-1) * 3.0, (4, 4096), {"looped": True}),
    # spans of the iteration shape: a (4, 1) operand broadcast over (2, 4, 8)
    "broadcast": (lambda m, x: x * m.w + 1.0, (2, 4, 8), {}),
    # spans of the rows, input and output strides: softmax over NCHW's channels
    "channels": (lambda m, x: x * torch.softmax(x / 0.5 + m.shift, dim=1), (2, 4, 8, 8), {}),
}
WEIGHTS = {"w": torch.randn(4, 1), "shift": torch.randn(4, 1, 1), "b": torch.randn(8, 16)}


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}


def _params(fn: ast.FunctionDef) -> tuple[list[str], list[str]]:
    """A `@triton.jit` function's runtime parameters and its constexpr ones."""
    runtime, consts = [], []
    for a in fn.args.args:
        (consts if a.annotation is not None else runtime).append(a.arg)
    return runtime, consts


def _assigned(fn: ast.FunctionDef, name: str) -> ast.expr:
    return next(n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in n.targets))


def _names(e: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}


def _launches(fn: ast.FunctionDef, kernel: str) -> list[ast.Call]:
    """Calls `K[grid](...)` inside `fn` whose `K` is `kernel`: by name, through the launch's
    `wrap` (`(kernel if wrap is None else wrap(kernel))`), or a local assigned from those."""
    local = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and kernel in
             _names(n.value) for t in n.targets if isinstance(t, ast.Name)}
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Subscript)
            and (kernel in _names(n.func.value) or _names(n.func.value) & local)]


def _generated(form: str):
    fn, shape, options = FORMS[form]
    analysis = analyze(Lambda(fn, **WEIGHTS), shape)
    cluster = analysis.clusters[0]
    kernel = generate(analysis, cluster, SPLIT, **options)
    return analysis, cluster, kernel


# The size parameters and the launcher locals passed for them
SIZES = {"n_elements": "span[0]", "n_rows": "n_rows", "n_cols": "n_cols"}


def _passed_for(param: str, launch: str) -> bool:
    """The launcher expression is the one named for the kernel parameter: a size's local,
    `span[2]` for span2, `in0_strides[1]` for in0_stride1, `_divisor(span[2])[0]` for
    span2_m (its multiplier; `[1]`, span2_l, its shift)."""
    if param in SIZES:
        return launch == SIZES[param]
    node = ast.parse(launch, mode="eval").body
    if not isinstance(node, ast.Subscript):
        return False
    call = node.value
    if isinstance(call, ast.Call) and ast.unparse(call.func) == "_divisor":  # a span's divisor
        span = ast.parse(ast.unparse(call.args[0]), mode="eval").body
        return param == (f"{ast.unparse(span.value)}{ast.unparse(span.slice)}"
                         f"{['_m', '_l'][int(ast.unparse(node.slice))]}")
    base, k = ast.unparse(node.value), ast.unparse(node.slice)
    if base.endswith("_strides"):
        return param == f"{base.removesuffix('_strides')}_stride{k}"
    return param == f"{base}{k}"


@pytest.mark.parametrize("form", list(FORMS))
def test_each_parameter_gets_the_launcher_value_named_for_it(form):
    analysis, cluster, kernel = _generated(form)
    functions = _functions(kernel.source)
    runtime, consts = _params(functions[jit_function_name(cluster.index)])
    args = []
    for e in _assigned(functions["_plan"], "args").elts:  # `*_divisor(s)`: s's m, then l
        starred = isinstance(e, ast.Starred)
        args += [f"{ast.unparse(e.value)}[{i}]" for i in (0, 1)] if starred else [ast.unparse(e)]
    divisions = [a.removesuffix("[0]") for a in args if a.endswith("[0]") and "_divisor(" in a]
    assert len(set(divisions)) == len(divisions), divisions
    assert ast.unparse(_assigned(functions["_plan"], "args")).count("_divisor(") == len(divisions)
    call = _launches(functions["_launch"], jit_function_name(cluster.index))[0]
    tensors = [a for a in call.args if not isinstance(a, ast.Starred)]
    # pointers positionally, then `*args` (sizes and scalars), then the constexprs by name
    assert len(tensors) + len(args) == len(runtime)
    passed = list(zip(runtime[len(tensors):], args, strict=True))
    assert all(_passed_for(param, launch) for param, launch in passed), passed
    assert [k.value for k in _assigned(functions["_launch"], "consts").keys] == consts
    assert all(p.endswith(f"_ptr{i}") for i, p in enumerate(runtime[:len(cluster.inputs)]))


@pytest.mark.parametrize("form", list(FORMS))
def test_the_launcher_computes_the_strides_the_kernel_reads(form):
    analysis, cluster, kernel = _generated(form)
    functions = _functions(kernel.source)
    runtime, _ = _params(functions[jit_function_name(cluster.index)])
    calls = [n for n in ast.walk(functions["_plan"]) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call)]
    # an input's (copy, strides) from `_layout`, a result's strides from `_written`
    computed = {ast.unparse(n.targets[0].elts[1]) for n in calls
                if ast.unparse(n.value.func) == "_layout"}
    computed |= {ast.unparse(n.targets[0]) for n in calls
                 if ast.unparse(n.value.func) == "_written"}
    computed -= {"_"}
    read = {p.rsplit("_stride", 1)[0] + "_strides" for p in runtime if "_stride" in p}
    assert computed == read
    # the forms cover both roles (a transposed result is written in eager's transposed layout)
    assert ("out0_strides" in read) == (form in ("channels", "tiled"))


def test_split_kernels_take_the_looped_kernels_args_and_the_chunk():
    analysis, cluster, kernel = _generated("split")
    functions = _functions(kernel.source)
    looped, _ = _params(functions[jit_function_name(cluster.index)])
    scalars = looped[len(cluster.inputs) + len(cluster.outputs):]
    launch = functions["_launch"]
    for part, pointers in (("partials", len(cluster.inputs)),
                           ("finish", len(cluster.inputs) + len(cluster.outputs))):
        name = jit_function_name(cluster.index, part)
        runtime, consts = _params(functions[name])
        assert runtime[pointers:] == ["partial_ptr", *scalars, "chunk"]
        call = _launches(launch, name)[0]
        positional = [ast.unparse(a) for a in call.args]
        assert positional[pointers:] == ["partials", "*args", "chunk"]
        assert [k.arg for k in call.keywords if k.arg != "num_warps"] == consts


def test_the_signature_places_sizes_first_in_args():
    analysis, cluster, _ = _generated("single")
    _, rows = emit.kernel(plan(analysis.graph, cluster), looped=False)
    assert rows.sizes == (N_ROWS, N_COLS)
    assert rows.size_arg(N_COLS) == "args[1]"
    assert rows.launch_args[:2] == ["n_rows", "n_cols"]
    assert dict(rows.launch_consts)["COLS_ALIGN"] == "_multiple_of(args[1])"
    analysis, cluster, _ = _generated("flat")
    _, flat = emit.kernel(plan(analysis.graph, cluster), looped=False)
    assert flat.launch_args[0] == f"{Family.SPAN}[0]"
    assert dict(flat.launch_consts)["N_ALIGN"] == "_multiple_of(args[0])"


def test_params_seeded_with_a_signature_name_nothing_new():
    params = KernelParams()
    first = params.stride("in", 1, 0), params.span(Family.RSPAN, 2)
    seeded = KernelParams(tuple(params))
    assert (seeded.span(Family.RSPAN, 2), seeded.stride("in", 1, 0)) == first[::-1]
    assert seeded.names == ["in1_stride0", "rspan2"]
    assert [p.launch for p in seeded] == [f"{strides_local('in', 1)}[0]", "rspan[2]"]


def test_split_kernels_identical_up_to_names_share_a_dedup_key():
    def twice(m, x, y):
        return F.softmax(x * 0.5, dim=-1) * 3.0, F.softmax(y * 0.5, dim=-1) * 3.0

    analysis = analyze(Lambda(twice), (4, 4096), (4, 4096))
    assert len(analysis.clusters) == 2
    a, b = (generate(analysis, c, SPLIT, looped=True) for c in analysis.clusters)
    assert f"def {jit_function_name(1, 'partials')}(" in b.source
    assert same_source_key(a.source, a.name, 0) == same_source_key(b.source, b.name, 1)


def test_a_jit_function_name_is_one_of_the_files_parts():
    assert jit_function_name(3) == "cluster3_kernel"
    assert jit_function_name(3, "finish") == "cluster3_finish"
    with pytest.raises(AssertionError):
        jit_function_name(3, "other")

