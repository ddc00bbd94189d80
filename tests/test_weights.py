"""qwen/weights.py: config, finding the checkpoint, loading by name, and every error a reader can hit."""
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from qwen.embedding import Embedding
from qwen.weights import Config, ModelNotFound, find_model, load, load_weights

OFFICIAL_CONFIG = Path(__file__).parent.parent / "book" / "data" / "qwen3.5-0.8b" / "config.json"  # the real file


def test_config_reads_the_official_text_config(tmp_path):
    shutil.copy(OFFICIAL_CONFIG, tmp_path / "config.json")
    cfg = Config.load(tmp_path)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (248320, 1024, 3584, 24)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (8, 2, 256)
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim) == (16, 16, 128)
    assert cfg.rope_theta == 1e7 and cfg.partial_rotary_factor == 0.25 and cfg.tie_word_embeddings
    assert [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"] == [3, 7, 11, 15, 19, 23]
    assert cfg.extra["mtp_num_hidden_layers"] == 1          # unused fields are kept, not dropped


def test_config_without_layer_types_uses_the_interval(tmp_path):
    raw = json.loads(OFFICIAL_CONFIG.read_text())
    del raw["text_config"]["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert Config.load(tmp_path).layer_types[:4] == ["linear_attention"] * 3 + ["full_attention"]


def test_config_names_the_missing_fields(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 8}}))
    with pytest.raises(ValueError, match="lacks .*vocab_size"):
        Config.load(tmp_path)


def _checkpoint(folder):
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(OFFICIAL_CONFIG, folder / "config.json")
    return folder


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """No QWEN_MODEL, empty caches, and a working directory without models/."""
    for var in ("QWEN_MODEL", "HF_HUB_CACHE", "HF_HOME", "MODELSCOPE_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_find_model_order(no_env, monkeypatch):
    home = no_env / "home"
    ms = _checkpoint(home / ".cache/modelscope/hub/Qwen/Qwen3___5-0___8B")
    assert find_model() == ms.resolve()                                               # 4. ModelScope
    hf = _checkpoint(home / ".cache/huggingface/hub/models--Qwen--Qwen3.5-0.8B/snapshots/abc123")
    assert find_model() == hf.resolve()                                               # 3. Hugging Face cache
    local = _checkpoint(no_env / "models/Qwen3.5-0.8B")
    assert find_model() == local.resolve()                                            # 2. ./models/
    explicit = _checkpoint(no_env / "elsewhere")
    monkeypatch.setenv("QWEN_MODEL", str(explicit))
    assert find_model() == explicit.resolve()                                         # 1. $QWEN_MODEL


def test_find_model_error_gives_the_download_commands(no_env):
    with pytest.raises(ModelNotFound) as e:
        find_model()
    msg = str(e.value)
    for command in ("hf download Qwen/Qwen3.5-0.8B", "HF_ENDPOINT=https://hf-mirror.com",
                    "modelscope download --model Qwen/Qwen3.5-0.8B", "python scripts/download.py", "python -m book.tiny"):
        assert command in msg


def test_find_model_rejects_a_wrong_qwen_model(no_env, monkeypatch):
    monkeypatch.setenv("QWEN_MODEL", str(no_env / "nothing-here"))
    with pytest.raises(ModelNotFound, match="QWEN_MODEL=.*nothing-here has no config.json"):
        find_model()


@pytest.fixture(scope="module")
def official_layout(tmp_path_factory):
    """A tiny Qwen3_5ForConditionalGeneration saved by transformers: the real naming, vision tower included."""
    transformers = pytest.importorskip("transformers")
    from tests.reference import tiny_text_config

    text = tiny_text_config().to_dict()
    vision = {"depth": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "patch_size": 4,
              "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": text["hidden_size"],
              "num_position_embeddings": 16, "in_channels": 3}
    cfg = transformers.Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.Qwen3_5ForConditionalGeneration(cfg).eval()
    folder = tmp_path_factory.mktemp("official")
    model.save_pretrained(folder)
    sharded = tmp_path_factory.mktemp("sharded")
    model.save_pretrained(sharded, max_shard_size="100KB")
    return folder, sharded, model


def test_load_weights_strips_prefix_and_skips_vision(official_layout):
    from safetensors import safe_open
    folder, _, model = official_layout
    names = [k for f in folder.glob("*.safetensors") for k in safe_open(f, framework="pt").keys()]
    assert any(k.startswith("model.visual.") for k in names)                # the file has a vision tower
    assert any(k.startswith("model.language_model.") for k in names)
    W = load_weights(folder)
    assert "embed_tokens.weight" in W and "norm.weight" in W
    assert not any(k.startswith(("model.", "visual", "mtp", "lm_head")) for k in W)
    expected = {k.removeprefix("model.language_model.") for k in model.state_dict() if k.startswith("model.language_model.")}
    assert set(W) == expected


def test_load_weights_skips_mtp_and_visual_of_the_tiny_model(tiny_model):
    every = json.loads((tiny_model / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(k.startswith("mtp.") for k in every) and any(k.startswith("model.visual.") for k in every)
    W = load_weights(tiny_model)
    assert len(W) == sum(k.startswith("model.language_model.") for k in every)


def test_load_weights_sharded_equals_single(official_layout):
    folder, sharded, _ = official_layout
    assert len(json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]) > 0
    assert len(list(sharded.glob("*.safetensors"))) > 1
    a, b = load_weights(folder), load_weights(sharded)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_load_weights_dtype(tiny_model):
    assert load_weights(tiny_model)["norm.weight"].dtype == torch.bfloat16          # as stored
    assert load_weights(tiny_model, dtype=torch.float32)["norm.weight"].dtype == torch.float32


def test_load_weights_errors(tmp_path, official_layout):
    _checkpoint(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="No \\*.safetensors files"):
        load_weights(tmp_path / "empty")
    _, sharded, _ = official_layout
    broken = tmp_path / "broken"
    shutil.copytree(sharded, broken)
    sorted(broken.glob("*.safetensors"))[-1].unlink()
    with pytest.raises(FileNotFoundError, match="download is incomplete"):
        load_weights(broken)


def test_load_is_strict_and_names_the_tensor():
    W = {"embed_tokens.weight": torch.ones(10, 4)}
    emb = load(Embedding(10, 4), W, "embed_tokens.")
    assert torch.equal(emb.weight, torch.ones(10, 4))
    with pytest.raises(ValueError, match=r"missing from the checkpoint: embed_tokens.weight"):
        load(Embedding(10, 4), {}, "embed_tokens.")
    with pytest.raises(ValueError, match=r"not used by Embedding: embed_tokens.bias"):
        load(Embedding(10, 4), {**W, "embed_tokens.bias": torch.ones(4)}, "embed_tokens.")
    with pytest.raises(ValueError, match=r"shape of embed_tokens.weight: checkpoint \(10, 4\), module \(12, 4\)"):
        load(Embedding(12, 4), W, "embed_tokens.")


def test_load_fills_a_tied_parameter_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = Embedding(10, 4)
            self.head = nn.Module()
            self.head.weight = self.embed.weight            # the same Parameter under two names
    m = load(Tied(), {"embed.weight": torch.arange(40.0).view(10, 4)})
    assert m.head.weight is m.embed.weight and m.head.weight[9, 3] == 39


def test_parameter_budget_matches_the_tensors_and_transformers(tiny_model):
    from collections import Counter
    from qwen.weights import parameter_budget

    cfg = Config.load(tiny_model)
    counted = Counter()
    for name, t in load_weights(tiny_model).items():
        part = ("embedding" if name.startswith("embed") else "final norm") if not name.startswith("layers.") else \
            {"linear_attn": "DeltaNet mixers", "self_attn": "attention mixers", "mlp": "MLPs"}.get(name.split(".")[2], "layer norms")
        counted[part] += t.numel()
    assert dict(counted) == parameter_budget(cfg)
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.from_pretrained(OFFICIAL_CONFIG.parent)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    official = parameter_budget(Config.load(OFFICIAL_CONFIG.parent))
    assert sum(official.values()) == sum(p.numel() for p in hf.parameters()) == 752_393_024
