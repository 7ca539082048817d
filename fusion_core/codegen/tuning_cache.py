"""The tuning cache on disk: per-shape choices that survive the process.

Like ``tuning.py``, real Python copied verbatim into every generated kernel file (its
``HELPERS``). ``_choose`` keeps each timed choice in a JSON file under the user's cache folder
(``_cache_dir``: ``$FUSION_ADVISOR_CACHE_DIR``, else ``fusion-advisor`` under
``$XDG_CACHE_HOME`` or ``~/.cache``; set empty: no file), one file per identity
(``_cache_identity``: the GPU's name, Triton's version and a hash of the generated file's
text, so another GPU, another Triton or an edited file times again). A later process reads it
instead of timing. The file is replaced atomically (temp file + ``os.replace``); one that
cannot be read, parsed or written, or names another identity, is ignored.
"""

from __future__ import annotations

import os

import torch


def _cache_dir():
    """The folder of the tuning cache, or None (no disk cache: the variable set empty)."""
    chosen = os.environ.get("FUSION_ADVISOR_CACHE_DIR")
    if chosen is not None:
        return chosen or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fusion-advisor")


def _cache_identity(device):
    """What a stored choice is valid for: (GPU name, Triton version, sha256 of this file's
    text); None off CUDA or when this file cannot be read."""
    if device.type != "cuda":
        return None
    import hashlib

    import triton

    try:
        with open(__file__, "rb") as f:
            text_hash = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
    return [torch.cuda.get_device_name(device), triton.__version__, text_hash]


def _cache_path(identity):
    """The identity's cache file (None: no disk cache): one file per GPU, Triton and file."""
    folder = _cache_dir()
    if folder is None or identity is None:
        return None
    import hashlib
    import json

    name = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]
    return os.path.join(folder, "tuning", name + ".json")


def _cache_key(key):
    """A tuning key as stored: the bucket and input dtypes (the device is the identity's)."""
    bucket, dtypes = key[0], key[1]
    return repr((tuple(bucket), tuple(str(d) for d in dtypes)))


def _cache_read(path, identity):
    """{stored key: configuration} from `path`; {} when it is missing, unreadable, corrupt or
    written for another identity (then the buckets are timed again)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if data["identity"] != identity:
            return {}
        return {k: tuple(v) for k, v in data["choices"].items()
                if isinstance(v, list) and all(type(n) is int for n in v)}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def _cache_write(path, identity, key, config):
    """Add one choice to `path`, with what another process stored meanwhile; the file is
    replaced atomically. A cache that cannot be written is skipped: the choice still holds
    in this process."""
    import json
    import tempfile

    choices = _cache_read(path, identity)
    choices[key] = tuple(config)
    text = json.dumps({"identity": identity, "choices": choices}, indent=1, sort_keys=True)
    try:
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tuning.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
