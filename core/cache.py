"""The one place that touches KV-cache internals.

After a tree step the cache holds P committed rows followed by one row per tree node. The accepted
nodes are scattered among those rows; `keep_path` moves them to P..P+L and drops the rest, for
every layer. Cache classes change across transformers releases, so nothing else reaches inside them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from core.hot_types import CausalLM

# Tokens per prefill forward (target and draft model). It bounds activation memory on long contexts, and it is how
# often a long prompt's reading reports progress and can honour Stop: on a CPU, 4,096 made a 3,000-token prompt one
# silent ~10 s forward (SmolLM2-135M) that Stop had to wait out; 1,024 reports about every 3 s (what the smaller
# chunks cost in total is not measured on a quiet core yet: on a loaded one it was within the noise).
PREFILL_CHUNK = 1024


def new_cache(model: CausalLM) -> DynamicCache:
    return DynamicCache(config=model.config)


@functools.lru_cache(maxsize=None)
def _cache_kwarg(forward) -> str:
    # transformers 5.x renamed forward's `past_key_values` to `cache` (the old name warns on every call).
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cache_arg(module, cache: DynamicCache) -> dict:
    """The keyword that hands `cache` to `module`'s forward, under the name this transformers release uses."""
    return {_cache_kwarg(type(module).forward): cache}


def from_layer_pairs(pairs, config) -> DynamicCache:
    """A cache holding per-layer (key, value) tensors: the layout transformers 4 passed around, which
    llmlingua 0.2.2 (core.compress.llmlingua) still passes and slices."""
    return DynamicCache(ddp_cache_data=[(k, v) for k, v in pairs], config=config)


def layer_pairs(cache) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The cache's per-layer (key, value) tensors (None for an object that is no per-layer cache)."""
    layers = getattr(cache, "layers", None)
    return None if layers is None else [(layer.keys, layer.values) for layer in layers]


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def _layers(cache: DynamicCache):
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(
            f"{type(cache).__name__} has no per-layer storage this adapter knows; "
            "use transformers 5.x (DynamicCache with .layers)"
        )
    return layers


def crop(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions of every layer."""
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


@torch.inference_mode()
def repeat_to(cache: DynamicCache, length: int) -> None:
    """Grow every layer to `length` positions by repeating the rows it holds. For timing only (core.timing):
    the rows are real keys and values at the wrong positions, and a dense forward costs the same whatever
    they hold; it saves the prefill of a long prompt (minutes on a CPU)."""
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        have = layer.keys.shape[-2]
        reps = [1] * (layer.keys.dim() - 2) + [-(-length // have), 1]
        layer.keys = layer.keys.repeat(*reps)[..., :length, :].contiguous()
        layer.values = layer.values.repeat(*reps)[..., :length, :].contiguous()


@torch.inference_mode()
def keep_path(cache: DynamicCache, past_len: int, path: Sequence[int]) -> None:
    """Keep rows past_len + path[j] at past_len + j for every layer, then crop to past_len + len(path).

    `path` lists tree node indices in root-to-leaf order (the root, index 0, first). When the path is
    the prefix 0..L of the tree (always the case for chains) this is a plain crop.
    """
    new_len = past_len + len(path)
    if all(node == j for j, node in enumerate(path)):
        crop(cache, new_len)
        return
    index = _OnDevice(torch.tensor([past_len + n for n in path]))  # built once per step, copied once per device
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        src = index.on(layer.keys.device)
        # index_select copies the rows first, so overlapping source and destination are safe.
        layer.keys[..., past_len:new_len, :] = layer.keys.index_select(-2, src)
        layer.values[..., past_len:new_len, :] = layer.values.index_select(-2, src)
        layer.keys = layer.keys[..., :new_len, :]
        layer.values = layer.values[..., :new_len, :]


# Batched decoding (core.batch): every row of the batch has its own accepted path and its own length.
# Rows are aligned physically: a slot holds, per row, a real token or a hole the attention mask hides.


@torch.inference_mode()
def keep_paths(cache: DynamicCache, past_len: int, paths: Sequence[Sequence[int]]) -> None:
    """Per batch row b, keep rows past_len + paths[b][j] at past_len + j; crop to past_len + the longest path.

    A row whose path is shorter leaves holes after it (the caller's validity mask hides them)."""
    width = max(len(p) for p in paths)
    if all(list(p) == list(range(width)) for p in paths):
        crop(cache, past_len + width)
        return
    index = _OnDevice(torch.tensor([[past_len + n for n in p] + [past_len] * (width - len(p)) for p in paths]))
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        at = index.on(layer.keys.device)
        layer.keys = torch.cat([layer.keys[:, :, :past_len], _gather_slots(layer.keys, at)], dim=2)
        layer.values = torch.cat([layer.values[:, :, :past_len], _gather_slots(layer.values, at)], dim=2)


@torch.inference_mode()
def gather_slots(cache: DynamicCache, index: torch.Tensor) -> None:
    """Replace every layer's slots by index[b] for row b (B, N): compaction of holes, left-padded."""
    on_device = _OnDevice(index)
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        at = on_device.on(layer.keys.device)
        layer.keys = _gather_slots(layer.keys, at)
        layer.values = _gather_slots(layer.values, at)


@torch.inference_mode()
def select_rows(cache: DynamicCache, rows: Sequence[int]) -> None:
    """Keep only these batch rows (finished rows stop costing compute)."""
    index = _OnDevice(torch.tensor(list(rows), dtype=torch.long))
    for layer in _layers(cache):
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        at = index.on(layer.keys.device)
        layer.keys = layer.keys.index_select(0, at)
        layer.values = layer.values.index_select(0, at)


@torch.inference_mode()
def append_rows(cache: DynamicCache, other: DynamicCache, rows: int, other_rows: int) -> None:
    """Rows of `other` (other_rows of them) join `cache` (rows of them) below its rows. Both are left-padded
    with zero slots to the wider one's length (the caller's validity mask hides the padding). A cache that
    has seen no token yet (prompts of one token) has no tensors: its rows get zero slots of their own."""
    theirs_by_index = list(_layers(other))
    for i, mine in enumerate(_layers(cache)):
        theirs = theirs_by_index[i] if i < len(theirs_by_index) else None  # a cache without config adds layers lazily
        have_mine, have_theirs = _filled(mine), _filled(theirs)
        if not have_mine and not have_theirs:
            continue
        like = mine if have_mine else theirs
        assert like is not None  # one of them is filled
        parts = []
        for layer, n in ((mine, rows), (theirs, other_rows)):
            if layer is not None and _filled(layer):
                parts.append((layer.keys, layer.values))
            else:
                empty = like.keys.new_zeros((n, like.keys.shape[1], 0, like.keys.shape[3]))
                parts.append((empty, like.values.new_zeros((n, like.values.shape[1], 0, like.values.shape[3]))))
        width = max(k.shape[2] for k, _ in parts)
        keys = torch.cat([_left_pad(k, width) for k, _ in parts], dim=0)
        values = torch.cat([_left_pad(v, width) for _, v in parts], dim=0)
        if not have_mine:
            mine.lazy_initialization(keys, values)
        mine.keys, mine.values = keys, values


def _filled(layer) -> bool:
    """Whether the layer holds (B, H, C, D) tensors, even with no rows or slots (before its first update it
    holds nothing, or an empty 1-D placeholder)."""
    return layer is not None and getattr(layer, "keys", None) is not None and layer.keys.dim() == 4


def _left_pad(x: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, 0, width - x.shape[2], 0)) if x.shape[2] < width else x


class _OnDevice:
    """One index for every layer of a step: made on the host once, copied once to each device the layers are on
    (one, unless a device map spreads them), not once per layer."""

    def __init__(self, index: torch.Tensor):
        self.copies = {index.device: index}
        self.host = index

    def on(self, device: torch.device) -> torch.Tensor:
        if device not in self.copies:
            self.copies[device] = self.host.to(device, non_blocking=True)
        return self.copies[device]


def _gather_slots(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    b, h, _, d = x.shape
    i = index.to(x.device)[:, None, :, None].expand(b, h, index.shape[1], d)
    return x.gather(2, i)
