"""Property test: random pointwise chains and diamonds over broadcast operands and views.

Hypothesis draws a small program (each step applies an op to values made
earlier, so values fan out and rejoin; some steps go through views: a transpose,
reshape or permute around a unary op, a permuted value's dims merged, a slice expanded
back); the model runs it, the analyzer finds its clusters, and every emitted kernel must
match eager under the interpreter. Reductions run over the last axis, or over random dims
of a 3-d view. A few examples by default; FUSION_FUZZ=1 runs a long profile.
"""

import os

import torch
from codegen_harness import Lambda, check_model
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# 15 a test by default (25 took 49 s of the CPU suite's ~1150 s of work on 2 cores, which
# must stay under 10 minutes); FUSION_FUZZ=1 runs the long profile.
settings.register_profile("codegen-default", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
# Five tests: FUSION_FUZZ=1 runs up to 2,500 random graphs in all (FUSION_FUZZ_EXAMPLES sets
# the count per test: 200 gives 1,000 graphs).
settings.register_profile("codegen-fuzz",
                          max_examples=int(os.environ.get("FUSION_FUZZ_EXAMPLES", "500")),
                          deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
PROFILE = "codegen-fuzz" if os.environ.get("FUSION_FUZZ") == "1" else "codegen-default"

R, C = 3, 20
# Operand shapes: full, row vector, column vector, 0-d, a full operand read through a
# transposed view (drawn as (C, R), `.t()` in the program: the tiled elementwise kernel),
# and one cut from a wider buffer (drawn as (R, C + 4), sliced in the program).
TRANSPOSED, SLICED = "transposed", "sliced"
SHAPES = [(R, C), (C,), (R, 1), (), TRANSPOSED, SLICED]
UNARY = {
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "relu": torch.relu, "neg": torch.neg,
    "abs": torch.abs, "exp_tanh": lambda a: torch.exp(torch.tanh(a)),
    "scale": lambda a: a * 1.5, "shift": lambda a: a + 0.25,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum,
    "minimum": torch.minimum, "where_gt": lambda a, b: torch.where(a > b, a, b * 0.5),
}


# Views around a unary op `f`, back to the (R, C) shape (a full-size value `a`).
VIEWS = {
    "t": lambda a, f: f(a.t()).t(),
    "split": lambda a, f: f(a.reshape(R, 4, C // 4)).reshape(R, C),
    "flat": lambda a, f: f(a.reshape(-1)).view(R, C),
    "permute3": lambda a, f: f(a.reshape(R, 4, C // 4).permute(2, 0, 1)).permute(1, 2, 0)
    .reshape(R, C),
    # a permuted value's dims merged: an attention block's heads merged back
    "heads": lambda a, f: f(a.reshape(R, 4, C // 4).transpose(1, 2)).reshape(R, C),
    "unsqueeze": lambda a, f: f(a.unsqueeze(0).transpose(0, 1)).squeeze(1),
    "column": lambda a, f: f(a[:, 3:4]).expand(R, C),  # a slice, broadcast back
    "row": lambda a, f: f(a[1:2]).expand(R, C),
    "every_other": lambda a, f: f(a[:, ::2]).repeat_interleave(2, dim=1),  # not a view
}


@st.composite
def programs(draw, views: bool = True):
    n_inputs = draw(st.integers(1, 3))
    shapes = [SHAPES[0]] + [draw(st.sampled_from(SHAPES)) for _ in range(n_inputs - 1)]
    steps = []
    n_values = n_inputs
    for _ in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from("uubbv" if views else "ub"))
        if kind == "u":
            steps.append(("u", draw(st.sampled_from(sorted(UNARY))),
                          draw(st.integers(0, n_values - 1))))
        elif kind == "v":  # a view of a full-size value (the first input, or a later one)
            steps.append(("v", draw(st.sampled_from(sorted(VIEWS))),
                          draw(st.sampled_from(sorted(UNARY))),
                          draw(st.sampled_from([0, *range(n_inputs, n_values)]))))
        else:
            steps.append(("b", draw(st.sampled_from(sorted(BINARY))),
                          draw(st.integers(0, n_values - 1)), draw(st.integers(0, n_values - 1))))
        n_values += 1
    return shapes, steps


def make_inputs(shapes):
    sizes = {TRANSPOSED: (C, R), SLICED: (R, C + 4)}
    return tuple(torch.randn(sizes.get(s, s)) for s in shapes)


def run_program(steps, *xs):
    views = {(C, R): lambda x: x.t(), (R, C + 4): lambda x: x[:, 2:C + 2]}
    values = [views[tuple(x.shape)](x) if tuple(x.shape) in views else x for x in xs]
    for step in steps:
        if step[0] == "u":
            values.append(UNARY[step[1]](values[step[2]]))
        elif step[0] == "v":
            full = values[step[3]].expand(R, C)  # a broadcast operand made full-size
            values.append(VIEWS[step[1]](full, UNARY[step[2]]))
        else:
            values.append(BINARY[step[1]](values[step[2]], values[step[3]]))
    # Fold every value into the result so nothing else escapes.
    out = values[-1]
    for v in values[len(xs):-1]:
        out = out + v
    return out


@settings.get_profile(PROFILE)
@given(programs(), st.integers(0, 2**16))
# Found by the fuzzer: `exp(tanh(y))` (a result) computed over every other column of its
# expansion, so its store would have reached half of it (the launcher failed on the view).
@example(program=([(R, C), (C,)], [("u", "abs", 0), ("u", "exp_tanh", 1),
                                   ("v", "every_other", "abs", 3)]), seed=0)
# A reshape of a permuted value read from memory, then a broadcast operand: the kernel
# iterates over the merged dim split (``codegen/regroup_space.py``).
@example(program=([(R, C), (C,)], [("v", "heads", "relu", 0), ("b", "add", 2, 1)]), seed=0)
def test_random_pointwise_programs_match_eager(tmp_path_factory, program, seed):
    shapes, steps = program
    torch.manual_seed(seed)
    inputs = make_inputs(shapes)
    model = Lambda(lambda m, *xs: run_program(steps, *xs), arity=len(inputs))
    # Without views some group always fuses; a view step may leave a computed value needed
    # through two index maps (the kernel refuses it, and the ops stay apart).
    check_model(model, inputs, tmp_path_factory.mktemp("fuzz"), seed=seed,
                require=not any(step[0] == "v" for step in steps))


REDUCE = {
    "softmax": lambda v: torch.softmax(v, dim=-1),
    "log_softmax": lambda v: torch.log_softmax(v, dim=-1),
    "layer_norm": lambda v: torch.nn.functional.layer_norm(v, (v.shape[-1],)),
    "sum": lambda v: v.sum(-1),
    "mean_keepdim": lambda v: v.mean(-1, keepdim=True),
    "amax": lambda v: v.amax(-1),
    "amin_keepdim": lambda v: v.amin(-1, keepdim=True),
    "rms_norm": lambda v: torch.nn.functional.rms_norm(v, (v.shape[-1],), eps=1e-6),
    "cumsum": lambda v: v.cumsum(-1),
}


@settings.get_profile(PROFILE)
@given(programs(), st.sampled_from(sorted(REDUCE)), st.sampled_from(sorted(UNARY)),
       st.booleans(), st.integers(0, 2**16))
def test_random_prologues_into_a_reduction(tmp_path_factory, program, rule, epilogue, loop,
                                           seed):
    """A random pointwise program feeds a row reduction, then one pointwise epilogue op."""
    from fusion_core.codegen import Tuning

    shapes, steps = program
    torch.manual_seed(seed)
    inputs = make_inputs(shapes)
    # `+ xs[0]` makes the reduced value full-size whatever shape the program ends with.
    model = Lambda(lambda m, *xs: UNARY[epilogue](REDUCE[rule](run_program(steps, *xs) + xs[0])),
                   arity=len(inputs))
    tuning = Tuning(max_block=8, loop_block=8) if loop else Tuning()
    checked = check_model(model, inputs, tmp_path_factory.mktemp("fuzz"), seed=seed,
                          tuning=tuning)
    assert any(k.skeleton == "reduction" for k in checked.kernels)


# Reductions over a random set of dims of a 3-d view of the program's result.
AXES = [(0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2)]
REDUCE_AXES = {
    "sum": lambda v, d: v.sum(d),
    "mean_keepdim": lambda v, d: v.mean(d, keepdim=True),
    "amax": lambda v, d: v.amax(d),
    "softmax": lambda v, d: torch.softmax(v, dim=d[-1]),
    "log_softmax": lambda v, d: torch.log_softmax(v, dim=d[0]),
    "cumsum": lambda v, d: v.cumsum(d[0]),
    "layer_norm": lambda v, d: torch.nn.functional.layer_norm(v, v.shape[d[0]:]),
}


@settings.get_profile(PROFILE)
@given(programs(views=False), st.sampled_from(sorted(REDUCE_AXES)), st.sampled_from(AXES),
       st.sampled_from(sorted(UNARY)), st.booleans(), st.integers(0, 2**16))
def test_random_reductions_over_axes_of_a_reshape(tmp_path_factory, program, rule, axes,
                                                  epilogue, loop, seed):
    """A random pointwise program, a reshape to (R, 4, C/4), a reduction over random dims
    (the reshape is a view in the group: its index map puts them last, each its own column
    dim), one pointwise epilogue op."""
    from fusion_core.codegen import Tuning

    shapes, steps = program
    torch.manual_seed(seed)
    inputs = make_inputs(shapes)

    def forward(m, *xs):
        v = (run_program(steps, *xs) + xs[0]).reshape(R, 4, C // 4)
        return UNARY[epilogue](REDUCE_AXES[rule](v, axes))

    model = Lambda(forward, arity=len(inputs))
    tuning = Tuning(max_block=8, loop_block=8) if loop else Tuning()
    # The reshape of a transposed or sliced input may have no strides that express it: that
    # input is refused by name, and the ops stay apart.
    strided = len(axes) > 1 and axes[0] == 0 and any(s in (TRANSPOSED, SLICED) for s in shapes)
    checked = check_model(model, inputs, tmp_path_factory.mktemp("fuzz"), seed=seed,
                          tuning=tuning, require=not strided)
    assert strided or any(k.skeleton == "reduction" for k in checked.kernels)


# -- reductions over random sets of axes ----------------------------------------------------
AXIS_REDUCE = {
    "sum": lambda v, dims, keep, c: v.sum(dims, keepdim=keep),
    "mean": lambda v, dims, keep, c: v.mean(dims, keepdim=keep),
    "amax": lambda v, dims, keep, c: v.amax(dims, keepdim=keep),
    "amin": lambda v, dims, keep, c: v.amin(dims, keepdim=keep),
    "var": lambda v, dims, keep, c: v.var(dims, keepdim=keep, correction=c),
    "std": lambda v, dims, keep, c: v.std(dims, keepdim=keep, correction=c),
}


@st.composite
def axis_reductions(draw):
    """A small 2- to 4-d shape, a non-empty set of its dims, the reduction and its keepdim
    and correction, and the pointwise ops around it."""
    shape = tuple(draw(st.lists(st.integers(2, 5), min_size=2, max_size=4)))
    dims = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    op = draw(st.sampled_from(sorted(AXIS_REDUCE)))
    return (shape, dims, op, draw(st.booleans()), draw(st.sampled_from([0, 1])),
            draw(st.sampled_from(sorted(UNARY))), draw(st.sampled_from(sorted(UNARY))))


@settings.get_profile(PROFILE)
@given(axis_reductions(), st.booleans(), st.integers(0, 2**16))
def test_random_reductions_over_random_axes(tmp_path_factory, drawn, loop, seed):
    """A pointwise prologue, a reduction over a random set of dims (keepdim or not), then
    an epilogue: with keepdim the result is broadcast back against the input."""
    from fusion_core.codegen import Tuning

    shape, dims, op, keep, correction, prologue, epilogue = drawn
    torch.manual_seed(seed)

    def fn(m, x):
        r = AXIS_REDUCE[op](UNARY[prologue](x), dims, keep, correction)
        return UNARY[epilogue](r) + x if keep else UNARY[epilogue](r)

    tuning = Tuning(max_block=8, loop_block=8) if loop else Tuning()
    checked = check_model(Lambda(fn, arity=1), (torch.randn(shape),),
                          tmp_path_factory.mktemp("fuzz"), seed=seed, tuning=tuning)
    assert any(k.skeleton == "reduction" for k in checked.kernels)


# -- elementwise groups over operands in random memory orders -------------------------------
@st.composite
def permuted_operands(draw):
    """A 3- or 4-d shape of small sizes, and for each of two or three operands a memory
    order (a permutation of its dims, outermost first) and whether it is broadcast along
    one dim; the ops that combine them."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=3, max_size=4)))
    rank = len(shape)
    operands = [(tuple(draw(st.permutations(range(rank)))),
                 draw(st.sampled_from([None, *range(rank)])) if k else None)
                for k in range(draw(st.integers(2, 3)))]
    return (shape, operands, draw(st.sampled_from(sorted(UNARY))),
            draw(st.sampled_from(sorted(BINARY))), draw(st.sampled_from(sorted(UNARY))))


@settings.get_profile(PROFILE)
@given(permuted_operands(), st.sampled_from([(64, 8), (1024, 32)]), st.integers(0, 2**16))
def test_random_permuted_operands_match_eager(tmp_path_factory, drawn, tile, seed):
    """Operands stored in random dim orders (read through a permute of a contiguous tensor,
    so the tiled kernel's columns follow whichever is permuted), some broadcast along a dim,
    combined by a unary and binary op and a sum: the kernel matches eager for every split."""
    from fusion_core.codegen import Tuning

    shape, operands, first, combine, last = drawn
    torch.manual_seed(seed)
    inputs, orders = [], []
    for order, broadcast in operands:
        sizes = [1 if k == broadcast else shape[k] for k in range(len(shape))]
        inputs.append(torch.randn([sizes[k] for k in order]))
        orders.append(tuple(order.index(k) for k in range(len(shape))))  # back to `shape`

    def fn(m, *xs):
        xs = [x.permute(*o) for x, o in zip(xs, orders, strict=True)]
        out = BINARY[combine](UNARY[first](xs[0]), xs[1])
        return UNARY[last](out + xs[2]) if len(xs) > 2 else UNARY[last](out)

    block, cols = tile
    check_model(Lambda(fn, arity=len(inputs)), tuple(inputs), tmp_path_factory.mktemp("fuzz"),
                seed=seed, tuning=Tuning(block=block, tile_cols=cols))
