"""t(n): the measured time of one verification forward with n draft nodes, per model, device and dtype.

`cost_curve(target)` reads it from the workbench home (`<home>/timing/`) or measures it once (a few
seconds: a forward over a tree of each size after a fixed-length prefix, median of a few repeats) and
saves it; `workbench calibrate --timing` measures again. core.sizing uses it for `max_nodes=auto`.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import torch

from core import cache as kv
from core.engine import forward_tree, prefill
from core.models import workbench_home
from core.sizing import CostCurve
from core.step import sync
from core.tree import DraftTree

SIZES = (0, 1, 2, 4, 8, 12, 16, 24, 32, 48, 64)  # draft nodes per measured forward
PREFIX = 512  # cached tokens before the tree (clipped to the model's context)
REPEATS = 5
_lock = threading.Lock()
_curves: dict[Path, CostCurve] = {}


def timing_path(target) -> Path:
    dtype = str(target.dtype).replace("torch.", "")
    return workbench_home() / "timing" / f"{target.fingerprint}-{target.device.type}-{dtype}.json"


def _tree(n: int, vocab: int) -> DraftTree:
    """A bushy tree of n draft nodes (node i under node (i - 1) // 2): a tree mask, as the drafters' trees need."""
    tree = DraftTree.root_only(1)
    for i in range(1, n + 1):
        tree.add((i - 1) // 2, 2 + i % (vocab - 2), "context")
    return tree


@torch.inference_mode()
def measure(target, sizes=SIZES, repeats: int = REPEATS, prefix: int = PREFIX) -> CostCurve:
    """Time one verification forward per size: rounds over all sizes (so a busy spell slows every size
    alike), the fastest of `repeats` per size (timeit's advice: the minimum is the cost, the rest is noise)."""
    prefix = max(2, min(prefix, target.max_context - max(sizes) - 2))
    gen = torch.Generator().manual_seed(0)
    ids = [int(i) for i in torch.randint(2, min(target.vocab_size, 30000), (prefix,), generator=gen)]
    cache = kv.new_cache(target.model)
    prefill(target.model, ids, cache)
    past = prefix - 1
    trees = [_tree(n, target.vocab_size) for n in sizes]
    best = [float("inf")] * len(sizes)
    for r in range(repeats + 1):  # round 0 warms up
        for i, tree in enumerate(trees):
            t0 = time.perf_counter()
            forward_tree(target.model, tree, past, cache)
            sync(target.device)
            if r:
                best[i] = min(best[i], time.perf_counter() - t0)
            kv.crop(cache, past)
    for i in range(len(best) - 2, -1, -1):  # a smaller tree never costs more than a bigger one
        best[i] = min(best[i], best[i + 1])
    return CostCurve(tuple(sizes), tuple(best))


def save(target, curve: CostCurve) -> Path:
    path = timing_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": target.name, "fingerprint": target.fingerprint, "device": str(target.device),
                               "dtype": str(target.dtype), "sizes": list(curve.sizes), "seconds": list(curve.seconds),
                               "measured": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))
    tmp.replace(path)
    return path


def load(path: Path) -> CostCurve | None:
    """The curve saved at `path`, or None when there is none or it cannot be read (it is measured again)."""
    try:
        data = json.loads(path.read_text())
        return CostCurve(tuple(int(s) for s in data["sizes"]), tuple(float(t) for t in data["seconds"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cost_curve(target, remeasure: bool = False) -> CostCurve:
    """The model's t(n): from memory, from the workbench home, or measured now and saved."""
    path = timing_path(target)
    with _lock:
        curve = None if remeasure else (_curves.get(path) or load(path))
        if curve is None:
            curve = measure(target)
            try:
                save(target, curve)
            except OSError:  # a read-only home: measured again by the next process
                pass
        _curves[path] = curve
        return curve
