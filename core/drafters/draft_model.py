"""Draft-model speculative decoding: a small causal LM sharing the target's vocabulary drafts γ
tokens per step, used by `sd`, `csd` and CSD's baselines.

The draft model keeps its own KV cache in step with the target's: it holds a prefix of the
committed sequence, `propose` feeds what it has not seen yet and drafts γ tokens one forward each,
and `commit` crops it back to the longest prefix that is still committed. A drafted token that the
target accepted is therefore never fed twice; only the last drafted token (never fed, since nothing
was drafted after it) and the target's bonus token are fed at the next step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from core import cache as kv
from core.drafters.base import DraftEnv, Proposal, TopK
from core.errors import InvalidInputError
from core.hot_types import CausalLM, KVCache
from core.params import auto_or, is_auto
from core.target_stats import sampling_processors
from core.tree import DraftTree
from core.types import Source

AUTO_GAMMA_MAX = 16  # gamma=auto: the longest draft
START_CONFIDENCE = 0.4  # gamma=auto: the first threshold (transformers' assistant_confidence_threshold default)
HISTORY = 512  # gamma=auto: the judged draft tokens the threshold is tuned on (the latest ones)


def tune_threshold(probs: Sequence[float], accepted: Sequence[bool], current: float = START_CONFIDENCE) -> float:
    """The confidence threshold closest to the ROC curve's ideal corner: among the observed draft probabilities as
    cut-offs, the one minimising (1 − TPR)² + FPR², where a positive is an accepted draft token (transformers tunes
    `assistant_confidence_threshold` the same way); ties go to the lowest cut. Needs both outcomes; otherwise
    `current` stays. Pure.

    One sort and running counts (O(n log n); it runs after every step of `gamma=auto`): with the probabilities sorted,
    the tokens at or above the j-th distinct cut are those from its first occurrence on."""
    p = np.asarray(probs, dtype=np.float64)
    ok = np.asarray(accepted, dtype=bool)
    pos = int(ok.sum())
    neg = len(ok) - pos
    if not pos or not neg:
        return current
    order = np.argsort(p, kind="stable")
    p, ok = p[order], ok[order]
    first = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])  # where each distinct cut starts
    accepted_below = np.r_[0, np.cumsum(ok)][first]  # accepted tokens below each cut
    tpr = (pos - accepted_below) / pos
    fpr = (neg - (first - accepted_below)) / neg
    cost = (1 - tpr) ** 2 + fpr**2
    return float(p[first[int(np.argmin(cost))]])  # argmin takes the first minimum: ties go to the lowest cut


class DraftModelDrafter:
    """Drafts one chain of γ tokens with a draft model (greedy at T = 0, sampled at T > 0).

    At T > 0 the proposal carries the draft's sampling distributions q (same warpers as the target's)
    as `q_rows` (γ, V) for the rejection-sampling verifier; every node's `draft_p` is q(x), or at
    T = 0 the draft's softmax probability of its argmax token.
    """

    prefill_topk = 0
    generated_topk = 0
    joins_commits = False  # commit compares the tokens with the chain it drafted last
    node_sources: frozenset[Source] = frozenset({"draft"})
    scores_nodes = False  # a node's draft_p is the draft's probability, not a calibrated confidence

    def __init__(
        self,
        model: CausalLM,
        gamma: int = 6,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
    ):
        # gamma=auto: draft up to AUTO_GAMMA_MAX, stopping after a token less confident than the tuned threshold
        self.adaptive = is_auto(gamma)
        self.model, self.gamma, self.temperature = model, auto_or(gamma, AUTO_GAMMA_MAX), float(temperature)
        self.threshold = START_CONFIDENCE
        self.seen_p: list[float] = []  # gamma=auto: draft probabilities of judged draft tokens, and whether accepted
        self.seen_ok: list[bool] = []
        self.drafted_p: list[float] = []
        self.processors = sampling_processors(temperature, top_k, top_p) if temperature > 0 else None
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        self.cache: KVCache = kv.new_cache(model)  # begin() starts a fresh one per request
        self.n_cached = 0  # the cache holds sequence[:n_cached] of the committed sequence
        self.drafted: list[int] = []  # the last proposal's tokens
        self.base = 0  # len(sequence) at the last proposal

    @classmethod
    def from_params(cls, params: dict[str, Any], env: DraftEnv) -> "DraftModelDrafter":
        if env.draft is None:
            raise InvalidInputError(
                "this method drafts with a draft model: pass --draft (e.g. the qwen2.5-coder-0.5b preset)"
            )
        check_draft(env.target, env.draft)
        return cls(
            env.draft.model,
            params["gamma"],
            float(params.get("temperature", 0.0)),
            params.get("top_k", 0),
            params.get("top_p", 1.0),
            env.generator,
        )

    def begin(self, prompt_ids: list[int], prefill: TopK | None) -> None:
        self.cache = kv.new_cache(self.model)
        self.n_cached, self.drafted, self.base = 0, [], 0
        # The prompt but its last token, like the target: that token is the first step's root.
        for start in range(0, len(prompt_ids) - 1, kv.PREFILL_CHUNK):
            self._forward(prompt_ids[start : min(start + kv.PREFILL_CHUNK, len(prompt_ids) - 1)])

    @torch.inference_mode()
    def _forward(self, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Feed `ids` (host ids, or a (1, n) tensor on the model's device) after the cached prefix; the (V,) logits
        for the token after the last one."""
        device = self.model.device
        input_ids = ids if isinstance(ids, torch.Tensor) else torch.tensor([list(ids)], device=device)
        n = input_ids.shape[1]
        pos = torch.arange(self.n_cached, self.n_cached + n, device=device)[None]
        out = self.model(
            input_ids=input_ids,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **kv.cache_arg(self.model, self.cache),
        )
        self.n_cached += n
        return out.logits[0, -1].float()

    def _choose(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The next draft token as a (1,) tensor and its draft probability as a 0-d tensor, both where the
        logits are (nothing waits for the device); at T > 0 also the sampling distribution q."""
        if self.processors is None:
            token = logits.argmax(-1, keepdim=True)
            return (
                token,
                torch.exp(logits.gather(0, token)[0] - torch.logsumexp(logits, -1)),
                None,
            )  # gather: no scalar index
        q = torch.softmax(self.processors(None, logits[None])[0], dim=-1)  # type: ignore[arg-type]  # warpers read no ids
        token = torch.multinomial(q, 1, generator=self.generator)
        return token, q.gather(0, token)[0], q

    @torch.inference_mode()
    def propose(self, sequence: list[int]) -> Proposal:
        if self.n_cached >= len(sequence):  # never happens in the engine's loop; keep one token to feed
            kv.crop(self.cache, len(sequence) - 1)
            self.n_cached = len(sequence) - 1
        logits = self._forward(sequence[self.n_cached :])
        # The chain stays on the device: each token is fed back as a tensor, and the tokens and their
        # probabilities cross to the host once, at the end. Only gamma=auto reads each p as it drafts (its stop).
        tokens, probs, qs = [], [], []
        for i in range(self.gamma):
            token, p, q = self._choose(logits)
            tokens.append(token)
            probs.append(p)
            qs.append(q)
            if self.adaptive and float(p) < self.threshold:
                break
            if i + 1 < self.gamma:
                logits = self._forward(token[None])
        host = torch.stack([torch.cat(tokens).double(), torch.stack(probs).double()]).tolist()
        token_ids, draft_p = [int(t) for t in host[0]], host[1]
        self.base, self.drafted, self.drafted_p = len(sequence), token_ids, draft_p
        tree = DraftTree.root_only(sequence[-1])
        node = 0
        for token_id, p_host in zip(token_ids, draft_p):
            node = tree.add(node, token_id, "draft", p_host)
        return Proposal(tree, torch.stack([q for q in qs if q is not None]) if self.processors is not None else None)

    def commit(self, new_tokens: list[int], predictions: np.ndarray | None) -> None:
        # The cache holds sequence + drafted[:-1]; keep the part the committed tokens agree with.
        agree = 0
        for a, b in zip(self.drafted[:-1], new_tokens):
            if a != b:
                break
            agree += 1
        if self.adaptive:  # the accepted prefix, then the first rejected token (if any) were judged
            accepted = next(
                (j for j, (a, b) in enumerate(zip(self.drafted, new_tokens)) if a != b),
                min(len(self.drafted), len(new_tokens)),
            )
            # a token after the accepted ones was rejected, unless the step was cut there (EOS, length, stop string)
            judged = min(len(self.drafted), accepted + (accepted < len(new_tokens)))
            self.seen_p += self.drafted_p[:judged]
            self.seen_ok += [j < accepted for j in range(judged)]
            self.seen_p, self.seen_ok = self.seen_p[-HISTORY:], self.seen_ok[-HISTORY:]
            self.threshold = tune_threshold(self.seen_p, self.seen_ok, self.threshold)
        keep = min(self.n_cached, self.base + agree)
        if keep < self.n_cached:
            kv.crop(self.cache, keep)
            self.n_cached = keep
        self.drafted = []


# -- the pair check -------------------------------------------------------------------------
_CHECKED_PAIRS: set[tuple[str, str]] = set()


def check_draft(target, draft) -> None:
    """Refuse a draft model whose tokenizer differs from the target's (core.models.check_pair)."""
    from core.models import check_pair

    key = (getattr(target, "fingerprint", ""), getattr(draft, "fingerprint", ""))
    if key in _CHECKED_PAIRS:
        return
    if hasattr(target.tokenizer, "get_vocab") and hasattr(draft.tokenizer, "get_vocab"):
        check_pair(target, draft)
    elif type(target.tokenizer) is not type(draft.tokenizer):
        raise InvalidInputError(
            f"cannot tell whether {draft.name!r} shares the tokenizer of {target.name!r}: "
            "their tokenizers are of different kinds and list no vocabulary"
        )
    _CHECKED_PAIRS.add(key)
