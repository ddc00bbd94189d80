"""Find the checkpoint, read its config, and load its tensors by name into our modules."""
# --8<-- [start:imports]
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from safetensors import SafetensorError, safe_open

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
        return cls(**known, extra={k: v for k, v in text.items() if k not in names})


def check_supported(file, raw):
    """Refuse, before any tensor is read, a config this model cannot run."""
    text = raw.get("text_config", raw)
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
        *sorted((hf_hub.expanduser() / f"models--{repo_id.replace('/', '--')}"
                 / "snapshots").glob("*")),                         # 3. HF
        ms_hub.expanduser() / "models" / repo_id,                   # 4. ModelScope, both spellings
        ms_hub.expanduser() / repo_id.replace(".", "___"),
    ]
    for c in candidates:
        if (c / "config.json").is_file():
            return c.expanduser().resolve()
    raise ModelNotFound(f"No {repo_id} checkpoint found.\n" + _howto(repo_id))
# --8<-- [end:find_model]


class ModelNotFound(FileNotFoundError):
    pass


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


def load_weights(path, dtype=None):
    """Every text-model tensor of a checkpoint folder, by name without `model.language_model.`."""
    W = {}
    for file in weight_files(path):
        # memory-mapped: a skipped tensor is never read
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                if name.startswith(SKIP):
                    continue
                short = next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)
                W[short] = f.get_tensor(name) if dtype is None else f.get_tensor(name).to(dtype)
    return settle_head(W, path)


def weight_files(path):
    """The checkpoint's *.safetensors files, each one whole. A config we cannot run is refused
    before any file is opened; a broken index or a damaged file is one line that names it."""
    path = Path(path)
    Config.load(path)
    index = path / "model.safetensors.index.json"
    # sharded: the index maps each name to its file
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map: download it again")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"No *.safetensors files in {path}. "
                              + _howto(REPO_ID).splitlines()[1])
    for file in files:
        if not (path / file).is_file():
            raise CheckpointError(f"{index.name} names {file}, which is not in {path}: "
                                  "the download is incomplete; download it again")
        try:
            safe_open(path / file, framework="pt")  # reads the header, checks it covers the file
        except SafetensorError as e:                # empty, cut short, or not safetensors at all
            raise CheckpointError(_damaged(path / file, e)) from None
    return [path / file for file in files]


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
    """Copy the tensors named `prefix + name` into `module`;
    any missing, unexpected or misshapen one is an error."""
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
    if problems:
        raise ValueError(f"cannot load {type(module).__name__} from prefix {prefix!r}:\n  "
                         + "\n  ".join(problems))
    for k, t in mine.items():
        # take the checkpoint's tensor as it is (no copy); a tied twin follows along
        t.data = theirs[k]
    return module
# --8<-- [end:load]
