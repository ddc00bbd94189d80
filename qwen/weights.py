"""Find the checkpoint, read its config, and load its tensors by name into our modules."""
# --8<-- [start:imports]
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import SafetensorError, safe_open

from qwen.checks import real, whole

REPO_ID = "Qwen/Qwen3.5-0.8B"
# --8<-- [end:imports]


# --8<-- [start:config]
class CheckpointError(ValueError):
    """A checkpoint file that is missing, damaged or not a Qwen3.5 model; the message names it."""


SUPPORTED = ("qwen3_5", "qwen3_5_text")      # the official (multimodal) file, and a text-only one
OTHERS = {"qwen3_next": "Qwen3-Next", "qwen3_5_moe": "Qwen3.5-MoE", "qwen3": "Qwen3",
          "qwen3_moe": "Qwen3-MoE", "qwen2": "Qwen2 or Qwen2.5"}


def read_json(file):
    """The JSON object in `file`; anything else is a CheckpointError that names the file."""
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{file} is missing: download the checkpoint again") from None
    except (OSError, ValueError) as e:                    # ValueError: bad JSON or bad UTF-8
        raise CheckpointError(f"{file} is not valid JSON ({e}): download it again") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file} holds a JSON {type(data).__name__}, not an object: "
                              "download it again")
    return data


@dataclass
class Config:
    """The text model's settings, named as in config.json; a missing field takes the default of
    transformers' Qwen3_5TextConfig."""
    vocab_size: int = 248320
    hidden_size: int = 4096
    intermediate_size: int = 12288
    num_hidden_layers: int = 32
    layer_types: list = None  # "linear_attention" (Gated DeltaNet) or "full_attention", per layer
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int = 256
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    eos_token_id: int = None
    # the fields we do not use, kept for reference
    extra: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path):
        file = Path(path) / "config.json"
        raw = read_json(file)
        check_supported(file, raw)
        text = dict(raw.get("text_config", raw))  # the official file nests the text model
        rope = text.pop("rope_parameters", None) or {}
        for name in ("rope_theta", "partial_rotary_factor"):     # newer files nest the two
            if name in rope:
                text[name] = rope[name]
        text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))
        # no layer_types: every n-th layer is full
        if text.get("layer_types") is None:
            n = text.get("full_attention_interval", 4)
            text["layer_types"] = ["full_attention" if (i + 1) % n == 0 else "linear_attention"
                                   for i in range(text.get("num_hidden_layers", 32))]
        names = set(cls.__dataclass_fields__) - {"extra"}
        known = {k: v for k, v in text.items() if k in names}
        cfg = cls(**known, extra={k: v for k, v in text.items() if k not in names})
        check_config(file, cfg)
        return cfg


def check_supported(file, raw):
    """Refuse, before any tensor is read, a config this model cannot run."""
    text = raw.get("text_config", raw)
    if not isinstance(text, dict):
        raise CheckpointError(f"{file}: text_config is {json.dumps(text)}, not an object: "
                              "download it again")
    model_type = raw.get("model_type")
    if "text_config" in raw and model_type == "qwen3_5":
        model_type = text.get("model_type", "qwen3_5_text") if isinstance(text, dict) else None
    if model_type not in SUPPORTED or not isinstance(text, dict):
        kind = OTHERS.get(model_type, "not a Qwen3.5 model")
        ours = " or ".join(map(repr, SUPPORTED))
        raise CheckpointError(
            f"{file}: model_type {model_type!r} is {kind}, which this code cannot run; it runs the "
            f"dense Qwen3.5 models (model_type {ours}), such as {REPO_ID}")
    rope_type = (text.get("rope_parameters") or {}).get("rope_type", "default")
    for name, value, ours in (("rope_type", rope_type, "default"),
                              ("hidden_act", text.get("hidden_act", "silu"), "silu")):
        if value != ours:
            raise CheckpointError(f"{file}: {name} {value!r} is not supported (only {ours!r})")


SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "head_dim", "linear_num_key_heads",
         "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
         "linear_conv_kernel_dim", "max_position_embeddings")
LAYER_TYPES = ("linear_attention", "full_attention")


def check_config(file, cfg):
    """Refuse values no model can have: each would fail far from its cause, or give NaN."""
    problems = [f"{n} is {getattr(cfg, n)!r}, not a whole number >= 1" for n in SIZES
                if not (whole(getattr(cfg, n)) and getattr(cfg, n) >= 1)]
    problems += [f"{n} is {getattr(cfg, n)!r}, not a number > 0"       # eps < 0: sqrt of < 0
                 for n in ("rms_norm_eps", "rope_theta")
                 if not (real(getattr(cfg, n)) and getattr(cfg, n) > 0)]
    factor = cfg.partial_rotary_factor
    if not (real(factor) and 0 < factor <= 1):
        problems.append(f"partial_rotary_factor is {factor!r}, not a number in (0, 1]")
    if not isinstance(cfg.tie_word_embeddings, bool):
        problems.append(f"tie_word_embeddings is {cfg.tie_word_embeddings!r}, not true or false")
    types = cfg.layer_types
    if not (isinstance(types, list) and all(t in LAYER_TYPES for t in types)):
        problems.append(f"layer_types must list {' or '.join(LAYER_TYPES)} per layer")
    if not problems:                      # the sizes are whole numbers: now how they fit together
        if len(types) != cfg.num_hidden_layers:
            problems.append(f"layer_types has {len(types)} entries for "
                            f"num_hidden_layers {cfg.num_hidden_layers}")
        for many, few in (("num_attention_heads", "num_key_value_heads"),   # heads share k, v
                          ("linear_num_value_heads", "linear_num_key_heads")):
            if getattr(cfg, many) % getattr(cfg, few):
                problems.append(f"{many} {getattr(cfg, many)} is not a multiple of "
                                f"{few} {getattr(cfg, few)}")
        if int(cfg.head_dim * factor) % 2:                   # RoPE turns pairs of dims
            problems.append(f"head_dim * partial_rotary_factor = {cfg.head_dim * factor:g} "
                            "rotated dims, not an even number")
    if problems:
        raise CheckpointError(f"{file}: " + "; ".join(problems)
                              + ": the config is damaged or edited; download it again")


# --8<-- [end:config]


# --8<-- [start:budget]
def parameter_budget(cfg):
    """Parameters per model part, from the config alone: each tensor's shape multiplied out."""
    d, f, n_layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    keys = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    values = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    heads = cfg.linear_num_value_heads
    attention = (d * 2 * q + 2 * d * kv                                 # q_proj (query + gate), k/v
                 + q * d + 2 * cfg.head_dim)                            # o_proj, q/k norms
    deltanet = (d * (2 * keys + values) + d * values                    # in_proj_qkv, in_proj_z
                + 2 * d * heads                                         # in_proj_b/a
                + (2 * keys + values) * cfg.linear_conv_kernel_dim      # depthwise conv1d
                + 2 * heads + cfg.linear_value_head_dim                 # A_log, dt_bias, gated norm
                + values * d)                                           # out_proj
    n_full = cfg.layer_types.count("full_attention")
    return {"embedding": cfg.vocab_size * d, "DeltaNet mixers": (n_layers - n_full) * deltanet,
            "attention mixers": n_full * attention, "MLPs": n_layers * 3 * d * f,
            "layer norms": n_layers * 2 * d, "final norm": d}
# --8<-- [end:budget]


# --8<-- [start:find_model]
def find_model(repo_id=REPO_ID):
    """The folder that holds the official checkpoint; if none, raise with the download commands."""
    name = repo_id.split("/")[-1]
    hf_hub = Path(os.environ.get("HF_HUB_CACHE")
                  or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")) / "hub")
    ms_hub = Path(os.environ.get("MODELSCOPE_CACHE", "~/.cache/modelscope/hub"))
    explicit = os.environ.get("QWEN_MODEL")                         # 1. an explicit folder:
    if explicit:                                                    # used, or an error
        folder = Path(explicit).expanduser()
        if not (folder / "config.json").is_file():
            why = "has no config.json" if folder.is_dir() else "does not exist"
            raise ModelNotFound(f"QWEN_MODEL={explicit} {why}: point it at the checkpoint folder, "
                                "or unset it to search ./models/ and the caches")
        return folder.resolve()
    candidates = [
        Path("models") / name,                                      # 2. ./models/Qwen3.5-0.8B
        *hf_snapshots(hf_hub.expanduser() / f"models--{repo_id.replace('/', '--')}"),  # 3. HF
        ms_hub.expanduser() / "models" / repo_id,                   # 4. ModelScope, both spellings
        ms_hub.expanduser() / repo_id.replace(".", "___"),
    ]
    for c in candidates:
        if (c / "config.json").is_file():
            return c.expanduser().resolve()
    raise ModelNotFound(f"No {repo_id} checkpoint found.\n" + _howto(repo_id))


def hf_snapshots(repo):
    """The Hugging Face cache's snapshot of the revision refs/main names (the latest download);
    without refs/main, every snapshot, newest first."""
    main = repo / "refs" / "main"
    if main.is_file():
        revision = main.read_text(errors="replace").strip()
        snapshot = repo / "snapshots" / revision
        if not revision or Path(revision).name != revision or revision.startswith("."):
            raise ModelNotFound(f"{main} names no revision ({revision!r}): the cache is damaged; "
                                f"delete {repo} and download again (hf download {REPO_ID})")
        if not (snapshot / "config.json").is_file():
            raise ModelNotFound(f"{main} names revision {snapshot.name}, but {snapshot} has no "
                                f"config.json: that download did not finish; run it again "
                                f"(hf download {REPO_ID}), or delete {repo} to search on")
        return [snapshot]
    return sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True)
# --8<-- [end:find_model]


class ModelNotFound(FileNotFoundError):
    """No checkpoint where find_model looked; the message says how to get one."""


def plain_errors(hook):
    """sys.excepthook for scripts: a ModelNotFound or CheckpointError that nothing caught prints
    as its message alone (it names the problem and the fix), other errors as usual. Exit code 1."""
    def excepthook(kind, error, traceback):
        if issubclass(kind, (ModelNotFound, CheckpointError)):
            print(f"error: {error}", file=sys.stderr)
        else:
            hook(kind, error, traceback)
    return excepthook


# a chapter script run without weights ends in the message, not in a traceback
sys.excepthook = plain_errors(sys.excepthook)


def _howto(repo_id):
    local = f"models/{repo_id.split('/')[-1]}"
    return (
        "Looked in $QWEN_MODEL, ./models/, the Hugging Face cache and the ModelScope cache. "
        "Download it with one of:\n"
        f"  python scripts/download.py                                   "
        "# Hugging Face, with a progress bar\n"
        f"  hf download {repo_id} --local-dir {local}                     # Hugging Face CLI\n"
        f"  HF_ENDPOINT=https://hf-mirror.com hf download {repo_id} --local-dir {local}   "
        "# through a mirror\n"
        f"  modelscope download --model {repo_id} --local_dir {local}     "
        "# ModelScope (fast in China)\n"
        "or point QWEN_MODEL at a folder that holds config.json and the *.safetensors files.\n"
        "To run on the book's tiny random test model instead: "
        "export QWEN_MODEL=$(python -m book.tiny)"
    )


# --8<-- [start:load_weights]
SKIP = ("model.visual.", "mtp.")             # the vision tower and the multi-token-prediction head
PREFIXES = ("model.language_model.", "model.")


def load_weights(path, dtype=None, finite=True):
    """Every text-model tensor of a checkpoint folder, by name without `model.language_model.`.
    finite: check that no tensor holds NaN or inf (a pass over the weights; False skips it)."""
    if dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype={dtype!r}: use None (as stored), torch.float32, torch.bfloat16 "
                         "or torch.float16")
    W = {}
    for file in weight_files(path):
        # memory-mapped: a skipped tensor is never read
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if name.startswith(SKIP):
                    continue
                short = next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)
                t = f.get_tensor(name)
                if finite:
                    check_finite(t, name, file)
                W[short] = t if dtype is None else t.to(dtype)
    return settle_head(W, path)


def check_finite(t, name, file):
    """One NaN or inf in a weight spreads to every score: find it at load, named. A sum is one
    pass with no copy, and NaN or inf in it means one in t (or a sum past fp32's range: look)."""
    if not torch.isfinite(t.sum(dtype=torch.float32)) and not torch.isfinite(t).all():
        raise CheckpointError(f"{file}: tensor {name} holds NaN or inf values: "
                              "the file is damaged; download it again")


DTYPES = ("BF16", "F16", "F32")          # what the official files hold, and what we compute in


def weight_files(path):
    """The checkpoint's *.safetensors files, each one whole, holding what the index promises.
    A config we cannot run is refused before any file is opened; a broken index, a damaged file,
    a tensor in two files or of a dtype we do not read is one line that names it."""
    path = Path(path)
    Config.load(path)
    index = path / "model.safetensors.index.json"
    # sharded: the index maps each name to its file
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map: download it again")
        if not all(isinstance(f, str) for f in weight_map.values()):
            raise CheckpointError(f"{index}: its weight_map must map names to file names: "
                                  "download it again")
        files = sorted(set(weight_map.values()))
    else:
        weight_map, files = None, sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"No *.safetensors files in {path}. "
                              + _howto(REPO_ID).splitlines()[1])
    where = {}                                                       # tensor name -> its file
    for file in files:
        if Path(file).is_absolute() or ".." in Path(file).parts:     # would read another folder
            raise CheckpointError(f"{index} names {file}, which is outside {path}: an index names "
                                  "files in its own folder; download it again")
        if not (path / file).is_file():
            raise CheckpointError(f"{index.name} names {file}, which is not in {path}: "
                                  "the download is incomplete; download it again")
        for name, dtype in tensor_dtypes(path / file).items():
            if name in where:
                raise CheckpointError(f"{name} is in both {where[name]} and {file} in {path}: "
                                      "a file left from another download? remove it, or "
                                      "download the checkpoint again into an empty folder")
            if dtype not in DTYPES:
                raise CheckpointError(f"{path / file}: tensor {name} is {dtype}; this code reads "
                                      f"{', '.join(DTYPES)} only: use the original {REPO_ID} "
                                      "weights, not a quantized or converted copy")
            where[name] = file
    if weight_map:
        check_index(index, weight_map, where)
    return [path / file for file in files]


def tensor_dtypes(file):
    """{name: dtype} from a safetensors file's header; a file safetensors cannot read is named."""
    try:
        # safe_open reads the header only, and checks that it covers the file
        with safe_open(file, framework="pt") as f:
            return {name: f.get_slice(name).get_dtype() for name in f.keys()}
    except SafetensorError as e:                     # empty, cut short, or not safetensors at all
        raise CheckpointError(_damaged(file, e)) from None


def check_index(index, weight_map, where):
    """Every name the index lists is in the file it names, and no file holds a name it omits."""
    for name, file in weight_map.items():
        if where.get(name) != file:
            found = f"it is in {where[name]}" if name in where else "no file holds it"
            raise CheckpointError(f"{index} puts {name} in {file}, but {found}: the index and "
                                  "the files come from different downloads; download again")
    extra = sorted(set(where) - set(weight_map))
    if extra:
        raise CheckpointError(f"{where[extra[0]]} holds {extra[0]}, which {index} does not list: "
                              "the index and the files come from different downloads; "
                              "download again")


def settle_head(W, path):
    """Tied: the head, if saved at all, is the embedding, so drop it; untied: it must be there."""
    if Config.load(path).tie_word_embeddings:
        W.pop("lm_head.weight", None)
    elif "lm_head.weight" not in W:
        raise CheckpointError(f"{Path(path) / 'config.json'} says tie_word_embeddings: false, "
                              "but no *.safetensors file holds lm_head.weight: "
                              "download the checkpoint again")
    return W
# --8<-- [end:load_weights]


def _damaged(file, error):
    """The one-line message for a weights file that safetensors cannot read."""
    with open(file, "rb") as fh:
        if fh.read(40).startswith(b"version https://git-lfs"):
            return (f"{file} is a Git LFS pointer, not the weights: "
                    "run `git lfs pull` in that folder, or download it again")
    return f"{file} is damaged or incomplete ({error}): download it again"


# --8<-- [start:load]
def load(module, W, prefix=""):
    """Put the tensors named `prefix + name` into `module`;
    any missing, unexpected, misshapen or non-float one is an error."""
    mine = {}
    # a tied Parameter shows up under two names: it is loaded once, under the first
    for k, t in module.state_dict(keep_vars=True).items():
        if all(t is not m for m in mine.values()):
            mine[k] = t
    theirs = {k[len(prefix):]: v for k, v in W.items() if k.startswith(prefix)}
    problems = [f"missing from the checkpoint: {prefix}{k}" for k in mine if k not in theirs]
    problems += [f"not used by {type(module).__name__}: {prefix}{k}"
                 for k in theirs if k not in mine]
    problems += [f"shape of {prefix}{k}: checkpoint {tuple(v.shape)}, module {tuple(mine[k].shape)}"
                 for k, v in theirs.items() if k in mine and v.shape != mine[k].shape]
    problems += [f"dtype of {prefix}{k}: {v.dtype}, where the model needs floating-point weights"
                 for k, v in theirs.items() if k in mine and not v.is_floating_point()]
    if problems:
        raise ValueError(f"cannot load {type(module).__name__} from prefix {prefix!r}:\n  "
                         + "\n  ".join(problems))
    built_on_meta = {}
    for k, t in mine.items():
        if t.is_meta:       # made without memory (chapter 14): the file's tensor is the Parameter
            built_on_meta[t] = nn.Parameter(theirs[k], requires_grad=False)
        else:               # take the checkpoint's tensor as it is (no copy); a tied twin follows
            t.data = theirs[k]
    for m in module.modules():                  # every place a replaced Parameter sits, a tie too
        for name, p in m._parameters.items():
            if p in built_on_meta:
                m._parameters[name] = built_on_meta[p]
    return module
# --8<-- [end:load]
