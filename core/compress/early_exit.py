"""Early-exit scoring: a causal LM's decoder run on its first K layers, then its own final norm and LM head,
carved from the loaded model without copying a weight (`early_exit_decoder`), and checked once per model on a
short probe (`scoring_path`). `selfinfo[layers=K]` scores with it (about K/L of a forward)."""

from __future__ import annotations

import weakref
from typing import Any

from core.compress.spec import CompressorUnavailable
from core.errors import InvalidInputError


def decoder_of(model):
    """(decoder stack, LM head) of a transformers causal LM: the base model (its decoder layers and final norm)
    and the output projection. Logits are head(decoder(x)) for Llama-, Qwen2- and Mistral-style models."""
    get_decoder, get_head = getattr(model, "get_decoder", None), getattr(model, "get_output_embeddings", None)
    decoder = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if decoder is None or head is None or decoder is model:
        raise CompressorUnavailable(
            f"{type(model).__name__} has no separate decoder and LM head "
            f"(get_decoder / get_output_embeddings): it cannot be scored layer by layer"
        )
    return decoder, head


def decoder_layer_count(model) -> int:
    """L, the number of decoder layers of `model` (its decoder's `layers` list)."""
    layers = getattr(decoder_of(model)[0], "layers", None)
    if layers is None or not hasattr(layers, "__getitem__"):
        raise CompressorUnavailable(
            f"{type(model).__name__}'s decoder has no `layers` list (Llama, Qwen2, Mistral, "
            f"Gemma and SmolLM2 have one): early-exit scoring cannot truncate it"
        )
    return len(layers)


def check_layers(model, layers: int | None) -> int | None:
    """`layers` (K) for early-exit scoring: None (all layers) or 1..L, L the model's decoder layers."""
    if layers is None:
        return None
    total = decoder_layer_count(model)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= total:
        raise InvalidInputError(
            f"selfinfo[layers={layers}]: the scoring model ({type(model).__name__}) has {total} decoder "
            f"layers, so layers must be an integer in 1..{total} (early exit after layer K; "
            f"{total} or no option: the whole model)"
        )
    return layers


def early_exit_decoder(model, layers: int | None):
    """The model's decoder running only its first `layers` decoder layers, then its own final norm: a shallow
    copy of the decoder module whose `layers` list holds the first K layers (the same modules and weights:
    nothing is copied or downloaded). The model itself is never changed, so the engine (or another thread)
    can use it meanwhile; the decoder's own forward still builds masks, rotary embeddings and position ids,
    whatever transformers version runs it (it loops over `self.layers[: config.num_hidden_layers]`, and
    Qwen2 picks each layer's mask by its index, which the first K layers keep)."""
    import copy

    decoder, _ = decoder_of(model)
    if layers is None or layers == decoder_layer_count(model):
        return decoder
    clone = copy.copy(decoder)  # shares the submodule table with `decoder`: give it its own before changing it
    object.__setattr__(clone, "_modules", dict(decoder._modules))
    object.__setattr__(clone, "_parameters", dict(decoder._parameters))
    object.__setattr__(clone, "_buffers", dict(decoder._buffers))
    clone._modules["layers"] = decoder.layers[:layers]  # a new ModuleList over the same first K layers
    clone.__dict__.pop("forward", None)  # an instance-level forward (accelerate's hook) is bound to the original
    return clone


_PROBED: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def scoring_path(model, layers: int | None = None):
    """(decoder, head) that self_information runs: the decoder (early exit after `layers` layers) and the LM
    head, checked once per model on an 8-token probe: with all layers, head(decoder(x)) must give the model's
    own logits (a model that rescales or caps its logits after the head fails: then (None, None), and
    self_information falls back to the model's forward); with K < L layers it must differ from them (the
    decoder really stopped early). Early exit on a model that fails either check is CompressorUnavailable."""
    import torch

    layers = check_layers(model, layers)
    seen = _PROBED.setdefault(model, {})
    if layers is None and layers not in seen:
        try:
            decoder_of(model)
        except CompressorUnavailable:  # no separate decoder and head: the model's own forward scores
            seen[None] = False
    if layers not in seen:
        decoder, head = decoder_of(model)
        vocab = int(getattr(model.config, "vocab_size", 0) or head.weight.shape[0])
        x = torch.arange(3, 11, device=model_device(model))[None] % vocab
        with torch.inference_mode():
            want = model(input_ids=x, use_cache=False).logits[0].float()
            full = head(decoder(input_ids=x, use_cache=False).last_hidden_state.to(head.weight.device))[0].float()
            same = bool(((full - want).abs().max() <= 0.02 * want.abs().max() + 1e-4).item())
            ok = same
            if same and layers is not None and layers < decoder_layer_count(model):
                short = early_exit_decoder(model, layers)
                part = head(short(input_ids=x, use_cache=False).last_hidden_state.to(head.weight.device))[0].float()
                ok = not torch.equal(part, full)
        if layers is not None and not ok:
            why = (
                "its logits are not head(decoder(x)) (rescaled or capped after the head)"
                if not same
                else "its decoder ran every layer anyway"
            )
            raise CompressorUnavailable(
                f"early-exit scoring (selfinfo[layers={layers}]) does not work on "
                f"{type(model).__name__}: {why}; use selfinfo (the whole model) or --compressor-model"
            )
        seen[layers] = ok
    if not seen[layers]:
        return None, None
    return early_exit_decoder(model, layers), decoder_of(model)[1]


def model_device(model):
    return next(model.parameters()).device
