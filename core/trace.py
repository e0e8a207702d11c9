"""Plain records of what a run did: one RunTrace, its StepTraces, and one NodeTrace per tree node.

These are the data the store, the replay and the re-scoring read; a node record carries every
number a verification rule looks at, so a step can be re-scored under new thresholds without the model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.types import DECISIONS, SOURCES, Decision, Source

__all__ = ["DECISIONS", "SOURCES", "STATUSES", "NodeTrace", "RunTrace", "StepTrace"]
STATUSES = ("running", "complete", "failed", "cancelled")


@dataclass
class NodeTrace:
    step: int
    cache_pos: int  # P: the cache length when the step started; node positions are P + depth
    node: int  # index in the step's tree (0 = root); the bonus record gets index len(tree)
    parent: int  # -1 for the root
    depth: int
    token_id: int
    token_text: str
    source: Source
    decision: Decision
    reason: str
    # Statistics of the parent's target distribution (temperature 1); None for the root.
    p: float | None = None  # target probability of this token
    entropy: float | None = None  # nats
    max_p: float | None = None
    p_eos: float | None = None
    rank: int | None = None  # 0 = the argmax
    logit_gap: float | None = None  # top logit minus this token's logit (>= 0)
    threshold: float | None = None  # the threshold the rule used, where it has one
    draft_p: float | None = None  # draft-model probability (draft-model methods)
    correction_id: int | None = None  # CSD: the target's correction token at a rejection
    mem_count: int | None = None  # CSD: memory count read before the update
    confidence: float | None = None  # the drafter's own score of the node (suffix: core.suffix.draft.node_confidence)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepTrace:
    index: int
    cache_pos: int
    tree_size: int  # draft nodes, root excluded
    accepted: int  # draft tokens accepted (the bonus excluded)
    emitted: list[int]  # tokens committed by this step (accepted path + bonus, cut at a stop)
    draft_ms: float = 0.0
    forward_ms: float = 0.0
    verify_ms: float = 0.0
    bookkeeping_ms: float = 0.0
    nodes: list[NodeTrace] = field(default_factory=list)

    @property
    def step_ms(self) -> float:
        return self.draft_ms + self.forward_ms + self.verify_ms + self.bookkeeping_ms


@dataclass
class RunTrace:
    method: str
    params: dict[str, Any]
    model: str
    draft_model: str | None
    device: str
    dtype: str
    prompt: str
    prompt_ids: list[int]
    context: str | None = None
    output_text: str = ""
    output_ids: list[int] = field(default_factory=list)
    steps: list[StepTrace] = field(default_factory=list)
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    # Decoding CPU seconds over the same span as decode_seconds (core.engine.decode_cpu_clock: the decoding thread's on
    # one torch thread, the process's on more): time spent waiting while other programs held the core is left out, so speed-ups are ratios of it when both runs have it (core.stats.speedup). None when
    # not measured (a run stored before it was recorded, a batch row, a run made by transformers' generate(), a run on
    # a GPU, where the thread's time is launches and waits).
    decode_cpu_seconds: float | None = None
    status: str = "running"
    error: str | None = None
    stop_reason: str | None = None  # eos | stop_string | max_new_tokens
    model_fingerprint: str | None = None
    draft_fingerprint: str | None = None
    # For runs that transformers' generate() made: tokens per step when a streamer could see them.
    external_accept_lengths: list[int] | None = None

    @property
    def accept_lengths(self) -> list[int]:
        if self.external_accept_lengths is not None:
            return list(self.external_accept_lengths)
        return [len(s.emitted) for s in self.steps]
