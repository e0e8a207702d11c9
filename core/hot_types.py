"""The types of what the hot path holds besides tensors: the model it runs, its KV cache and the tokenizer.

`CausalLM` and `KVCache` are transformers' own classes (core.models loads every model, GGUF included, as a
transformers causal LM; core.cache makes every cache). `Tokenizer` is a protocol: a step only decodes ids to text
(stop strings, the traces' token texts), so anything with `decode` will do, a test's stand-in too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

from transformers import DynamicCache, PreTrainedModel

CausalLM: TypeAlias = PreTrainedModel  # a decoder with an LM head: `model(input_ids=..., position_ids=...)`.logits
KVCache: TypeAlias = DynamicCache


class Tokenizer(Protocol):
    def decode(self, token_ids: Sequence[int], /) -> str:
        """The text of `token_ids` (transformers' tokenizers return str)."""
