"""One --apply fuzz case: write a random model (apply_fuzz_models.py), run
`fusion-advisor --apply --yes` on it in-process, and judge the result.

A case is bad when the CLI ends in a traceback, or it applied edits and the rewritten file
does not parse, drops one of the original's comments, or computes something else than the
backup (outputs, and what it writes into its inputs) at the analysed shape or at one more
batch row, or fails there; a model with a `flag` is compared again with it False, which
runs the branches the trace skipped. At a doubled last dim only a failure to run is noted, apart
(`lastdim`): the kernels follow the batch, the other sizes as analysed. Analysed at batch
1, a launcher's one-line refusal (ValueError) of batch 2 is noted apart too (`batch1`): a
length-1 dim is ambiguous, so the launcher may refuse another length
(test_codegen_length_one.py), but must not compute a wrong one.
"""

from __future__ import annotations

import ast
import io
import tokenize
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from apply_fuzz_models import make_model
from click.testing import CliRunner
from torch.utils._pytree import tree_leaves

from fusion_core.cli import cli
from fusion_core.load import import_model_file, instantiate, pick_class
from fusion_core.sourcemap.apply import forget_package
from fusion_core.sourcemap.fused import package_name

OK = frozenset({"applied-ok", "nothing", "refused", "invalid", "lastdim", "batch1"})


def load(path: Path) -> torch.nn.Module:
    forget_package(package_name(path.stem))
    return instantiate(pick_class(import_model_file(path), path, "Net"), path).eval()


def leaves(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]


def compare(orig_path: Path, new_path: Path, shapes: list[tuple[int, ...]]) -> str | None:
    why = compare_at(orig_path, new_path, shapes)
    if why is None and hasattr(load(orig_path), "flag"):  # the branches the trace skipped
        why = compare_at(orig_path, new_path, shapes, flag=False)
        why = why and f"with flag=False: {why}"
    return why


def compare_at(orig_path: Path, new_path: Path, shapes: list[tuple[int, ...]],
               flag: bool | None = None) -> str | None:
    before, after = load(orig_path), load(new_path)
    if flag is not None:
        before.flag = after.flag = flag
    for name, buf in before.named_buffers():
        if name.endswith(("running_mean", "running_var")):
            buf.uniform_(0.5, 1.5)
    after.load_state_dict(before.state_dict())
    variants = [shapes, [(s[0] + 1, *s[1:]) for s in shapes],
                [(*s[:-1], s[-1] * 2) for s in shapes]]
    for k, variant in enumerate(variants):
        gen = torch.Generator().manual_seed(k)
        xs = [torch.randn(s, generator=gen) for s in variant]
        a_in, b_in = [x.clone() for x in xs], [x.clone() for x in xs]
        with torch.no_grad():
            try:
                want = leaves(before(*a_in))
            except Exception as e:  # noqa: BLE001
                if k or flag is not None:
                    continue  # the model itself does not run at this shape or setting
                return f"original fails: {e!r}"
            try:
                got = leaves(after(*b_in))
            except Exception as e:  # noqa: BLE001
                tag = " LASTDIM" if k == 2 else ""
                if k == 1 and all(s[0] == 1 for s in shapes) and isinstance(e, ValueError) \
                        and "regenerate" in str(e):
                    tag = " BATCH1"  # a length-1 dim is ambiguous: the launcher refuses
                return f"rewritten fails at {variant}{tag}: {type(e).__name__}: {e}"[:400]
        try:
            assert len(got) == len(want), f"{len(got)} outputs vs {len(want)}"
            for g_, w_ in zip(got, want, strict=True):
                torch.testing.assert_close(g_, w_, atol=1e-4, rtol=1e-4)
            for g_, w_ in zip(b_in, a_in, strict=True):
                torch.testing.assert_close(g_, w_, atol=1e-4, rtol=1e-4,
                                           msg=lambda m: "input mutation differs: " + m)
        except AssertionError as e:
            return f"differs at {variant}: {str(e)[:400]}"
    return None


def comments_lost(old: str, new: str) -> list[str]:
    """Comments of `old` (as tokens) that the rewrite dropped."""

    def comments(text: str) -> Counter:
        toks = tokenize.generate_tokens(io.StringIO(text).readline)
        return Counter(t.string for t in toks if t.type == tokenize.COMMENT)

    return sorted((comments(old) - comments(new)).elements())


def pointer_reasons(out: str) -> list[str]:
    """Why each cluster got no diff: the reason after `no diff: ` (a log to group by)."""
    return [ln.split("no diff: ", 1)[1] for ln in out.splitlines()
            if ln.startswith("cluster ") and "no diff: " in ln]


def run_one(seed: int, root: Path) -> dict[str, Any]:
    src, shapes = make_model(seed)
    folder = root / f"m{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fz{seed}.py"
    path.write_text(src)
    try:
        load(path)(*[torch.randn(s) for s in shapes])
    except Exception as e:  # noqa: BLE001
        return {"seed": seed, "status": "invalid", "why": repr(e)[:200]}
    args = ["--model", f"{path}:Net"]
    for s in shapes:
        args += ["--input-shape", ",".join(map(str, s))]
    res = CliRunner().invoke(cli, [*args, "--no-timing", "--apply", "--yes"])
    out = res.output
    info = {"seed": seed, "exit": res.exit_code}
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        info["status"] = "CRASH"
        info["why"] = "".join(traceback.format_exception(res.exception))[-1500:]
        return info
    if "Traceback" in out:
        info["status"] = "CRASH"
        info["why"] = out[-1500:]
        return info
    if res.exit_code != 0:
        err = [ln for ln in out.splitlines() if ln.startswith("error")]
        info["status"] = "ROLLBACK" if "failed its check" in out else "refused"
        info["why"] = (err or [out[-300:]])[0][:600]
        return info
    if "Applied" not in out:
        info["status"] = "nothing"
        info["why"] = "; ".join(pointer_reasons(out))[:600]
        return info
    backup = path.with_name(path.name + ".bak")
    new = path.read_text()
    orig = folder / f"orig{seed}.py"
    orig.write_text(backup.read_text())
    try:
        ast.parse(new)
    except SyntaxError as e:
        info["status"] = "BAD"
        info["why"] = f"rewritten file does not parse: {e}"
        return info
    lost = comments_lost(src, new)
    why = compare(orig, path, shapes)
    if why and "rewritten fails at" in why and "LASTDIM" in why:
        info["status"] = "lastdim"  # beyond the contract: the kernels follow the batch only
        info["why"] = why
    elif why and "rewritten fails at" in why and "BATCH1" in why:
        info["status"] = "batch1"  # analysed at batch 1: refusing another is allowed
        info["why"] = why
    elif why or lost:
        info["status"] = "BAD"
        info["why"] = why or f"comments lost: {lost}"
    else:
        info["status"] = "applied-ok"
    info["edits"] = out.count("cluster")
    return info
