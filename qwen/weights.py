"""Find the checkpoint, read its config, and load its tensors by name into our modules."""
# --8<-- [start:imports]
import json
import os
from dataclasses import MISSING, dataclass, field
from pathlib import Path

from safetensors import safe_open

REPO_ID = "Qwen/Qwen3.5-0.8B"
# --8<-- [end:imports]


# --8<-- [start:config]
@dataclass
class Config:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    layer_types: list  # "linear_attention" (Gated DeltaNet) or "full_attention", one per layer
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    eos_token_id: int = 248044
    # the fields we do not use, kept for reference
    extra: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path):
        raw = json.loads((Path(path) / "config.json").read_text())
        text = dict(raw.get("text_config", raw))  # the official file nests the text model
        rope = text.pop("rope_parameters", None) or {}
        text.setdefault("rope_theta", rope.get("rope_theta", 10000.0))
        text.setdefault("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))
        text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))
        # older configs: every n-th layer is full
        if "layer_types" not in text and "num_hidden_layers" in text:
            n = text.get("full_attention_interval", 4)
            text["layer_types"] = ["full_attention" if (i + 1) % n == 0 else "linear_attention"
                                   for i in range(text["num_hidden_layers"])]
        names = set(cls.__dataclass_fields__) - {"extra"}
        missing = sorted(n for n, f in cls.__dataclass_fields__.items() if f.default is MISSING
                         and f.default_factory is MISSING and n not in text)
        if missing:
            raise ValueError(f"{Path(path) / 'config.json'} lacks {missing}: "
                             "is this a Qwen3.5 checkpoint?")
        known = {k: v for k, v in text.items() if k in names}
        return cls(**known, extra={k: v for k, v in text.items() if k not in names})
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
    candidates = [
        os.environ.get("QWEN_MODEL"),                               # 1. an explicit folder
        Path("models") / name,                                      # 2. ./models/Qwen3.5-0.8B
        *sorted((hf_hub.expanduser() / f"models--{repo_id.replace('/', '--')}"
                 / "snapshots").glob("*")),                         # 3. HF
        ms_hub.expanduser() / "models" / repo_id,                   # 4. ModelScope, both spellings
        ms_hub.expanduser() / repo_id.replace(".", "___"),
    ]
    for c in candidates:
        if c and (Path(c) / "config.json").is_file():
            return Path(c).expanduser().resolve()
    if os.environ.get("QWEN_MODEL"):
        raise ModelNotFound(f"QWEN_MODEL={os.environ['QWEN_MODEL']} has no config.json.\n"
                            + _howto(repo_id))
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
    path = Path(path)
    index = path / "model.safetensors.index.json"
    # sharded: the index maps each name to its file
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"No *.safetensors files in {path}. "
                                + _howto(REPO_ID).splitlines()[1])
    W = {}
    for file in files:
        if not (path / file).is_file():
            raise FileNotFoundError(f"{index.name} names {file}, which is not in {path}: "
                                    "the download is incomplete")
        # memory-mapped: a skipped tensor is never read
        with safe_open(path / file, framework="pt") as f:
            for name in f.keys():
                if name.startswith(SKIP):
                    continue
                short = next((name[len(p):] for p in PREFIXES if name.startswith(p)), name)
                W[short] = f.get_tensor(name) if dtype is None else f.get_tensor(name).to(dtype)
    # a tied head, if saved at all, is the embedding
    W.pop("lm_head.weight", None) if _tied(path) else None
    return W
# --8<-- [end:load_weights]


def _tied(path):
    raw = json.loads((Path(path) / "config.json").read_text())
    return raw.get("text_config", {}).get("tie_word_embeddings",
                                          raw.get("tie_word_embeddings", False))


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
