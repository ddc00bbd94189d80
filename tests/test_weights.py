"""qwen/weights.py: config, finding the checkpoint, loading by name, and every error a reader can
hit."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from qwen.embedding import Embedding
from qwen.weights import CheckpointError, Config, ModelNotFound, find_model, load, load_weights

# the real file
OFFICIAL_CONFIG = Path(__file__).parent.parent / "book" / "data" / "qwen3.5-0.8b" / "config.json"


def test_config_reads_the_official_text_config(tmp_path):
    shutil.copy(OFFICIAL_CONFIG, tmp_path / "config.json")
    cfg = Config.load(tmp_path)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (
        248320,
        1024,
        3584,
        24,
    )
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (8, 2, 256)
    assert (cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim) == (
        16,
        16,
        128,
    )
    assert cfg.rope_theta == 1e7 and cfg.partial_rotary_factor == 0.25 and cfg.tie_word_embeddings
    assert [i for i, t in enumerate(cfg.layer_types) if t == "full_attention"] == [
        3,
        7,
        11,
        15,
        19,
        23,
    ]
    assert cfg.extra["mtp_num_hidden_layers"] == 1  # unused fields are kept, not dropped


def test_config_without_layer_types_uses_the_interval(tmp_path):
    raw = json.loads(OFFICIAL_CONFIG.read_text())
    del raw["text_config"]["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert Config.load(tmp_path).layer_types[:4] == ["linear_attention"] * 3 + ["full_attention"]


@pytest.mark.parametrize(
    "text",
    [
        {},  # every field a default
        {"rope_theta": 5e6, "partial_rotary_factor": 0.5},  # older files: RoPE at the top
        # partial_rotary_factor missing
        {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
        {
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.75},
            "partial_rotary_factor": 0.5,
        },
        {
            "num_hidden_layers": 6,
            "full_attention_interval": 3,
            "hidden_size": 8,
            "tie_word_embeddings": True,
        },
    ],
)
def test_config_defaults_are_transformers(tmp_path, text):
    """A field missing from config.json means what it means to transformers' Qwen3_5TextConfig."""
    transformers = pytest.importorskip("transformers")
    raw = {"model_type": "qwen3_5_text", **text}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    ours, theirs = Config.load(tmp_path), transformers.Qwen3_5TextConfig.from_dict(raw)
    for name in Config.__dataclass_fields__:
        if name in ("rope_theta", "partial_rotary_factor"):
            assert getattr(ours, name) == theirs.rope_parameters[name], name
        elif name != "extra":
            assert getattr(ours, name) == getattr(theirs, name), name
    if not text:
        assert ours.partial_rotary_factor == 0.25 and ours.rope_theta == 10000.0
        assert ours.linear_num_value_heads == 32 and ours.tie_word_embeddings is False


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            {"model_type": "qwen3_next", "hidden_size": 2048},
            "model_type 'qwen3_next' is Qwen3-Next, which this code cannot run; it runs the dense "
            "Qwen3.5 models (model_type 'qwen3_5' or 'qwen3_5_text'), such as Qwen/Qwen3.5-0.8B",
        ),
        (
            {"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text"}},
            "model_type 'qwen3_5_moe' is Qwen3.5-MoE, which this code cannot run",
        ),
        (
            {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_moe_text"}},
            "model_type 'qwen3_5_moe_text' is not a Qwen3.5 model, which this code cannot run",
        ),
        ({"model_type": "llama"}, "model_type 'llama' is not a Qwen3.5 model"),
        ({"hidden_size": 8}, "model_type None is not a Qwen3.5 model"),
        (
            {"model_type": "qwen3_5_text", "rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
            "rope_type 'yarn' is not supported (only 'default')",
        ),
        (
            {"model_type": "qwen3_5_text", "hidden_act": "gelu"},
            "hidden_act 'gelu' is not supported (only 'silu')",
        ),
    ],
)
def test_other_models_are_refused_before_any_tensor_is_read(tmp_path, monkeypatch, raw, message):
    import qwen.weights

    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr(
        qwen.weights, "safe_open", lambda *a, **k: pytest.fail("a tensor file was opened")
    )
    for step in (Config.load, load_weights):
        with pytest.raises(CheckpointError) as e:
            step(tmp_path)
        assert str(e.value).startswith(
            f"{tmp_path / 'config.json'}: {message}"
        ) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "is not valid JSON (Expecting value: line 1 column 1 (char 0)): download it again"),
        (
            '{"model_type": "qwen3_5", ',
            "is not valid JSON (Expecting property name enclosed in double quotes: "
            "line 1 column 27 (char 26)): download it again",
        ),
        ("[1, 2]", "holds a JSON list, not an object: download it again"),
        (
            b"\xff\xfe{}",
            "is not valid JSON ('utf-8' codec can't decode byte 0xff in position 0: invalid start "
            "byte): download it again",
        ),
    ],
)
def test_a_broken_config_json_is_one_line_that_names_it(tmp_path, text, message):
    f = tmp_path / "config.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CheckpointError) as e:
        Config.load(tmp_path)
    assert str(e.value) == f"{f} {message}"
    with pytest.raises(
        CheckpointError, match="config.json is missing: download the checkpoint again"
    ):
        Config.load(tmp_path / "nowhere")


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
    assert find_model() == ms.resolve()  # 4. ModelScope
    hf = _checkpoint(home / ".cache/huggingface/hub/models--Qwen--Qwen3.5-0.8B/snapshots/abc123")
    assert find_model() == hf.resolve()  # 3. Hugging Face cache
    local = _checkpoint(no_env / "models/Qwen3.5-0.8B")
    assert find_model() == local.resolve()  # 2. ./models/
    explicit = _checkpoint(no_env / "elsewhere")
    monkeypatch.setenv("QWEN_MODEL", str(explicit))
    assert find_model() == explicit.resolve()  # 1. $QWEN_MODEL


def test_find_model_error_gives_the_download_commands(no_env):
    with pytest.raises(ModelNotFound) as e:
        find_model()
    msg = str(e.value)
    for command in (
        "hf download Qwen/Qwen3.5-0.8B",
        "HF_ENDPOINT=https://hf-mirror.com",
        "modelscope download --model Qwen/Qwen3.5-0.8B",
        "python scripts/download.py",
        "python -m book.tiny",
    ):
        assert command in msg


def test_find_model_rejects_a_wrong_qwen_model(no_env, monkeypatch):
    _checkpoint(no_env / "models/Qwen3.5-0.8B")  # a typo must not fall back to this one
    monkeypatch.setenv("QWEN_MODEL", str(no_env / "nothing-here"))
    with pytest.raises(ModelNotFound) as e:
        find_model()
    assert str(e.value) == (
        f"QWEN_MODEL={no_env / 'nothing-here'} does not exist: point it at the checkpoint "
        "folder, or unset it to search ./models/ and the caches"
    )
    (no_env / "empty").mkdir()
    monkeypatch.setenv("QWEN_MODEL", str(no_env / "empty"))
    with pytest.raises(ModelNotFound, match=r"QWEN_MODEL=.*empty has no config.json: point it at"):
        find_model()
    monkeypatch.setenv("QWEN_MODEL", "")  # empty: as if unset
    assert find_model() == (no_env / "models/Qwen3.5-0.8B").resolve()


@pytest.fixture(scope="module")
def official_layout(tmp_path_factory):
    """A tiny Qwen3_5ForConditionalGeneration saved by transformers: the real naming, vision tower
    included."""
    transformers = pytest.importorskip("transformers")
    from tests.reference import tiny_text_config

    text = tiny_text_config().to_dict()
    vision = {
        "depth": 1,
        "hidden_size": 16,
        "num_heads": 2,
        "intermediate_size": 32,
        "patch_size": 4,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": text["hidden_size"],
        "num_position_embeddings": 16,
        "in_channels": 3,
    }
    cfg = transformers.Qwen3_5Config(
        text_config=text, vision_config=vision, tie_word_embeddings=True
    )
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
    assert any(k.startswith("model.visual.") for k in names)  # the file has a vision tower
    assert any(k.startswith("model.language_model.") for k in names)
    W = load_weights(folder)
    assert "embed_tokens.weight" in W and "norm.weight" in W
    assert not any(k.startswith(("model.", "visual", "mtp", "lm_head")) for k in W)
    expected = {
        k.removeprefix("model.language_model.")
        for k in model.state_dict()
        if k.startswith("model.language_model.")
    }
    assert set(W) == expected


def test_load_weights_skips_mtp_and_visual_of_the_tiny_model(tiny_model):
    every = json.loads((tiny_model / "model.safetensors.index.json").read_text())["weight_map"]
    assert any(k.startswith("mtp.") for k in every) and any(
        k.startswith("model.visual.") for k in every
    )
    W = load_weights(tiny_model)
    assert len(W) == sum(k.startswith("model.language_model.") for k in every)


def test_load_weights_sharded_equals_single(official_layout):
    folder, sharded, _ = official_layout
    assert len(json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]) > 0
    assert len(list(sharded.glob("*.safetensors"))) > 1
    a, b = load_weights(folder), load_weights(sharded)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_load_weights_dtype(tiny_model):
    assert load_weights(tiny_model)["norm.weight"].dtype == torch.bfloat16  # as stored
    assert load_weights(tiny_model, dtype=torch.float32)["norm.weight"].dtype == torch.float32


def test_load_weights_errors(tmp_path, official_layout):
    _checkpoint(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="No \\*.safetensors files"):
        load_weights(tmp_path / "empty")
    _, sharded, _ = official_layout
    broken = tmp_path / "broken"
    shutil.copytree(sharded, broken)
    sorted(broken.glob("*.safetensors"))[-1].unlink()
    with pytest.raises(CheckpointError, match="the download is incomplete; download it again"):
        load_weights(broken)


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda b: b"", "Error while deserializing header: header too small"),
        (
            lambda b: b[: len(b) // 2],
            "Error while deserializing header: incomplete metadata, file not fully covered",
        ),
        (lambda b: b[:20], "Error while deserializing header: invalid header length"),
        (
            lambda b: b"<html>404 Not Found</html>\n" * 10,
            "Error while deserializing header: header too large",
        ),
        (
            lambda b: b[:8] + b"\x00" * (len(b) - 8),
            "Error while deserializing header: invalid JSON in header: "
            "expected value at line 1 column 1",
        ),
    ],
)
def test_a_damaged_weights_file_is_one_line_that_names_it(
    tmp_path, official_layout, damage, reason
):
    folder, _, _ = official_layout
    shutil.copytree(folder, tmp_path / "ckpt")
    [weights] = (tmp_path / "ckpt").glob("*.safetensors")
    weights.write_bytes(damage(weights.read_bytes()))
    from qwen.model import from_pretrained

    for loader in (load_weights, from_pretrained):  # the clear loader and the default one
        with pytest.raises(CheckpointError) as e:
            loader(tmp_path / "ckpt")
        assert str(e.value) == f"{weights} is damaged or incomplete ({reason}): download it again"


def test_a_git_lfs_pointer_says_so(tmp_path, official_layout):
    folder, _, _ = official_layout
    shutil.copytree(folder, tmp_path / "ckpt")
    [weights] = (tmp_path / "ckpt").glob("*.safetensors")
    weights.write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 1746942600\n"
    )
    with pytest.raises(CheckpointError) as e:
        load_weights(tmp_path / "ckpt")
    assert str(e.value) == (
        f"{weights} is a Git LFS pointer, not the weights: run `git lfs pull` in that folder, "
        "or download it again"
    )


@pytest.mark.parametrize(
    "index,message",
    [
        (
            "{",
            "is not valid JSON (Expecting property name enclosed in double quotes: line 1 column "
            "2 (char 1)): download it again",
        ),
        ('{"metadata": {}}', "has no weight_map: download it again"),
        ('{"weight_map": {}}', "has no weight_map: download it again"),
    ],
)
def test_a_broken_index_is_one_line_that_names_it(tmp_path, official_layout, index, message):
    _, sharded, _ = official_layout
    shutil.copytree(sharded, tmp_path / "ckpt")
    f = tmp_path / "ckpt" / "model.safetensors.index.json"
    f.write_text(index)
    with pytest.raises(CheckpointError) as e:
        load_weights(tmp_path / "ckpt")
    assert str(e.value) == f"{f} {message}"


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    """transformers' Qwen3_5ForCausalLM with tie_word_embeddings=False (as the larger dense Qwen3.5
    models), every parameter random, saved as a checkpoint folder."""
    pytest.importorskip("transformers")
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from tests.reference import randomize, tiny_text_config

    cfg = Qwen3_5TextConfig(**{**tiny_text_config().to_dict(), "tie_word_embeddings": False})
    torch.manual_seed(0)
    ref = randomize(Qwen3_5ForCausalLM(cfg).eval())
    assert ref.lm_head.weight.data_ptr() != ref.model.embed_tokens.weight.data_ptr()
    folder = tmp_path_factory.mktemp("untied")
    ref.save_pretrained(folder)
    return folder, ref


def test_an_untied_checkpoint_loads_its_own_output_layer(untied):
    from qwen.model import Qwen, from_pretrained
    from tests.reference import max_diff

    folder, ref = untied
    clear = load(Qwen(Config.load(folder)), load_weights(folder)).requires_grad_(False)
    assert clear.lm_head.weight is not clear.embed_tokens.weight
    assert torch.equal(clear.lm_head.weight, ref.lm_head.weight)
    assert not torch.equal(clear.lm_head.weight, clear.embed_tokens.weight)
    ids = torch.randint(0, 512, (2, 70), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = ref(ids).logits
        max_diff("untied logits, qwen/model.py", clear(ids), expected, 2e-5)
        max_diff("untied logits, from_pretrained", from_pretrained(folder)(ids), expected, 2e-5)


def test_untied_without_lm_head_is_an_error(tmp_path, untied):
    from safetensors.torch import load_file, save_file

    folder, _ = untied
    shutil.copytree(folder, tmp_path / "ckpt")
    [weights] = (tmp_path / "ckpt").glob("*.safetensors")
    tensors = load_file(weights)
    del tensors["lm_head.weight"]
    save_file(tensors, weights, metadata={"format": "pt"})
    from qwen.model import from_pretrained

    for loader in (load_weights, from_pretrained):  # never the embedding in its place
        with pytest.raises(CheckpointError) as e:
            loader(tmp_path / "ckpt")
        assert str(e.value) == (
            f"{tmp_path / 'ckpt' / 'config.json'} says tie_word_embeddings: false, but no "
            "*.safetensors file holds lm_head.weight: download the checkpoint again"
        )


def test_load_is_strict_and_names_the_tensor():
    W = {"embed_tokens.weight": torch.ones(10, 4)}
    emb = load(Embedding(10, 4), W, "embed_tokens.")
    assert torch.equal(emb.weight, torch.ones(10, 4))
    with pytest.raises(ValueError, match=r"missing from the checkpoint: embed_tokens.weight"):
        load(Embedding(10, 4), {}, "embed_tokens.")
    with pytest.raises(ValueError, match=r"not used by Embedding: embed_tokens.bias"):
        load(Embedding(10, 4), {**W, "embed_tokens.bias": torch.ones(4)}, "embed_tokens.")
    with pytest.raises(
        ValueError, match=r"shape of embed_tokens.weight: checkpoint \(10, 4\), module \(12, 4\)"
    ):
        load(Embedding(12, 4), W, "embed_tokens.")


def test_load_fills_a_tied_parameter_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = Embedding(10, 4)
            self.head = nn.Module()
            self.head.weight = self.embed.weight  # the same Parameter under two names

    m = load(Tied(), {"embed.weight": torch.arange(40.0).view(10, 4)})
    assert m.head.weight is m.embed.weight and m.head.weight[9, 3] == 39


def test_parameter_budget_matches_the_tensors_and_transformers(tiny_model):
    from collections import Counter

    from qwen.weights import parameter_budget

    cfg = Config.load(tiny_model)
    counted = Counter()
    for name, t in load_weights(tiny_model).items():
        part = (
            ("embedding" if name.startswith("embed") else "final norm")
            if not name.startswith("layers.")
            else {
                "linear_attn": "DeltaNet mixers",
                "self_attn": "attention mixers",
                "mlp": "MLPs",
            }.get(name.split(".")[2], "layer norms")
        )
        counted[part] += t.numel()
    assert dict(counted) == parameter_budget(cfg)
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.AutoConfig.from_pretrained(OFFICIAL_CONFIG.parent)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(hf_cfg)
    official = parameter_budget(Config.load(OFFICIAL_CONFIG.parent))
    assert sum(official.values()) == sum(p.numel() for p in hf.parameters()) == 752_393_024
