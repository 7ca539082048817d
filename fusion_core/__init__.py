"""fusion-advisor's public API (what the pytest plugin and other tools may import).

Names load on first use (PEP 562), so ``import fusion_core`` costs no torch import:
the pytest plugin is installed in every test run of an environment and must not
slow the runs that check no fusion. Every subpackage that can import triton imports
``_interpret`` first, which sets ``TRITON_INTERPRET`` on a machine without CUDA.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The one place the version is written (pyproject reads it): `--version` shows it also
# from a source checkout that was never installed.
__version__ = "0.2.0"

# public name -> module that defines it (relative to this package)
_EXPORTS = {
    "Cluster": ".analysis.types", "LineSpan": ".analysis.types", "Rejection": ".analysis.types",
    "TrafficEstimate": ".analysis.types",
    "Barrier": ".analysis.barriers", "find_barriers": ".analysis.barriers",
    "Scope": ".analysis.scope", "scope_of": ".analysis.scope", "op_sites": ".analysis.scope",
    "ModelTotals": ".analysis.totals", "model_totals": ".analysis.totals",
    "Kernel": ".codegen", "LoweringError": ".codegen", "generate": ".codegen",
    "generate_all": ".codegen", "load_kernel": ".codegen", "write_kernels": ".codegen",
    "FusionAdvisorError": ".errors",
    "split_biases": ".ir.bias_split",
    "subscript_written": ".ir.spelling",
    "InputSpec": ".ir.shapes", "parse_dtype": ".ir.shapes",
    "load_model": ".load", "build_model": ".build",
    "Analysis": ".pipeline", "analyze": ".pipeline",
    "measure": ".validate.measure", "kernel_set": ".validate.kernels",
    "fmt_bytes": ".report.units", "speedup_words": ".report.units",
    "write_atomic": ".fileio", "remove_stray_temp_files": ".fileio",
    "page_data": ".report.html", "Ghost": ".report.html", "analysis_html": ".report.html",
    "compare_html": ".report.html", "index_html": ".report.html",
    "PageResults": ".report.html", "ClusterTimes": ".report.html",
    "measured_times": ".report.html",
    "CompiledRecord": ".inductor.compiled", "compiled_record": ".inductor.compiled",
    "CompiledKernel": ".inductor.compiled", "GraphBreak": ".inductor.compiled",
    "OpSite": ".inductor.compiled", "Recompile": ".inductor.compiled",
    "Separation": ".inductor.separation",
    "why_apart": ".report.apart",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'fusion_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and editors only
    from .analysis.barriers import Barrier, find_barriers  # noqa: F401
    from .analysis.scope import Scope, op_sites, scope_of  # noqa: F401
    from .analysis.totals import ModelTotals, model_totals  # noqa: F401
    from .analysis.types import Cluster, LineSpan, Rejection, TrafficEstimate  # noqa: F401
    from .build import build_model  # noqa: F401
    from .codegen import Kernel, LoweringError, generate, generate_all, load_kernel, write_kernels  # noqa: F401
    from .errors import FusionAdvisorError  # noqa: F401
    from .fileio import remove_stray_temp_files, write_atomic  # noqa: F401
    from .inductor.compiled import (  # noqa: F401
        CompiledKernel,
        CompiledRecord,
        GraphBreak,
        OpSite,
        Recompile,
        compiled_record,
    )
    from .inductor.separation import Separation  # noqa: F401
    from .ir.bias_split import split_biases  # noqa: F401
    from .ir.shapes import InputSpec, parse_dtype  # noqa: F401
    from .ir.spelling import subscript_written  # noqa: F401
    from .load import load_model  # noqa: F401
    from .pipeline import Analysis, analyze  # noqa: F401
    from .report.apart import why_apart  # noqa: F401
    from .report.html import (  # noqa: F401
        ClusterTimes,
        Ghost,
        PageResults,
        analysis_html,
        compare_html,
        index_html,
        measured_times,
        page_data,
    )
    from .report.units import fmt_bytes  # noqa: F401
    from .validate.kernels import kernel_set  # noqa: F401
    from .validate.measure import measure  # noqa: F401
