"""t(n, L): the measured time of one verification forward with n draft nodes after L cached tokens, per
model, device, dtype and thread count (core.cost_model reads it between and beyond the measured points).

`cost_model(target)` reads it from the workbench home (`<home>/timing/`) or measures it once and saves it;
`workbench calibrate --timing` measures again. The file records the machine it was measured on (CPU model
and the instruction-set flags that change a forward's speed, or the GPU's name; thread count; dtype; torch
version): a file from another machine, or from before the context length was measured, is measured again.

How: a short real prefill, repeated along the sequence up to each length (core.cache.repeat_to: a forward
costs the same whatever the cached rows hold, and a real prefill of thousands of random tokens takes minutes
on a CPU); then rounds over every (length, size) pair, so a busy spell slows every point alike, keeping the
fastest of `repeats` per point (timeit's advice: the minimum is the cost, the rest is noise). With one torch
thread on a CPU a forward is timed by the thread's CPU time (`clock_name`), which other processes on the core
do not inflate. A grid that still comes out far from monotone (core.cost_model.disorder: another program took
the cores, or its threads' time counted) is measured once more, keeping each point's fastest; if that is still
disturbed the file says so (`disorder`), `load` passes it over, and the next process measures again.

`cost_curve(target)` is the slice at `CURVE_LENGTH` as a core.sizing.CostCurve, for displays (the UI's speed
note); `max_nodes=auto` reads the whole t(n, L) at each step's context length (core.sizing).
"""

from __future__ import annotations

import copy
import json
import platform
import threading
import time
from pathlib import Path
from typing import Any

import torch

from core import cache as kv
from core.cost_model import DISTURBED, CostModel, disorder
from core.engine import forward_tree, prefill
from core.errors import InvalidInputError
from core.models import workbench_home
from core.sizing import CostCurve
from core.step import sync
from core.tree import DraftTree

SIZES = (0, 1, 2, 4, 8, 16, 32, 64)  # draft nodes per measured forward
LENGTHS = (256, 1024, 4096)  # cached tokens before the tree; longer contexts extrapolate linearly
SEED_PREFIX = 256  # tokens really prefilled; longer lengths repeat their keys and values
REPEATS = 3  # timed rounds after a warm-up round; the fastest of them is kept
CURVE_LENGTH = 512  # the context length of `cost_curve`'s t(n) (displays only)
FORMAT = 2  # the file's layout: 1 was t(n) at one length; older files are measured again
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16")  # what changes a forward's speed
_lock = threading.Lock()
_models: dict[Path, CostModel] = {}


def _dtype(target) -> str:
    return str(target.dtype).replace("torch.", "")


def _cpuinfo() -> tuple[str, list[str]]:
    """The CPU's model name and which of CPU_FLAGS it has (Linux's /proc/cpuinfo; elsewhere platform's name)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), []
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return name or platform.processor() or platform.machine(), [f for f in CPU_FLAGS if f in flags]


def machine_signature(target) -> dict[str, Any]:
    """What a measured t(n, L) holds for: device, its hardware, thread count, dtype and torch version."""
    device = target.device
    if device.type == "cuda":
        hardware: dict[str, Any] = {"gpu": torch.cuda.get_device_name(device)}
    elif device.type == "cpu":
        cpu, flags = _cpuinfo()
        hardware = {"cpu": cpu, "cpu_flags": flags}
    else:
        hardware = {"accelerator": device.type}
    return {
        "device": device.type,
        **hardware,
        "threads": torch.get_num_threads(),
        "dtype": _dtype(target),
        "torch": torch.__version__,
    }


def timing_path(target) -> Path:
    """`<home>/timing/<fingerprint>-<device>-<dtype>-<threads>t.json`."""
    return (
        workbench_home()
        / "timing"
        / f"{target.fingerprint}-{target.device.type}-{_dtype(target)}-{torch.get_num_threads()}t.json"
    )


def practical_lengths(target, lengths=None, sizes=None) -> tuple[int, ...]:
    """The grid's lengths that fit the model's context with the largest tree after them; a model whose
    context is shorter than the grid's longest length gets its own longest as the last point."""
    lengths, sizes = lengths or LENGTHS, sizes or SIZES
    room = target.max_context - max(sizes) - 1  # the tree's nodes sit after the context
    if room < 2:
        raise InvalidInputError(
            f"{target.name} has a context of {target.max_context} tokens: too short to time trees of {max(sizes)} nodes"
        )
    fitting = [n for n in lengths if n <= room]
    if not fitting or fitting[-1] < min(room, max(lengths)):
        fitting.append(min(room, max(lengths)))
    return tuple(sorted(set(fitting)))


def _tree(n: int, vocab: int) -> DraftTree:
    """A bushy tree of n draft nodes (node i under node (i - 1) // 2): a tree mask, as the drafters' trees need."""
    tree = DraftTree.root_only(1)
    for i in range(1, n + 1):
        tree.add((i - 1) // 2, 2 + i % (vocab - 2), "context")
    return tree


def chain(n: int, vocab: int) -> DraftTree:
    """n draft nodes in one line (no tree mask: the model's causal mask)."""
    tree = DraftTree.root_only(1)
    for i in range(1, n + 1):
        tree.add(i - 1, 2 + i % (vocab - 2), "context")
    return tree


def _filled_caches(target, lengths) -> list:
    """One cache per length holding exactly `length` rows: one real prefill of SEED_PREFIX random tokens
    (fewer when a length is shorter), copied and repeated up to each length."""
    gen = torch.Generator().manual_seed(0)
    seed = min(SEED_PREFIX, min(lengths))
    ids = [int(i) for i in torch.randint(2, min(target.vocab_size, 30000), (seed,), generator=gen)]
    base = kv.new_cache(target.model)
    prefill(target.model, ids, base)
    caches = []
    for length in lengths:
        cache = copy.deepcopy(base)
        kv.repeat_to(cache, length)
        caches.append(cache)
    return caches


def clock_name(target) -> str:
    """How a forward is timed: the thread's CPU time on a CPU with one torch thread (the forward runs in the
    calling thread, and CPU time is what it costs even while other processes share the core; on an idle core
    it equals the wall time), else the wall clock (threads wait for each other; a GPU is synchronised)."""
    return "thread_time" if target.device.type == "cpu" and torch.get_num_threads() == 1 else "perf_counter"


@torch.inference_mode()
def measure_grid(target, sizes=SIZES, lengths=None, repeats: int = REPEATS, trees=None) -> list[list[float]]:
    """Seconds of one verification forward per (length, size): rows by length, the fastest of `repeats`
    timed rounds, every round over every point. `trees` builds the tree of n nodes (default: bushy)."""
    lengths = practical_lengths(target, sizes=sizes) if lengths is None else tuple(lengths)
    clock = getattr(time, clock_name(target))
    make = trees or _tree
    shapes = [make(n, target.vocab_size) for n in sizes]
    caches = _filled_caches(target, lengths)
    best = [[float("inf")] * len(sizes) for _ in lengths]
    for r in range(repeats + 1):  # round 0 warms up
        for j, (length, cache) in enumerate(zip(lengths, caches)):
            for i, tree in enumerate(shapes):  # the root is the token after `length` cached ones, as in decoding
                t0 = clock()
                forward_tree(target.model, tree, length, cache)
                sync(target.device)
                if r:
                    best[j][i] = min(best[j][i], clock() - t0)
                kv.crop(cache, length)
    return best


def measure(target, sizes=SIZES, lengths=None, repeats: int = REPEATS) -> CostModel:
    lengths = practical_lengths(target, sizes=sizes) if lengths is None else tuple(lengths)
    return CostModel(tuple(sizes), lengths, tuple(map(tuple, measure_grid(target, sizes, lengths, repeats))))


def save(target, model: CostModel, raw=None, seconds_taken: float | None = None) -> Path:
    """Write the measurement (`raw`: the grid as measured, before core.cost_model made it monotone, and its
    `disorder`)."""
    path = timing_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": FORMAT,
                "model": target.name,
                "fingerprint": target.fingerprint,
                "machine": machine_signature(target),
                "clock": clock_name(target),
                "sizes": list(model.sizes),
                "lengths": list(model.lengths),
                "seconds": [list(row) for row in (raw if raw is not None else model.seconds)],
                "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
                "measure_seconds": seconds_taken,
                "disorder": round(disorder(raw if raw is not None else model.seconds), 3),
            },
            indent=1,
        )
    )
    tmp.replace(path)
    return path


def load(path: Path, machine: dict[str, Any] | None = None, disturbed_ok: bool = False) -> CostModel | None:
    """The model saved at `path`; None when there is none, it cannot be read, it has an older layout, it was
    measured on another machine than `machine` (core.timing.machine_signature), or (unless `disturbed_ok`) its
    measurement was disturbed by other work (`disorder`): then it is measured again."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or (machine is not None and data.get("machine") != machine):
            return None
        if not disturbed_ok and data.get("disorder", 1.0) > DISTURBED:
            return None
        return CostModel.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cost_model(target, remeasure: bool = False) -> CostModel:
    """The model's t(n, L): from memory, from the workbench home (when measured on this machine), or
    measured now and saved."""
    path = timing_path(target)
    with _lock:
        model = None if remeasure else (_models.get(path) or load(path, machine_signature(target)))
        if model is None:
            t0 = time.perf_counter()
            lengths = practical_lengths(target)
            raw = measure_grid(target, SIZES, lengths)
            if disorder(raw) > DISTURBED:  # another program took the cores: once more, each point's fastest kept
                again = measure_grid(target, SIZES, lengths)
                raw = [[min(a, b) for a, b in zip(row, other)] for row, other in zip(raw, again)]
            model = CostModel(SIZES, lengths, tuple(map(tuple, raw)))
            try:
                save(target, model, raw, round(time.perf_counter() - t0, 1))
            except OSError:  # a read-only home: measured again by the next process
                pass
        _models[path] = model
        return model


def saved_disorder(target) -> float | None:
    """The disorder (core.cost_model.disorder) of the t(n, L) saved for `target` on this machine; None when none is
    saved or the file predates the field."""
    try:
        data = json.loads(timing_path(target).read_text())
        return None if data.get("machine") != machine_signature(target) else data.get("disorder")
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def curve_of(model: CostModel) -> CostCurve:
    """t(n) at CURVE_LENGTH cached tokens: the slice displays read (the sizer reads the whole CostModel)."""
    return CostCurve(*model.curve_at(CURVE_LENGTH))


def cost_curve(target, remeasure: bool = False) -> CostCurve:
    """t(n) at CURVE_LENGTH cached tokens of the model's `cost_model`."""
    return curve_of(cost_model(target, remeasure))
