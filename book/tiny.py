"""The tiny test model: the official file layout and the real tokenizer, tiny random weights.

`python -m book.tiny` builds it once (deterministically) and prints its folder; later calls reuse
the cache. Every code path of the book runs on it; nothing it prints means anything about the real
model.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
# the structure of Qwen/Qwen3.5-0.8B's config.json; text_config is replaced by TEXT below
OFFICIAL_CONFIG = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "image_token_id": 248056,
    "video_token_id": 248057,
    "vision_start_token_id": 248053,
    "vision_end_token_id": 248054,
    "tie_word_embeddings": True,
    "transformers_version": "4.57.0.dev0",
}
LAYERS = ["linear_attention"] * 3 + ["full_attention"]
TEXT = {
    # the full vocabulary: every real token id is valid
    "model_type": "qwen3_5_text",
    "vocab_size": 248320,
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 8,
    "layer_types": LAYERS * 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "full_attention_interval": 4,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_output_gate": True,
    "tie_word_embeddings": True,
    "max_position_embeddings": 262144,
    "eos_token_id": 248044,
    "dtype": "bfloat16",
    "initializer_range": 0.02,
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "mamba_ssm_dtype": "float32",
    "mlp_only_layers": [],
    "use_cache": True,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [2, 1, 1],
        "mrope_interleaved": True,
    },
}
VISION = {
    "model_type": "qwen3_5",
    "depth": 2,
    "hidden_size": 32,
    "num_heads": 2,
    "intermediate_size": 64,
    "in_channels": 3,
    "patch_size": 4,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 64,
    "num_position_embeddings": 64,
    "hidden_act": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
    "deepstack_visual_indexes": [],
}
# preprocessor_config.json: the official one's fields, sized for 4-pixel patches (8-pixel tokens)
PREPROCESSOR = {
    "size": {"shortest_edge": 32 * 32, "longest_edge": 128 * 128},
    "patch_size": 4,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "Qwen3VLProcessor",
    "image_processor_type": "Qwen2VLImageProcessorFast",
}
WEIGHTS_FILE = "model.safetensors-00001-of-00001.safetensors"  # the official file name


def drawer(gen):
    """rand(*shape, std): seeded normal values; std 1/sqrt(fan_in) by default keeps activations
    of order one through the layers."""

    def rand(*shape, std=None):
        std = std if std is not None else shape[-1] ** -0.5
        return torch.randn(*shape, generator=gen) * std

    return rand


def text_tensors(cfg, gen):
    """Every text-model tensor with its official name and shape, filled with seeded random
    values."""
    rand, p = drawer(gen), "model.language_model."
    T = {
        p + "embed_tokens.weight": rand(cfg["vocab_size"], cfg["hidden_size"], std=1.0),
        p + "norm.weight": rand(cfg["hidden_size"], std=0.1),
    }
    for i, kind in enumerate(cfg["layer_types"]):
        T.update(layer_tensors(cfg, kind, f"{p}layers.{i}.", gen))
    return T


def layer_tensors(cfg, kind, L, gen):
    """One decoder layer's tensors under the prefix L: a DeltaNet or an attention layer."""
    rand = drawer(gen)
    d, f = cfg["hidden_size"], cfg["intermediate_size"]
    hq, hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, K = (
        cfg["linear_key_head_dim"],
        cfg["linear_value_head_dim"],
        cfg["linear_conv_kernel_dim"],
    )
    conv = 2 * nk * dk + nv * dv
    T = {}
    T[L + "input_layernorm.weight"] = rand(d, std=0.1)  # zero-centred norms: an offset around 0
    T[L + "post_attention_layernorm.weight"] = rand(d, std=0.1)
    T[L + "mlp.gate_proj.weight"] = rand(f, d)
    T[L + "mlp.up_proj.weight"] = rand(f, d)
    T[L + "mlp.down_proj.weight"] = rand(d, f)
    if kind == "full_attention":
        T[L + "self_attn.q_proj.weight"] = rand(2 * hq * hd, d)  # per head: [query | gate]
        T[L + "self_attn.k_proj.weight"] = rand(hkv * hd, d)
        T[L + "self_attn.v_proj.weight"] = rand(hkv * hd, d)
        T[L + "self_attn.o_proj.weight"] = rand(d, hq * hd)
        T[L + "self_attn.q_norm.weight"] = rand(hd, std=0.1)
        T[L + "self_attn.k_norm.weight"] = rand(hd, std=0.1)
    else:
        T[L + "linear_attn.in_proj_qkv.weight"] = rand(conv, d)
        T[L + "linear_attn.in_proj_z.weight"] = rand(nv * dv, d)
        T[L + "linear_attn.in_proj_b.weight"] = rand(nv, d)
        T[L + "linear_attn.in_proj_a.weight"] = rand(nv, d)
        T[L + "linear_attn.conv1d.weight"] = rand(conv, 1, K, std=0.5)
        # decay rates in [1, 16]
        T[L + "linear_attn.A_log"] = torch.log(torch.rand(nv, generator=gen) * 15 + 1)
        T[L + "linear_attn.dt_bias"] = rand(nv, std=1.0)
        # the gated norm: a plain weight around 1
        T[L + "linear_attn.norm.weight"] = 1 + rand(dv, std=0.1)
        T[L + "linear_attn.out_proj.weight"] = rand(d, nv * dv)
    return T


def vision_tensors(cfg, gen):
    """The vision tower (model.visual.*), every tensor of the official layout."""
    rand, V = drawer(gen), "model.visual."
    h, f, p, t = cfg["hidden_size"], cfg["intermediate_size"], cfg["patch_size"], 2
    wide = h * cfg["spatial_merge_size"] ** 2
    T = {
        V + "patch_embed.proj.weight": rand(h, 3, t, p, p, std=(3 * t * p * p) ** -0.5),
        V + "patch_embed.proj.bias": rand(h, std=0.1),
        V + "pos_embed.weight": rand(cfg["num_position_embeddings"], h, std=0.5),
    }
    for i in range(cfg["depth"]):
        B = f"{V}blocks.{i}."
        for norm in ("norm1", "norm2"):
            T[B + norm + ".weight"] = 1 + rand(h, std=0.1)  # LayerNorm: a plain scale around 1
            T[B + norm + ".bias"] = rand(h, std=0.1)
        for name, (n_out, n_in) in {
            "attn.qkv": (3 * h, h),
            "attn.proj": (h, h),
            "mlp.linear_fc1": (f, h),
            "mlp.linear_fc2": (h, f),
        }.items():
            T[B + name + ".weight"] = rand(n_out, n_in)
            T[B + name + ".bias"] = rand(n_out, std=0.1)
    T[V + "merger.norm.weight"] = 1 + rand(h, std=0.1)
    T[V + "merger.norm.bias"] = rand(h, std=0.1)
    for name, (n_out, n_in) in {
        "linear_fc1": (wide, wide),
        "linear_fc2": (cfg["out_hidden_size"], wide),
    }.items():
        T[V + "merger." + name + ".weight"] = rand(n_out, n_in)
        T[V + "merger." + name + ".bias"] = rand(n_out, std=0.1)
    return T


def mtp_tensors(cfg, gen):
    """The multi-token-prediction head (mtp.*): two norms, fc joining [embedding | hidden], one
    full-attention decoder layer with a dense MLP, the final norm."""
    rand, d = drawer(gen), cfg["hidden_size"]
    T = {
        "mtp.pre_fc_norm_embedding.weight": rand(d, std=0.1),  # zero-centred, like the text's
        "mtp.pre_fc_norm_hidden.weight": rand(d, std=0.1),
        "mtp.fc.weight": rand(d, 2 * d),
    }
    T.update(layer_tensors(cfg, "full_attention", "mtp.layers.0.", gen))
    T["mtp.norm.weight"] = rand(d, std=0.1)
    return T


def build(dest):
    """Write the tiny checkpoint folder: config.json, the safetensors file and its index,
    tokenizer.json."""
    from book.tokenizer import build_tokenizer_json

    dest = Path(dest)
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "default":
        # torch.randn's fp32 values depend on ATen's kernels: the vectorized ones (AVX2, AVX-512)
        # draw the same bits, the scalar fallback other last bits, and so a few other bf16
        # weights. The tiny model is drawn with vectorized kernels, whatever this process runs.
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        code = f"from book import tiny; tiny.build({str(dest)!r})"
        subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)
        return
    dest.mkdir(parents=True, exist_ok=True)
    config = {
        **OFFICIAL_CONFIG,
        "book_tiny_test_model": True,
        "text_config": TEXT,
        "vision_config": VISION,
    }
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    gen = torch.Generator().manual_seed(0)
    tensors = {
        k: v.to(torch.bfloat16).contiguous()
        for k, v in {
            **text_tensors(TEXT, gen),
            **vision_tensors(VISION, gen),
            **mtp_tensors(TEXT, gen),
        }.items()
    }
    save_file(tensors, dest / WEIGHTS_FILE, metadata={"format": "pt"})
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
        "weight_map": {k: WEIGHTS_FILE for k in sorted(tensors)},
    }
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (dest / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    build_tokenizer_json(dest / "tokenizer.json")


def _key():
    """Rebuild when the recipe changes: a hash of this file and of the tokenizer recipe."""
    h = hashlib.sha256()
    for f in ("tiny.py", "tokenizer.py"):
        h.update((Path(__file__).parent / f).read_bytes())
    return h.hexdigest()[:16]


MANIFEST = "MANIFEST.sha256"  # each file's sha256, written at build; the folder must match it


def path():
    """The tiny model's folder, built first if it is missing, and rebuilt if its files no longer
    match the sha256 recorded when it was built (a damaged or edited cache is never handed out).
    A folder is named by its recipe's key: concurrent callers either find it complete or build
    their own copy and keep the first one renamed into place, so no caller is ever handed a folder
    that is being written.

    $BOOK_TINY_DIR sets where the folders live (default .cache/ in the repository).
    """
    base = Path(os.environ.get("BOOK_TINY_DIR", ROOT / ".cache"))
    key = _key()
    folder = base / f"tiny-qwen3.5-{key}"
    if (folder / "BUILD_KEY").is_file():
        problem = damage(folder)
        if not problem:
            return folder
        print(
            f"the cached tiny model in {folder} is damaged ({problem}): rebuilding it",
            file=sys.stderr,
        )
        _remove(folder, base)
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=".tiny-"))
    try:
        build(tmp)
        (tmp / MANIFEST).write_text(
            "".join(f"{_sha256(f)}  {f.name}\n" for f in sorted(tmp.iterdir()))
        )
        (tmp / "BUILD_KEY").write_text(key)  # written last: a folder with it is complete
        try:
            tmp.rename(folder)  # atomic; fails if another build got there first
        except OSError:
            if not (folder / "BUILD_KEY").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def recorded(folder):
    """{file name: sha256} as recorded when `folder` was built ({} if there is no record)."""
    try:
        lines = (Path(folder) / MANIFEST).read_text().splitlines()
    except OSError:
        return {}
    return {name: sha for sha, name in (line.split("  ", 1) for line in lines if "  " in line)}


def damage(folder):
    """What differs between `folder` and its build record, or None when every file matches."""
    files = recorded(folder)
    if not files:
        return f"no {MANIFEST}"
    present = {f.name for f in Path(folder).iterdir()} - {MANIFEST, "BUILD_KEY"}
    if present != set(files):
        return f"files {sorted(present ^ set(files))} added or missing"
    for name, sha in files.items():
        if _sha256(Path(folder) / name) != sha:
            return f"{name} differs from the one built"
    return None


def _remove(folder, base):
    """Move `folder` aside (atomic: another process sees it whole or gone), then delete it."""
    aside = Path(tempfile.mkdtemp(dir=base, prefix=".tiny-damaged-")) / "old"
    try:
        folder.rename(aside)
    except OSError:  # another process moved it first
        pass
    shutil.rmtree(aside.parent, ignore_errors=True)


def _sha256(file):
    h = hashlib.sha256()
    with open(file, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def is_tiny(folder):
    """True when `folder` holds the tiny test model: its weights and config.json are byte for byte
    the ones this recipe builds (the config's book_tiny_test_model flag proves nothing: it is a
    line of text). Files of another size are told apart without reading them."""
    folder, built = Path(folder), path()
    ours = {
        n: sha
        for n, sha in recorded(built).items()
        if n.endswith(".safetensors") or n == "config.json"
    }
    weights = {f.name for f in folder.glob("*.safetensors")}
    if weights != {name for name in ours if name.endswith(".safetensors")}:
        return False
    files = [(folder / name, sha) for name, sha in ours.items()]
    if not all(
        f.is_file() and f.stat().st_size == (built / f.name).stat().st_size for f, _ in files
    ):
        return False
    return all(_sha256(f) == sha for f, sha in files)


if __name__ == "__main__":
    try:
        print(path())
    except OSError as e:  # a read-only or full disk, a bad BOOK_TINY_DIR
        sys.exit(
            f"error: cannot build the tiny model ({e}): "
            "set BOOK_TINY_DIR to a writable folder with 60 MB free"
        )
