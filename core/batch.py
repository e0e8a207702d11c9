"""Batched decoding: B prompts at once, each row with its own drafter, tree, verdict and trace.

The loop of core.engine, per row, around one forward for the whole batch:
- prompts are left-padded; the cache holds, per row, every committed token but the pending root;
- each step pads the rows' trees to the widest, with one 4D mask per row (its valid cache slots, its
  tree's ancestors; padding slots see only themselves, so no row is fully masked);
- each row keeps its own accepted path (core.cache.keep_paths), leaving holes where it accepted fewer
  tokens than the longest row; holes are squeezed out once they waste more than REPACK_SLACK slots;
- a row that finishes leaves the batch: it stops costing compute, and with more prompts than `slots`
  the next waiting prompt takes its place (prefilled in a cache of its own, then appended: continuous
  batching, so the batch stays full until the queue runs dry);
- with max_nodes=auto all rows get one tree size (core.sizing.common_size): a row padded to the widest
  tree pays for nodes it does not have, so sizes are chosen for the batch's forward, not for each row.
Position ids count each row's real tokens, so a row sees what it would see alone (up to the rounding
of a wider matmul: in float32 strict methods give each row its batch-1 tokens, bar near-ties).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import Drafter, Proposal, TopK
from core.engine import (DecodeConfig, DecodeResult, TokenText, Verifier, _stop_cut, _sync, check_prompt,
                         node_traces, step_predictions)
from core.errors import InvalidInputError
from core.sizing import TreeSizer, common_size
from core.target_stats import step_stats
from core.trace import StepTrace
from core.tree import DraftTree, ancestor_matrix

REPACK_SLACK = 64  # holes (slots per row beyond the longest row's real tokens) tolerated before compaction


@dataclass
class _Row:
    index: int  # position in the caller's list
    prompt: list[int]
    drafter: Drafter
    verifier: Verifier
    sizer: TreeSizer | None
    cfg: DecodeConfig
    sequence: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    steps: list[StepTrace] = field(default_factory=list)
    length: int = 0  # committed tokens in the cache (the pending root excluded): the root's position id
    stop_reason: str | None = None
    decode_seconds: float = 0.0
    prefill: TopK | None = None


def batch_bytes(config, dtype: torch.dtype, rows: int, prompt_len: int, max_new: int, width: int = 65) -> int:
    """What a batch adds to memory at its peak, roughly: the KV cache of `rows` rows of prompt + output +
    one tree + the tolerated holes, the prefill chunk's mask, and one step's logits. Pure."""
    elem = torch.finfo(dtype).bits // 8
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    slots = prompt_len + max_new + width + REPACK_SLACK
    cache = 2 * config.num_hidden_layers * heads * head_dim * elem * rows * slots
    chunk = min(prompt_len, kv.PREFILL_CHUNK)
    mask = rows * chunk * min(prompt_len, slots) * elem
    logits = rows * width * config.vocab_size * 4
    return cache + mask + logits


def free_bytes(device: torch.device) -> int:
    """Memory free for new tensors on `device` (CUDA: the driver's count; otherwise the system's available RAM)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return psutil.virtual_memory().available


def check_batch_fits(model, prompts: Sequence[list[int]], max_new: int) -> None:
    """Refuse, before any work, a batch whose cache and masks would not fit in free memory."""
    need = batch_bytes(model.config, model.dtype, len(prompts), max(len(p) for p in prompts), max_new)
    free = free_bytes(model.device)
    if need > 0.9 * free:
        raise InvalidInputError(
            f"a batch of {len(prompts)} prompts of up to {max(len(p) for p in prompts)} tokens with {max_new} new tokens "
            f"needs about {need / 2**30:.1f} GiB for its cache, masks and logits, and {free / 2**30:.1f} GiB are free: "
            "use a smaller --batch-size, shorter prompts or fewer new tokens")


def padded_mask(valid: torch.Tensor, trees: Sequence[DraftTree], width: int, dtype: torch.dtype) -> torch.Tensor:
    """(B, 1, W, C + W) additive mask: row b's query i sees b's valid cache slots and its tree ancestors;
    a padding query (i >= len(tree b)) sees only itself. Pure: tested without a model."""
    b, c = valid.shape
    tree_part = torch.zeros((b, width, width), dtype=torch.bool)
    for r, tree in enumerate(trees):
        q = len(tree)
        tree_part[r, :q, :q] = ancestor_matrix(tree.parents)
        tree_part[r, range(q, width), range(q, width)] = True
    past = valid[:, None, :].expand(b, width, c).clone()
    for r, tree in enumerate(trees):
        past[r, len(tree):] = False  # padding queries: themselves only
    allowed = torch.cat([past, tree_part.to(valid.device)], dim=-1)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=valid.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def _prefill(model, rows: list[_Row], cache, pad_id: int, keep_topk: int) -> torch.Tensor:
    """Feed every prompt but its last token, left-padded, in chunks; returns the validity mask (B, C)."""
    width = max(len(r.prompt) - 1 for r in rows)
    device = model.device
    valid = torch.zeros((len(rows), width), dtype=torch.bool)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        n = len(r.prompt) - 1
        if n:
            valid[b, width - n:] = True
            ids[b, width - n:] = torch.tensor(r.prompt[:-1])
            pos[b, width - n:] = torch.arange(n)
    topk_parts: list[list[np.ndarray]] = [[] for _ in rows]
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    for s in range(0, width, kv.PREFILL_CHUNK):
        e = min(width, s + kv.PREFILL_CHUNK)
        causal = torch.ones((e - s, e), dtype=torch.bool).tril(s)
        allowed = valid[:, None, :e] & causal[None]
        diag = torch.arange(e - s)
        allowed[:, diag, s + diag] = True  # padding rows see themselves: never fully masked
        mask = torch.zeros(allowed.shape, dtype=model.dtype).masked_fill_(~allowed, torch.finfo(model.dtype).min)
        hidden = decoder(input_ids=ids[:, s:e].to(device), position_ids=pos[:, s:e].to(device),
                         attention_mask=mask[:, None].to(device), use_cache=True, **kv.cache_arg(decoder, cache)).last_hidden_state
        if keep_topk:
            for b in range(len(rows)):
                real = valid[b, s:e].nonzero().flatten()
                if len(real):
                    top = head(hidden[b, real.to(hidden.device)]).float().topk(keep_topk, dim=-1)
                    topk_parts[b].append(top.indices.to(torch.int32).cpu().numpy())
    if keep_topk:
        for b, r in enumerate(rows):
            r.prefill = TopK(np.concatenate(topk_parts[b]) if topk_parts[b] else np.zeros((0, keep_topk), np.int32))
    return valid.to(device)


@torch.inference_mode()
def decode_batch(
    model,
    tokenizer,
    eos_ids: Sequence[int],
    prompts: Sequence[list[int]],
    drafters: Sequence[Drafter],
    verifiers: Sequence[Verifier],
    cfg: DecodeConfig | Sequence[DecodeConfig],
    max_context: int,
    sizers: Sequence[TreeSizer | None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    slots: int | None = None,
) -> list[DecodeResult]:
    """Decode every prompt with its drafter and verifier, batched; one DecodeResult per prompt, in order.
    `cfg` is one DecodeConfig for all rows or one per row.

    At most `slots` rows decode at once (all of them when None); a waiting prompt takes the place of a
    row that finished, so the batch stays full until the queue runs dry (continuous batching). Times are
    the stream's: a row's decode_seconds is the stream's decode time until that row finished (time spent
    prefilling admitted prompts excluded), prefill_seconds the stream's whole prefill time."""
    if not prompts:
        raise InvalidInputError("the batch is empty: give at least one prompt")
    for p in prompts:
        check_prompt(p, max_context)
    cfgs = [cfg] * len(prompts) if isinstance(cfg, DecodeConfig) else list(cfg)
    for c in cfgs:
        if c.max_new_tokens <= 0:
            raise InvalidInputError(f"max_new_tokens must be at least 1 (got {c.max_new_tokens})")
    slots = len(prompts) if slots is None else slots
    if slots < 1:
        raise InvalidInputError(f"a batch needs at least one slot (got {slots})")
    longest = sorted(prompts, key=len, reverse=True)[:slots]
    check_batch_fits(model, longest, max(c.max_new_tokens for c in cfgs))
    sizers = list(sizers) if sizers is not None else [None] * len(prompts)
    rows = [_Row(i, list(p), d, v, s, c, sequence=list(p), length=len(p) - 1)
            for i, (p, d, v, s, c) in enumerate(zip(prompts, drafters, verifiers, sizers, cfgs, strict=True))]
    device, eos, text = model.device, set(eos_ids), TokenText(tokenizer)
    pad_id = int(eos_ids[0]) if eos_ids else 0
    stream = _Stream(kv.new_cache(model), torch.zeros((0, 0), dtype=torch.bool, device=device))
    waiting = deque(rows)
    active: list[_Row] = []  # cache row b is active[b]
    while active or waiting:
        stop_all = should_stop is not None and should_stop()
        if waiting and len(active) < slots and not stop_all:
            admitted = [waiting.popleft() for _ in range(min(slots - len(active), len(waiting)))]
            _admit(model, stream, len(active), admitted, pad_id)
            active += admitted
        t_a = time.perf_counter()
        for r in active:
            if stop_all:
                r.stop_reason = "cancelled"
            elif r.length + 1 >= max_context:
                r.stop_reason = "context_full"
        active = _drop_finished(stream, active)
        if not active:
            if stop_all:
                break
            continue
        valid, cache = stream.valid, stream.cache
        proposals = []
        for r in active:
            proposal = r.drafter.propose(r.sequence)
            tree = proposal.tree.pruned(min(r.cfg.max_new_tokens - len(r.generated) - 1, max_context - r.length - 2), eos)
            proposals.append(Proposal(tree, proposal.q_rows))
        if all(r.sizer is not None for r in active):  # max_nodes=auto: one size for all rows, as they pad to the widest
            ranked = [r.sizer.ranked(p.tree) for r, p in zip(active, proposals)]
            k = common_size(ranked, active[0].sizer.cost)
            proposals = [Proposal(p.tree.subset(sorted(order[:k])), p.q_rows) for p, (order, _) in zip(proposals, ranked)]
        trees = [p.tree for p in proposals]
        width = max(len(t) for t in trees)
        ids = torch.full((len(active), width), pad_id, dtype=torch.long)
        pos = torch.zeros((len(active), width), dtype=torch.long)
        for b, (r, tree) in enumerate(zip(active, trees)):
            ids[b, : len(tree)] = torch.tensor(tree.tokens)
            pos[b, : len(tree)] = torch.tensor(tree.depths) + r.length
            pos[b, len(tree):] = r.length
        mask = padded_mask(valid, trees, width, model.dtype)
        t_b = time.perf_counter()
        past_len = valid.shape[1]
        logits = model(input_ids=ids.to(device), position_ids=pos.to(device), attention_mask=mask.to(device),
                       use_cache=True, **kv.cache_arg(model, cache)).logits
        _sync(device)
        t_c = time.perf_counter()
        paths = []
        for b, (r, proposal) in enumerate(zip(active, proposals)):
            tree, row_logits = proposal.tree, logits[b, : len(proposal.tree)]
            stats = step_stats(row_logits, tree, eos_ids)
            verdict = r.verifier(proposal, row_logits, stats)
            if r.sizer is not None:
                r.sizer.observe(tree, verdict.path)
            new = [tree.tokens[n] for n in verdict.path[1:]] + [verdict.bonus]
            new, r.stop_reason = _stop_cut(new, r.generated, r.cfg, eos, tokenizer)
            r.steps.append(StepTrace(
                index=len(r.steps), cache_pos=r.length, tree_size=tree.num_draft, accepted=len(verdict.path) - 1,
                emitted=new, nodes=node_traces(len(r.steps), r.length, tree, stats, verdict, text),
            ))
            r.sequence.extend(new)
            r.generated.extend(new)
            r.length += len(verdict.path)
            r.drafter.commit(new, step_predictions(r.drafter, row_logits, tree, verdict, len(new)))
            paths.append(verdict.path)
        t_d = time.perf_counter()
        kv.keep_paths(cache, past_len, paths)
        grown = torch.zeros((len(active), max(len(p) for p in paths)), dtype=torch.bool, device=device)
        for b, path in enumerate(paths):
            grown[b, : len(path)] = True
        stream.valid = _repack(cache, torch.cat([valid, grown], dim=1))
        t_e = time.perf_counter()
        for r in active:  # one forward served every row: each step records the batch's times
            step = r.steps[-1]
            step.draft_ms, step.forward_ms = (t_b - t_a) * 1e3, (t_c - t_b) * 1e3
            step.verify_ms, step.bookkeeping_ms = (t_d - t_c) * 1e3, (t_e - t_d) * 1e3
        active = _drop_finished(stream, active)
    return [DecodeResult(r.generated, r.steps, stream.prefill_seconds, r.decode_seconds, r.stop_reason or "cancelled",
                         r.prefill) for r in rows]


@dataclass
class _Stream:
    """The batch's shared state: its cache, which slots of it hold real tokens (B, C), and its clock."""

    cache: object
    valid: torch.Tensor
    prefill_seconds: float = 0.0  # spent prefilling admitted prompts
    started: float = field(default_factory=time.perf_counter)

    def decode_seconds(self) -> float:
        return time.perf_counter() - self.started - self.prefill_seconds


def _admit(model, stream: _Stream, rows_now: int, admitted: list[_Row], pad_id: int) -> None:
    """Prefill the admitted prompts in a cache of their own, then append their rows below the batch's."""
    t0 = time.perf_counter()
    keep_topk = max(r.drafter.prefill_topk for r in admitted)
    cache = kv.new_cache(model)
    valid = _prefill(model, admitted, cache, pad_id, keep_topk) if max(len(r.prompt) for r in admitted) > 1 \
        else torch.zeros((len(admitted), 0), dtype=torch.bool, device=model.device)
    for r in admitted:
        want = r.drafter.prefill_topk
        r.drafter.begin(list(r.prompt), TopK(r.prefill.ids[:, :want]) if want and r.prefill is not None else None)
    kv.append_rows(stream.cache, cache, rows_now, len(admitted))
    width = max(stream.valid.shape[1], valid.shape[1])
    stream.valid = torch.cat([_left_pad_slots(stream.valid[:rows_now], width), _left_pad_slots(valid, width)], dim=0)
    _sync(model.device)
    stream.prefill_seconds += time.perf_counter() - t0


def _left_pad_slots(valid: torch.Tensor, width: int) -> torch.Tensor:
    """A (B, C) validity mask widened to `width` slots with invalid ones on the left, as kv.append_rows pads."""
    return torch.nn.functional.pad(valid, (width - valid.shape[1], 0), value=False)


def _drop_finished(stream: _Stream, active: list[_Row]) -> list[_Row]:
    keep = [b for b, r in enumerate(active) if r.stop_reason is None]
    if len(keep) == len(active):
        return active
    for r in active:
        if r.stop_reason is not None:
            r.decode_seconds = stream.decode_seconds()
    kv.select_rows(stream.cache, keep)
    stream.valid = stream.valid[keep]
    return [active[b] for b in keep]


def _repack(cache, valid: torch.Tensor) -> torch.Tensor:
    """Squeeze holes out once they waste more than REPACK_SLACK slots: each row's valid slots, in order,
    right-aligned (positions ids are per row, so moving a slot changes nothing the model sees)."""
    counts = valid.sum(dim=1)
    width = int(counts.max())
    if valid.shape[1] - width <= REPACK_SLACK:
        return valid
    index = torch.zeros((valid.shape[0], width), dtype=torch.long)
    packed = torch.zeros((valid.shape[0], width), dtype=torch.bool)
    for b in range(valid.shape[0]):
        slots = valid[b].nonzero().flatten().cpu()
        index[b, width - len(slots):] = slots
        packed[b, width - len(slots):] = True
    kv.gather_slots(cache, index)
    return packed.to(valid.device)
