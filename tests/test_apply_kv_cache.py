"""`--apply` on a model whose `torch.cat` grows a KV cache: the rewritten model keeps
computing what the original does as the cache grows call after call (codegen/cat_bounds.py).

Once the generated launcher refused the first call past the analysed length ("a
concatenated input is 6 long along the cat dim; this kernel reads 5 (regenerate it)").
Kernels run under the Triton interpreter on CPU at tiny shapes (see ../conftest.py).
"""

from __future__ import annotations

import textwrap

import torch
from apply_checks import DEVICE, load_net
from click.testing import CliRunner

from fusion_core.cli import cli

KV_CACHE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def forward(self, past, new):
            k = torch.cat((past, new), dim=2)
            return (k * 0.5).softmax(-1), k
    """)


def test_the_applied_model_runs_as_the_cache_grows(tmp_path):
    path = tmp_path / "kv.py"
    path.write_text(KV_CACHE)
    result = CliRunner().invoke(cli, ["--model", f"{path}:Net", "--input-shape", "1,2,5,8",
                                      "--input-shape", "1,2,1,8", "--no-timing", "--apply",
                                      "--yes"])
    assert result.exit_code == 0, result.output
    assert "k, fused = cluster0(past, new)" in path.read_text()
    (tmp_path / "original_kv.py").write_text(KV_CACHE)
    before, after = load_net(tmp_path / "original_kv.py"), load_net(path)
    torch.manual_seed(0)
    past = torch.randn(1, 2, 5, 8, device=DEVICE)
    with torch.no_grad():
        for step in range(3):  # decode: one token a call, the cache one longer each time
            new = torch.randn(1, 2, 1, 8, device=DEVICE)
            want, got = before(past, new), after(past, new)
            for w, g in zip(want, got, strict=True):
                torch.testing.assert_close(g, w, msg=lambda m, step=step: f"step {step}: {m}")
            past = got[1]
        # a prefill of 4 tokens into an empty cache
        past, new = (torch.randn(1, 2, n, 8, device=DEVICE) for n in (0, 4))
        for w, g in zip(before(past, new), after(past, new), strict=True):
            torch.testing.assert_close(g, w)
