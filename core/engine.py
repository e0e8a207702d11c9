"""The decoding loop: prefill, then per step draft a tree, verify it in one forward pass, keep the
accepted path in the KV cache and emit its tokens plus one bonus token.

Invariant: the cache holds every committed token but the last; that pending token is the root of
the next tree, at position P = cache length. Plain greedy decoding is this loop with root-only trees.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import Drafter, Proposal, TopK, TreeObserver, TreeTopK
from core.errors import InvalidInputError
from core.sizing import TreeSizer
from core.target_stats import StepStats, step_stats
from core.trace import NodeTrace, StepTrace
from core.tree import DraftTree, is_chain, position_ids, tree_attention_mask
from core.walk import Verdict

TOPK_CHUNK = 256  # prompt positions per lm-head chunk when keeping prefill top-k


@dataclass
class DecodeConfig:
    max_new_tokens: int = 128
    stop_strings: Sequence[str] = ()


# Judges one step's proposal from the target's logits and their statistics (core.walk does the deciding).
Verifier = Callable[[Proposal, torch.Tensor, StepStats], Verdict]


@dataclass
class DecodeResult:
    output_ids: list[int]
    steps: list[StepTrace]
    prefill_seconds: float
    decode_seconds: float
    stop_reason: str  # eos | stop_string | max_new_tokens | context_full | cancelled
    prefill: TopK | None = field(default=None, repr=False)  # what the drafter was given at the start


class Cancelled(Exception):
    """Raised inside the loop when the caller asked to stop; carries what was decoded so far."""

    def __init__(self, partial: DecodeResult):
        super().__init__("cancelled")
        self.partial = partial


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def prefill(model, ids: list[int], cache, keep_topk: int = 0) -> tuple[TopK | None, torch.Tensor]:
    """Fill the cache with `ids` and return the logits that follow the last one, as (V,); optionally
    keep the top-k predictions at every earlier position (the rows that predict ids[1:]).

    Runs the decoder without the LM head, then applies the head to the last row, and in small
    chunks to the others only when top-k is wanted: full logits of a long prompt take hundreds of MB.
    """
    device = model.device
    decoder = model.get_decoder()
    head = model.get_output_embeddings()
    ids_parts = []
    for start in range(0, len(ids), kv.PREFILL_CHUNK):
        chunk = torch.tensor([ids[start : start + kv.PREFILL_CHUNK]], device=device)
        pos = torch.arange(start, start + chunk.shape[1], device=device)[None]
        hidden = decoder(input_ids=chunk, position_ids=pos, use_cache=True, **kv.cache_arg(decoder, cache)).last_hidden_state[0]
        rows = min(hidden.shape[0], len(ids) - 1 - start)  # the last id's row is the first step's root
        for s in range(0, rows, TOPK_CHUNK) if keep_topk else ():
            # Top-k of the logits is top-k of the probabilities: no softmax over the vocabulary needed.
            top = head(hidden[s : min(s + TOPK_CHUNK, rows)]).float().topk(keep_topk, dim=-1)
            ids_parts.append(top.indices.to(torch.int32).cpu().numpy())
    last_logits = head(hidden[-1:].contiguous())[0]
    if not keep_topk:
        return None, last_logits
    if not ids_parts:  # a one-token prompt: nothing before the pending token
        return TopK(np.zeros((0, keep_topk), np.int32)), last_logits
    return TopK(np.concatenate(ids_parts)), last_logits


@torch.inference_mode()
def forward_tree(model, tree: DraftTree, past_len: int, cache, root_logits: torch.Tensor | None = None) -> torch.Tensor:
    """One target forward over the tree; (Q, V) logits. Chains use the model's own causal mask.

    With `root_logits` the root is already in the cache (the prompt pass fed it, as transformers'
    generate does) and those are its logits: only the draft nodes go through the model, and a tree
    without drafts needs no forward at all.
    """
    device = model.device
    skip = 0 if root_logits is None else 1
    if skip and tree.num_draft == 0:
        return root_logits[None]
    input_ids = torch.tensor([tree.tokens[skip:]], device=device)
    mask = None if is_chain(tree.parents) else tree_attention_mask(tree.parents, past_len, model.dtype, device)[:, :, skip:]
    out = model(
        input_ids=input_ids,
        position_ids=position_ids(tree.depths, past_len, device)[:, skip:],
        attention_mask=mask,
        use_cache=True,
        **kv.cache_arg(model, cache),
    )
    return out.logits[0] if not skip else torch.cat([root_logits[None], out.logits[0]])


def step_predictions(drafter: Drafter, logits: torch.Tensor, tree: DraftTree, verdict: Verdict, n_new: int) -> np.ndarray | None:
    """What the drafter declared it wants from this step's forward, from one topk and one host transfer:
    a TreeObserver sees the top `tree_topk` ids of every tree row; the returned `commit` predictions are
    the top `generated_topk` ids of the rows that chose the committed tokens (None when not wanted)."""
    observer = drafter if isinstance(drafter, TreeObserver) and drafter.tree_topk else None
    k = max(drafter.generated_topk, observer.tree_topk if observer is not None else 0)
    if not k:
        return None
    chose = verdict.path[:n_new]  # row path[j] is the distribution that chose new[j] (the bonus: the last row)
    top = (logits if observer is not None else logits[chose]).topk(k, dim=-1).indices.to(torch.int32).cpu().numpy()
    if observer is None:
        return top[:, : drafter.generated_topk]
    observer.observe_tree(TreeTopK(np.asarray(tree.tokens, np.int32), top, list(verdict.path)))
    return top[chose, : drafter.generated_topk] if drafter.generated_topk else None


class TokenText:
    """Per-run memo of token id -> text, so traces do not re-decode the same ids every step."""

    def __init__(self, tokenizer):
        self.tokenizer, self.memo = tokenizer, {}

    def __call__(self, token_id: int) -> str:
        text = self.memo.get(token_id)
        if text is None:
            text = self.memo[token_id] = self.tokenizer.decode([token_id])
        return text


def node_traces(step: int, past_len: int, tree: DraftTree, stats: StepStats, verdict: Verdict, text: TokenText) -> list[NodeTrace]:
    records = []
    for i in range(len(tree)):
        n = stats.nodes[i]
        extra = verdict.extra[i] if verdict.extra else {}
        records.append(
            NodeTrace(
                step=step, cache_pos=past_len, node=i, parent=tree.parents[i], depth=tree.depths[i],
                token_id=tree.tokens[i], token_text=text(tree.tokens[i]), source=tree.sources[i],
                decision=verdict.decisions[i], reason=verdict.reasons[i],
                p=n.p if n else None, entropy=n.entropy if n else None, max_p=n.max_p if n else None,
                p_eos=n.p_eos if n else None, rank=n.rank if n else None, logit_gap=n.logit_gap if n else None,
                threshold=verdict.thresholds[i], draft_p=tree.draft_probs[i], **extra,
            )
        )
    last = verdict.path[-1]
    bonus_lp = stats.logprob(last, verdict.bonus)
    records.append(
        NodeTrace(
            step=step, cache_pos=past_len, node=len(tree), parent=last, depth=tree.depths[last] + 1,
            token_id=verdict.bonus, token_text=text(verdict.bonus), source="model", decision="bonus",
            reason="the target's own token after the last accepted node",
            p=math.exp(bonus_lp), entropy=stats.row_entropy[last], max_p=stats.row_max_p[last],
            p_eos=stats.row_p_eos[last], rank=stats.rank(last, verdict.bonus),
            logit_gap=math.log(stats.row_max_p[last]) - bonus_lp,
        )
    )
    return records


def check_prompt(prompt_ids: Sequence[int], max_context: int) -> None:
    if not prompt_ids:
        raise InvalidInputError("the prompt is empty: give at least one token of text")
    if len(prompt_ids) >= max_context:
        raise InvalidInputError(
            f"the prompt has {len(prompt_ids)} tokens but the model's context is {max_context}: "
            "shorten the prompt or the context (or truncate its middle)"
        )


def _stop_cut(new: list[int], generated: list[int], cfg: DecodeConfig, eos_ids: Sequence[int], tokenizer) -> tuple[list[int], str | None]:
    """Cut this step's tokens at the first stop condition; return them and the reason, if any."""
    for j, tok in enumerate(new):
        if tok in eos_ids:
            return new[: j + 1], "eos"
    remaining = cfg.max_new_tokens - len(generated)
    if len(new) >= remaining:
        new, reason = new[:remaining], "max_new_tokens"
    else:
        reason = None
    if cfg.stop_strings:
        recent = generated[-STOP_WINDOW:]  # all the window can reach: no copy of the whole output per step
        end = stop_string_end(tokenizer, recent + new, cfg.stop_strings, start=len(recent))
        if end is not None:
            return new[: end - len(recent)], "stop_string"
    return new, reason


STOP_WINDOW = 32  # tokens decoded around each new token: more than any stop string spans, and cheap per step


def stop_string_end(tokenizer, ids: Sequence[int], stop_strings: Sequence[str], start: int = 0) -> int | None:
    """The shortest prefix length j > start of `ids` whose last STOP_WINDOW tokens' text holds a stop
    string: cut there, the token that completes the stop string kept. None when no stop string appears.
    The one rule for our engine and for transformers' baselines, so both stop on the same token."""
    for j in range(start + 1, len(ids) + 1):
        tail = tokenizer.decode(list(ids[max(0, j - STOP_WINDOW) : j]))
        if any(s in tail for s in stop_strings):
            return j
    return None


@torch.inference_mode()
def decode(
    model,
    tokenizer,
    eos_ids: Sequence[int],
    prompt_ids: list[int],
    drafter: Drafter,
    verifier: Verifier,
    cfg: DecodeConfig,
    max_context: int,
    on_step: Callable[[StepTrace], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    sizer: TreeSizer | None = None,
) -> DecodeResult:
    """Decode `prompt_ids` with the drafter's trees and the verifier's decisions; with a `sizer`
    (max_nodes=auto) each proposed tree is first cut to the size that pays most on this hardware."""
    check_prompt(prompt_ids, max_context)
    if cfg.max_new_tokens <= 0:
        raise InvalidInputError(f"max_new_tokens must be at least 1 (got {cfg.max_new_tokens})")
    device = model.device
    eos = set(eos_ids)
    text = TokenText(tokenizer)
    cache = kv.new_cache(model)

    t0 = time.perf_counter()
    # The whole prompt goes in here, its last row giving the first step's root distribution: one forward
    # fewer than feeding the last prompt token with the first draft, and what transformers' generate does.
    prompt_topk, root_logits = prefill(model, prompt_ids, cache, drafter.prefill_topk)
    drafter.begin(list(prompt_ids), prompt_topk)  # a draft model prefills here too: time it as prefill
    _sync(device)
    prefill_s = time.perf_counter() - t0

    sequence, generated, steps = list(prompt_ids), [], []
    past_len = len(prompt_ids) - 1
    stop_reason = None
    t_decode = time.perf_counter()
    while stop_reason is None:
        if should_stop is not None and should_stop():
            stop_reason = "cancelled"
            break
        if past_len + 1 >= max_context:
            stop_reason = "context_full"
            break
        t_a = time.perf_counter()
        proposal = drafter.propose(sequence)
        # Nothing deeper than the tokens still wanted, nor past the model's context; no draft of EOS or
        # past it, as in transformers' prompt lookup: if the target wants to stop, its bonus token is EOS.
        tree = proposal.tree.pruned(min(cfg.max_new_tokens - len(generated) - 1, max_context - past_len - 2), eos)
        if sizer is not None:
            tree = sizer.choose(tree)
        proposal = Proposal(tree, proposal.q_rows)  # q_rows are per depth: a pruned chain keeps its prefix
        t_b = time.perf_counter()
        logits = forward_tree(model, tree, past_len, cache, root_logits)
        root_logits = None  # from the second step on, the root is the last step's bonus, not yet fed
        _sync(device)
        t_c = time.perf_counter()
        stats = step_stats(logits, tree, eos_ids)
        verdict = verifier(proposal, logits, stats)
        if sizer is not None:
            sizer.observe(tree, verdict.path)
        t_d = time.perf_counter()
        kv.keep_path(cache, past_len, verdict.path)
        new = [tree.tokens[n] for n in verdict.path[1:]] + [verdict.bonus]
        new, stop_reason = _stop_cut(new, generated, cfg, eos, tokenizer)
        step = StepTrace(
            index=len(steps), cache_pos=past_len, tree_size=tree.num_draft, accepted=len(verdict.path) - 1,
            emitted=new, nodes=node_traces(len(steps), past_len, tree, stats, verdict, text),
        )
        sequence.extend(new)
        generated.extend(new)
        past_len += len(verdict.path)
        drafter.commit(new, step_predictions(drafter, logits, tree, verdict, len(new)))
        t_e = time.perf_counter()
        step.draft_ms, step.forward_ms = (t_b - t_a) * 1e3, (t_c - t_b) * 1e3
        step.verify_ms, step.bookkeeping_ms = (t_d - t_c) * 1e3, (t_e - t_d) * 1e3
        steps.append(step)
        if on_step is not None:
            on_step(step)
    result = DecodeResult(generated, steps, prefill_s, time.perf_counter() - t_decode, stop_reason, prompt_topk)
    if stop_reason == "cancelled":
        raise Cancelled(result)
    return result
