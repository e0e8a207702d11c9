"""The llmlingua package's compressors, imported only when asked for: LLMLingua-1 (`llmlingua`, a local
causal-LM folder) and LLMLingua-2 (`llmlingua2`, a token classifier from the hub or WORKBENCH_LLMLINGUA2_MODEL).
Both need tiktoken's BPE file; whatever is out of reach is CompressorUnavailable, saying which."""

from __future__ import annotations

import os
import time
from typing import Any

from core import cache as kv
from core.compress.spec import Compression, CompressorUnavailable, check_context, check_rate


def import_prompt_compressor(compressor: str):
    """llmlingua's PromptCompressor class, imported only when an llmlingua compressor is asked for."""
    try:
        from llmlingua import PromptCompressor
    except ImportError as e:
        raise CompressorUnavailable(
            f"the {compressor} compressor needs the llmlingua package ({e}): pip install llmlingua==0.2.2, "
            f"or use --compressor selfinfo (built in, offline)"
        ) from None
    return PromptCompressor


class LLMLinguaCompressor:
    """LLMLingua-1 (`llmlingua.PromptCompressor`) over a local causal-LM folder, imported only when used."""

    name = "llmlingua"
    classifier: str | None = None  # LLMLingua-2's token classifier (hub id or folder); LLMLingua-1 has none
    # compress_prompt's arguments besides the context and the rate: the token-level filter alone
    options: dict[str, Any] = {
        "use_sentence_level_filter": False,
        "use_context_level_filter": False,
        "use_token_level_filter": True,
    }

    def __init__(self, model_path: str, tokenizer=None, device: str = "cpu"):
        PromptCompressor = import_prompt_compressor(self.name)
        self.tokenizer = tokenizer
        try:
            # no remote code (llmlingua's own default is to allow it): a local folder's Python stays unread
            self.pc = PromptCompressor(
                model_name=str(model_path), device_map=str(device), model_config={"trust_remote_code": False}
            )
        except Exception as e:  # tiktoken's download, a model it cannot read, an API it no longer finds
            raise CompressorUnavailable(llmlingua_failure(e, "start")) from None
        self.pc.model = LegacyCacheLM(self.pc.model)

    def compress(self, context: str, rate: float) -> Compression:
        rate = check_rate(rate)
        started = time.perf_counter()
        context = check_context(context)
        if rate >= 1.0:
            n = self._count(context)
            return Compression(context, self.name, rate, 1.0, n, n, time.perf_counter() - started)
        try:
            res = self.pc.compress_prompt([context], rate=rate, **self.options)
        except Exception as e:
            raise CompressorUnavailable(llmlingua_failure(e, "compress", self.name, self.classifier)) from None
        text = str(res["compressed_prompt"]).strip("\n")
        n_in, n_out = self._count(context), self._count(text)
        return Compression(text, self.name, rate, n_out / max(n_in, 1), n_in, n_out, time.perf_counter() - started)

    def _count(self, text: str) -> int:
        tok = self.tokenizer if self.tokenizer is not None else self.pc.tokenizer
        return len(tok(text, add_special_tokens=False).input_ids)


LLMLINGUA2_MODEL_ENV = "WORKBENCH_LLMLINGUA2_MODEL"  # the classifier: a hub id or a local folder
DEFAULT_LLMLINGUA2_MODEL = "microsoft/llmlingua-2-bert-base-multilingual-cased-meetingbank"  # the paper's small one
# llmlingua 0.2.2 picks its word splitting by a substring of the model name (WordPiece "##" or SentencePiece "▁")
# and raises NotImplementedError for any other name, such as a local folder's: the name it expects, per model type.
LLMLINGUA2_WORD_SPLITTING = {"bert": "bert-base-multilingual-cased", "xlm-roberta": "xlm-roberta-large"}


def llmlingua2_classifier() -> str:
    """The classifier LLMLingua-2 loads: WORKBENCH_LLMLINGUA2_MODEL (hub id or folder) or the default hub id."""
    return os.path.expanduser(os.environ.get(LLMLINGUA2_MODEL_ENV, "").strip()) or DEFAULT_LLMLINGUA2_MODEL


class LLMLingua2Compressor(LLMLinguaCompressor):
    """LLMLingua-2 (`PromptCompressor(..., use_llmlingua2=True)`): a token classifier keeps the words it labels
    most likely to matter. It reads text only, so the target serves just to count the rate reached."""

    name = "llmlingua2"
    # the package README's call (compress_prompt(prompt, rate=..., force_tokens=['\n', '?'])): line breaks and
    # question marks always kept; the one context is compressed by the token-level filter alone
    options = {"use_context_level_filter": False, "use_token_level_filter": True, "force_tokens": ["\n", "?"]}

    def __init__(self, classifier: str | None = None, tokenizer=None, device: str = "cpu"):
        PromptCompressor = import_prompt_compressor(self.name)
        self.classifier, self.tokenizer = classifier or llmlingua2_classifier(), tokenizer
        if self.classifier.startswith(("/", ".")) and not os.path.isdir(self.classifier):
            raise CompressorUnavailable(
                f"llmlingua2: {LLMLINGUA2_MODEL_ENV}={self.classifier} is not a folder; give the "
                f"folder of an LLMLingua-2 classifier (its config, tokenizer and weights) or a hub id "
                f"(default {DEFAULT_LLMLINGUA2_MODEL}), or use --compressor selfinfo (built in, offline)"
            )
        try:  # no remote code: the classifier may be any hub id the environment names
            self.pc = PromptCompressor(
                model_name=self.classifier,
                device_map=str(device),
                use_llmlingua2=True,
                model_config={"trust_remote_code": False},
            )
        except Exception as e:  # tiktoken's download, the classifier's, a folder it cannot read
            raise CompressorUnavailable(llmlingua_failure(e, "start", self.name, self.classifier)) from None
        model_type = getattr(self.pc.model.config, "model_type", None)
        if (
            not type(self.pc.model).__name__.endswith("ForTokenClassification")
            or model_type not in LLMLINGUA2_WORD_SPLITTING
        ):
            raise CompressorUnavailable(
                f"llmlingua2: {self.classifier} loads as {type(self.pc.model).__name__} "
                f"(model type {model_type}); LLMLingua-2 needs a token classifier of type "
                f"{' or '.join(LLMLINGUA2_WORD_SPLITTING)}, such as {DEFAULT_LLMLINGUA2_MODEL}"
            )
        self.pc.model_name = LLMLINGUA2_WORD_SPLITTING[model_type]  # read only to split words (see above)


class LegacyCacheLM:
    """llmlingua 0.2.2, written for transformers 4, passes and slices the KV cache as per-layer (key, value)
    pairs; transformers 5 speaks DynamicCache. This wrapper converts at the boundary (everything else is the model)."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def __call__(self, input_ids, attention_mask=None, past_key_values=None, use_cache=True, **kwargs):
        extra = {}
        if past_key_values is not None:
            extra = kv.cache_arg(self.model, kv.from_layer_pairs(past_key_values, self.model.config))
        out = self.model(input_ids, attention_mask=attention_mask, use_cache=use_cache, **extra, **kwargs)
        returned = getattr(out, "past_key_values", None)
        if returned is None:
            returned = getattr(out, "cache", None)
        pairs = kv.layer_pairs(returned) if returned is not None else None
        if pairs is not None:
            out.past_key_values = pairs
        return out


def llmlingua_failure(
    error: BaseException, when: str, compressor: str = "llmlingua", classifier: str | None = None
) -> str:
    """A readable reason an llmlingua compressor could not run: tiktoken's BPE file out of reach (both), LLMLingua-2's
    classifier out of reach on the hub (`classifier` given), or whatever else failed."""
    text = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"  # on one line: transformers' spans two
    if classifier is not None and _hub_failure(error):
        if os.path.isdir(classifier):  # transformers names the hub even when a local folder lacks a file
            return (
                f"{compressor} could not {when}: its classifier model could not be loaded from the folder {classifier} "
                f"({text}); it must hold a token classifier as save_pretrained writes it (config.json, tokenizer, "
                f"weights), e.g. {DEFAULT_LLMLINGUA2_MODEL}; or use --compressor selfinfo (built in, offline)"
            )
        return (
            f"{compressor} could not {when}: its classifier model {classifier} could not be loaded from the Hugging "
            f"Face hub (offline?) ({text}). Go online once (the hub caches it), or set {LLMLINGUA2_MODEL_ENV} to a "
            f"local folder holding the classifier; or use --compressor selfinfo (built in, offline)"
        )
    names = {type(c).__name__ for c in type(error).__mro__} | {type(error).__module__.split(".")[0]}
    network = (
        bool(names & {"ConnectionError", "requests", "urllib3", "Timeout"})
        or "openaipublic" in str(error)
        or "tiktoken" in str(error)
    )
    if network:
        return (
            f"{compressor} could not {when}: at start it calls tiktoken.encoding_for_model('gpt-3.5-turbo'), which "
            f"downloads the cl100k_base BPE file from openaipublic.blob.core.windows.net, and that failed ({text}). Go "
            f"online once, or put the cached file in TIKTOKEN_CACHE_DIR; or use --compressor selfinfo (built in, offline)"
        )
    return f"{compressor} could not {when} ({text}); use --compressor selfinfo (built in, offline)"


def _hub_failure(error: BaseException) -> bool:
    """Whether `error` (or one it was raised from) is the Hugging Face hub out of reach: transformers' OSError
    ("We couldn't connect to 'https://huggingface.co' ...") over huggingface_hub's LocalEntryNotFoundError and kin."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        message = str(error).lower()
        if (
            type(error).__module__.startswith("huggingface_hub")
            or "huggingface.co" in message
            or "couldn't connect" in message
        ):
            return True
        error = error.__cause__ or error.__context__
    return False
