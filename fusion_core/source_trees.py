"""Each Python source parsed once per process, however many readers ask for its tree.

A run reads the model file several times over: the loader compiles it, the class lookup
lists its classes, the analysis finds the lines of returns, the source map and the
``--apply`` preview walk its statements. Each used to parse it again; here the first reader
parses it and the others share that tree, so no reader may change it.

Reads a source (text, or the bytes of a file); returns its ``ast.Module``. Keyed by the
text itself, not the path: a file saved again during the run is parsed anew, and the bytes
the model was imported from stay what the source map reads. Bytes Python would read other
than as plain UTF-8 (a BOM, another coding cookie) are parsed as Python reads them, uncached.
"""

from __future__ import annotations

import ast
import io
import threading
import tokenize
from collections import OrderedDict

_KEEP = 16  # texts kept: the model's file, its helpers' files, an applied `*_fused` module
_trees: OrderedDict[str, ast.Module] = OrderedDict()
_lock = threading.Lock()  # progress and validation may read sources from other threads


def parse_source(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """The tree of `source`, parsed on the first call for its text; raises ``SyntaxError``
    (naming `filename`) as ``ast.parse`` does."""
    text = _plain_text(source) if isinstance(source, bytes) else source
    if text is None:
        return ast.parse(source, filename=filename)
    with _lock:
        tree = _trees.get(text)
        if tree is not None:
            _trees.move_to_end(text)
            return tree
    tree = ast.parse(text, filename=filename)  # outside the lock: a large file takes a while
    with _lock:
        _trees[text] = tree
        while len(_trees) > _KEEP:
            _trees.popitem(last=False)
    return tree


def _plain_text(data: bytes) -> str | None:
    """The bytes as text when Python reads them as plain UTF-8 (no BOM, no other coding
    cookie), so that parsing the text gives the tree parsing the bytes would; else None."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode("utf-8") if encoding == "utf-8" else None
    except (SyntaxError, UnicodeDecodeError):
        return None
