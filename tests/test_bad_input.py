"""Bad input, round two (issue 19): every case is one clear message that names the problem and
the fix, with a non-zero exit (the programs) or a ValueError / CheckpointError (the library), or it
is handled correctly. Fast: tiny-model copies in tmp_path, tiny tensors, subprocesses only where a
process is the case."""

import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from book import checkpoint, regen, tiny
from qwen import fast
from qwen.generate import generate
from qwen.model import from_pretrained
from qwen.weights import (
    CheckpointError,
    Config,
    ModelNotFound,
    find_model,
    load_weights,
    plain_errors,
    weight_files,
)

ROOT = Path(__file__).resolve().parent.parent
MAIN = ROOT / "scripts" / "main.py"
WEIGHTS = tiny.WEIGHTS_FILE
INDEX = "model.safetensors.index.json"
NORM = "model.language_model.norm.weight"
NO_WEIGHTS = {
    "QWEN_MODEL": "",
    "HF_HUB_CACHE": "",
    "HF_HOME": "{tmp}",
    "MODELSCOPE_CACHE": "{tmp}",
    "HOME": "{tmp}",
}


def run(args, tmp_path, env=None, cwd=ROOT, **kw):
    """A command with HF_HUB_OFFLINE and the given environment ({tmp} is tmp_path)."""
    env = {k: v.format(tmp=tmp_path) for k, v in (env or {}).items()}
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        args,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
        **kw,
    )


def clear_message(text, *parts):
    """One message, no traceback, that says each of `parts`."""
    assert "Traceback" not in text, text
    for part in parts:
        assert part in text, f"{part!r} not in {text!r}"


@pytest.fixture(scope="module")
def tiny_tensors(tiny_model):
    return load_file(tiny_model / WEIGHTS)


@pytest.fixture
def tiny_copy(tmp_path, tiny_model):
    """A copy of the tiny model to damage (the tokenizer linked, not copied)."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    for name in ("config.json", WEIGHTS, INDEX):
        shutil.copy(tiny_model / name, folder / name)
    (folder / "tokenizer.json").symlink_to(tiny_model / "tokenizer.json")
    return folder


@pytest.fixture(scope="module")
def small(tmp_path_factory, tiny_model, tiny_tensors):
    """The tiny model with a 1024-token vocabulary: 1 MB, quick to copy, damage and load."""
    folder = tmp_path_factory.mktemp("small")
    shutil.copy(tiny_model / INDEX, folder / INDEX)
    shutil.copy(tiny_model / "config.json", folder / "config.json")
    edit_config(folder, vocab_size=1024)
    embed = "model.language_model.embed_tokens.weight"
    save_file({**tiny_tensors, embed: tiny_tensors[embed][:1024].clone()}, folder / WEIGHTS)
    return folder


@pytest.fixture(scope="module")
def tensors(small):
    return load_file(small / WEIGHTS)


@pytest.fixture
def ckpt(tmp_path, small):
    """A copy of the small model to damage."""
    return Path(shutil.copytree(small, tmp_path / "ckpt"))


def edit_config(folder, **text):
    raw = json.loads((folder / "config.json").read_text())
    raw["text_config"].update(text)
    (folder / "config.json").write_text(json.dumps(raw))


def edit_index(folder, change):
    index = json.loads((folder / INDEX).read_text())
    change(index["weight_map"])
    (folder / INDEX).write_text(json.dumps(index))


def shards(folder, tensors):
    """The tiny model split in two files, with an index that says which holds what."""
    names = sorted(tensors)
    half = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    (folder / WEIGHTS).unlink()
    for file, part in half.items():
        save_file({n: tensors[n] for n in part}, folder / file)
    edit_index(
        folder, lambda m: (m.clear(), m.update({n: f for f, part in half.items() for n in part}))
    )


# ----------------------------------------------------------------------------------------- library
@pytest.fixture(scope="module")
def models(tiny_model):
    return {"clear": from_pretrained(tiny_model), "fast": fast.from_pretrained(tiny_model)}


BAD_ARGUMENTS = [
    (dict(temperature=-1), "temperature=-1: must be a finite number >= 0 (0 is greedy)"),
    (dict(temperature=math.inf), "temperature=inf: must be a finite number >= 0"),
    (dict(temperature=math.nan), "temperature=nan: must be a finite number >= 0"),
    (dict(temperature="0.7"), "temperature='0.7': must be a finite number >= 0"),
    (
        dict(repetition_penalty=0),
        "repetition_penalty=0: must be a finite number > 0 (1 turns it off)",
    ),
    (dict(repetition_penalty=-1), "repetition_penalty=-1: must be a finite number > 0"),
    (dict(repetition_penalty=math.inf), "repetition_penalty=inf: must be a finite number > 0"),
    (
        dict(presence_penalty=math.nan),
        "presence_penalty=nan: must be a finite number (0 turns it off)",
    ),
    (dict(top_p=math.nan), "top_p=nan: must be a number in (0, 1] (1 keeps every token)"),
    (dict(top_p=0), "top_p=0: must be a number in (0, 1]"),
    (dict(top_p=1.5), "top_p=1.5: must be a number in (0, 1]"),
    (dict(top_k=-3), "top_k=-3: must be a whole number >= 0 (0 keeps every token)"),
    (dict(top_k=2.5), "top_k=2.5: must be a whole number >= 0"),
    (dict(max_new_tokens=-5), "max_new_tokens=-5: must be a whole number >= 0"),
    (dict(max_new_tokens=2.0), "max_new_tokens=2.0: must be a whole number >= 0"),
    (dict(max_new_tokens=True), "max_new_tokens=True: must be a whole number >= 0"),
    (dict(seed=2**64), f"seed={2**64}: must be None or a whole number in [0, 2**64)"),
    (dict(seed=-1), "seed=-1: must be None or a whole number in [0, 2**64)"),
    (dict(seed=1.5), "seed=1.5: must be None or a whole number in [0, 2**64)"),
    (
        dict(ids=[-1, 5]),
        "ids[0] is -1: a token id is a whole number from 0 to 248319 (the vocabulary); "
        "take ids from the tokenizer",
    ),
    (dict(ids=[1, 248320]), "ids[1] is 248320: a token id is a whole number from 0 to 248319"),
    (dict(ids=[10**30]), "ids[0] is 1000000000000000000000000000000: a token id is a whole number"),
    (dict(ids=[1.5]), "ids[0] is 1.5: a token id is a whole number"),
    (dict(ids=[True]), "ids[0] is True: a token id is a whole number"),
    (dict(ids=[]), "ids is empty: the model needs at least one prompt token to continue"),
    (
        dict(ids="hello"),
        "ids is text ('hello'): give token ids, such as tokenizer.encode(text).ids",
    ),
    (dict(ids=None), "ids=None: must be a list of token ids"),
    (dict(ids=torch.tensor([[1, 2]])), "must be a list or a 1-D integer tensor of token ids"),
    (dict(ids=torch.tensor([1.0])), "must be a list or a 1-D integer tensor of token ids"),
]


@pytest.mark.parametrize("kind", ["clear", "fast"])
@pytest.mark.parametrize("kw,message", BAD_ARGUMENTS, ids=[str(k) for k, _ in BAD_ARGUMENTS])
def test_generate_refuses_bad_arguments_alike_on_both_paths(models, kind, kw, message):
    kw = dict(kw)
    ids, n = kw.pop("ids", [1, 2, 3]), kw.pop("max_new_tokens", 3)
    with pytest.raises(ValueError) as e:
        list(generate(models[kind], ids, n, **kw))
    assert message in str(e.value)


@pytest.mark.parametrize("kind", ["clear", "fast"])
def test_edge_arguments_are_accepted(models, kind):
    m = models[kind]
    assert list(generate(m, [1], 0)) == []  # nothing asked
    assert len(list(generate(m, torch.tensor([1, 2]), 2, stop_ids=()))) == 2  # a 1-D tensor prompt
    top = list(generate(m, (1, 2), 3, temperature=1.0, seed=2**64 - 1, top_p=1e-9, stop_ids=()))
    assert top == list(generate(m, [1, 2], 3, stop_ids=()))  # top_p tiny: greedy
    assert (
        len(
            list(
                generate(
                    m,
                    [248319],
                    1,
                    repetition_penalty=1e-3,
                    presence_penalty=-2,
                    temperature=1e-6,
                    stop_ids=(),
                )
            )
        )
        == 1
    )


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(temperature=math.nan), "temperature=nan: must be a finite number >= 0"),
        (dict(temperature=1.0, top_p=0), "top_p=0: must be a number in (0, 1]"),
        (dict(temperature=1.0, top_k=-3), "top_k=-3: must be a whole number >= 0"),
    ],
)
def test_sample_checks_its_arguments_too(kw, message):
    from qwen.generate import sample

    with pytest.raises(ValueError, match=re.escape(message)):
        sample(torch.randn(50), **kw)


def test_a_prompt_as_long_as_the_context_is_refused_and_answers_stop_at_its_end(tiny_model):
    model = from_pretrained(tiny_model)
    model.cfg.max_position_embeddings = 8
    with pytest.raises(
        ValueError,
        match=r"the prompt is 8 tokens; the model reads at most 8 "
        r"\(max_position_embeddings\), answer included: shorten the prompt",
    ):
        list(generate(model, list(range(8)), 4))
    assert len(list(generate(model, [1, 2, 3, 4, 5], 10, stop_ids=()))) == 3  # positions 5, 6, 7


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_nan_or_inf_scores_stop_generation_with_the_cause(tiny_model, value):
    model = from_pretrained(tiny_model)
    model.norm.weight.data[3] = value
    with pytest.raises(
        ValueError,
        match="the model's scores for new token 1 are NaN or inf: its weights "
        r"are damaged .* or overflow its dtype \(try torch.float32\)",
    ):
        list(generate(model, [1, 2, 3], 4, temperature=0.7, seed=0))


# ------------------------------------------------------------------------------------- checkpoints
def test_duplicate_names_across_files_are_an_error(ckpt, tensors):
    (ckpt / INDEX).unlink()
    save_file({NORM: torch.zeros_like(tensors[NORM])}, ckpt / "old.safetensors")
    with pytest.raises(CheckpointError) as e:
        load_weights(ckpt)
    assert str(e.value) == (
        f"{NORM} is in both {WEIGHTS} and old.safetensors in {ckpt}: a file left from "
        "another download? remove it, or download the checkpoint again into an empty folder"
    )


def test_a_stray_file_the_index_does_not_name_is_ignored(ckpt, tensors, small):
    save_file({NORM: torch.zeros_like(tensors[NORM])}, ckpt / "old.safetensors")
    assert weight_files(ckpt) == [ckpt / WEIGHTS]
    assert torch.equal(load_weights(ckpt)["norm.weight"], load_weights(small)["norm.weight"])


def test_shards_load_as_the_index_says(ckpt, tensors, small):
    shards(ckpt, tensors)
    ours, theirs = load_weights(ckpt), load_weights(small)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.parametrize(
    "change,message",
    [
        (
            lambda m: m.update(
                {NORM: "b.safetensors" if m[NORM] == "a.safetensors" else "a.safetensors"}
            ),
            f"puts {NORM} in {{other}}, but it is in {{file}}: the index and the files come from "
            "different downloads; download again",
        ),
        (
            lambda m: m.update({"model.language_model.extra.weight": "a.safetensors"}),
            "puts model.language_model.extra.weight in a.safetensors, but no file holds it",
        ),
        (
            lambda m: m.pop(NORM),
            f"{{file}} holds {NORM}, which {{index}} does not list: the index and the files "
            "come from different downloads",
        ),
    ],
)
def test_the_index_must_say_where_each_tensor_is(ckpt, tensors, change, message):
    shards(ckpt, tensors)
    file = json.loads((ckpt / INDEX).read_text())["weight_map"][NORM]
    other = "b.safetensors" if file == "a.safetensors" else "a.safetensors"
    edit_index(ckpt, change)
    for loader in (load_weights, fast.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            loader(ckpt)
        assert message.format(file=file, other=other, index=ckpt / INDEX) in str(e.value)


@pytest.mark.parametrize(
    "where", ["../outside.safetensors", "sub/../../outside.safetensors", "{abs}"]
)
def test_an_index_cannot_name_a_file_outside_its_folder(ckpt, tmp_path, where):
    shutil.copy(ckpt / WEIGHTS, tmp_path / "outside.safetensors")
    where = where.format(abs=tmp_path / "outside.safetensors")
    edit_index(ckpt, lambda m: m.update({k: where for k in m}))
    for loader in (load_weights, fast.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            loader(ckpt)
        assert str(e.value) == (
            f"{ckpt / INDEX} names {where}, which is outside {ckpt}: an index names files "
            "in its own folder; download it again"
        )


def test_an_index_whose_files_are_not_names_is_an_error(ckpt):
    edit_index(ckpt, lambda m: m.update({NORM: 7}))
    with pytest.raises(
        CheckpointError, match="its weight_map must map names to file names: download it again"
    ):
        load_weights(ckpt)


@pytest.mark.parametrize(
    "dtype,name",
    [
        (torch.int8, "I8"),
        (torch.float64, "F64"),
        (torch.bool, "BOOL"),
        (torch.int32, "I32"),
        (torch.uint8, "U8"),
    ],
)
def test_a_tensor_of_a_dtype_we_do_not_read_is_named(ckpt, tensors, dtype, name):
    save_file({**tensors, NORM: tensors[NORM].to(dtype)}, ckpt / WEIGHTS)
    for loader in (load_weights, fast.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            loader(ckpt)
        assert str(e.value) == (
            f"{ckpt / WEIGHTS}: tensor {NORM} is {name}; this code reads BF16, F16, F32 only: "
            "use the original Qwen/Qwen3.5-0.8B weights, not a quantized or converted copy"
        )


def test_f16_and_f32_files_load(ckpt, tensors):
    save_file({k: v.to(torch.float16) for k, v in tensors.items()}, ckpt / WEIGHTS)
    assert load_weights(ckpt)["norm.weight"].dtype == torch.float16
    save_file({k: v.float() for k, v in tensors.items()}, ckpt / WEIGHTS)
    assert list(generate(fast.from_pretrained(ckpt), [1, 2], 2, stop_ids=()))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_weights_are_named(ckpt, tensors, value):
    t = tensors[NORM].clone()
    t[5] = value
    save_file({**tensors, NORM: t}, ckpt / WEIGHTS)
    with pytest.raises(CheckpointError) as e:
        load_weights(ckpt)
    assert (
        str(e.value)
        == f"{ckpt / WEIGHTS}: tensor {NORM} holds NaN or inf values: the file is damaged; "
        "download it again"
    )
    try:  # the fast path: refused when loading, or at the first token
        list(generate(fast.from_pretrained(ckpt), [1, 2], 2))
    except CheckpointError as e:
        assert "holds NaN or inf values" in str(e)
    except ValueError as e:
        assert "NaN or inf: its weights are damaged" in str(e)
    else:
        pytest.fail("NaN weights went unnoticed on the fast path")


@pytest.mark.parametrize(
    "text,problem",
    [
        ({"rms_norm_eps": -1e-6}, "rms_norm_eps is -1e-06, not a number > 0"),
        ({"rms_norm_eps": 0}, "rms_norm_eps is 0, not a number > 0"),
        ({"rms_norm_eps": "1e-6"}, "rms_norm_eps is '1e-6', not a number > 0"),
        ({"rms_norm_eps": None}, "rms_norm_eps is None, not a number > 0"),
        ({"hidden_size": 0}, "hidden_size is 0, not a whole number >= 1"),
        ({"hidden_size": -64}, "hidden_size is -64, not a whole number >= 1"),
        ({"hidden_size": 64.5}, "hidden_size is 64.5, not a whole number >= 1"),
        ({"hidden_size": True}, "hidden_size is True, not a whole number >= 1"),
        ({"vocab_size": 0}, "vocab_size is 0, not a whole number >= 1"),
        ({"max_position_embeddings": -1}, "max_position_embeddings is -1, not a whole number >= 1"),
        (
            {"num_hidden_layers": 0, "layer_types": []},
            "num_hidden_layers is 0, not a whole number >= 1",
        ),
        (
            {"num_key_value_heads": 3},
            "num_attention_heads 4 is not a multiple of num_key_value_heads 3",
        ),
        (
            {"linear_num_key_heads": 3},
            "linear_num_value_heads 4 is not a multiple of linear_num_key_heads 3",
        ),
        (
            {"layer_types": ["linear_attention"] * 7},
            "layer_types has 7 entries for num_hidden_layers 8",
        ),
        (
            {"layer_types": ["sliding_attention"] * 8},
            "layer_types must list linear_attention or full_attention",
        ),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": -1}},
            "rope_theta is -1, not a number > 0",
        ),
        (
            {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0}},
            "partial_rotary_factor is 0, not a number in (0, 1]",
        ),
        (
            {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 2}},
            "partial_rotary_factor is 2, not a number in (0, 1]",
        ),
        (
            {
                "head_dim": 30,
                "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.1},
            },
            "head_dim * partial_rotary_factor = 3 rotated dims, not an even number",
        ),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings is 'yes', not true or false"),
    ],
)
def test_a_config_no_model_can_have_is_refused_before_any_tensor(ckpt, text, problem):
    edit_config(ckpt, **text)
    for load in (Config.load, load_weights, from_pretrained, fast.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            load(ckpt)
        assert str(e.value).startswith(f"{ckpt / 'config.json'}: ")
        assert problem in str(e.value) and str(e.value).endswith(
            ": the config is damaged or edited; download it again"
        )


def test_a_text_config_that_is_not_an_object_is_named(ckpt):
    raw = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**raw, "text_config": None}))
    with pytest.raises(CheckpointError) as e:
        Config.load(ckpt)
    assert (
        str(e.value)
        == f"{ckpt / 'config.json'}: text_config is null, not an object: download it again"
    )


def test_load_weights_names_a_dtype_it_cannot_give(tiny_model):
    with pytest.raises(
        ValueError, match="dtype='bf16': use None .as stored., torch.float32, torch.bfloat16"
    ):
        load_weights(tiny_model, dtype="bf16")


# ------------------------------------------------------------------------------- finding the model
@pytest.fixture
def hub(monkeypatch, tmp_path):
    """An empty environment whose Hugging Face cache holds the repository's folder."""
    for var in ("QWEN_MODEL", "HF_HOME", "MODELSCOPE_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "hub" / "models--Qwen--Qwen3.5-0.8B"


def snapshot(hub, rev, complete=True, age=0):
    folder = hub / "snapshots" / rev
    folder.mkdir(parents=True)
    if complete:
        (folder / "config.json").write_text("{}")
    os.utime(folder, (time.time() - age, time.time() - age))
    return folder


def test_find_model_follows_refs_main(hub):
    snapshot(hub, "0000old", age=100)  # first by name, and older
    new = snapshot(hub, "ffffnew")
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("ffffnew")
    assert find_model() == new.resolve()


def test_an_incomplete_old_snapshot_does_not_block_the_main_one(hub):
    snapshot(hub, "0000old", complete=False, age=100)
    new = snapshot(hub, "ffffnew")
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("ffffnew\n")
    assert find_model() == new.resolve()


def test_without_refs_main_the_newest_snapshot_wins(hub):
    snapshot(hub, "0000new")
    snapshot(hub, "ffffold", age=100)
    assert find_model() == (hub / "snapshots" / "0000new").resolve()


@pytest.mark.parametrize("text", ["", "\n", "../other", "a/b"])
def test_a_refs_main_that_names_no_revision_says_so(hub, text):
    snapshot(hub, "0000old")
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text(text)
    with pytest.raises(ModelNotFound) as e:
        find_model()
    assert str(e.value) == (
        f"{hub / 'refs' / 'main'} names no revision ({text.strip()!r}): the cache is "
        f"damaged; delete {hub} and download again (hf download Qwen/Qwen3.5-0.8B)"
    )


@pytest.mark.parametrize("complete", [False, None])
def test_refs_main_naming_an_unfinished_download_says_so(hub, complete):
    snapshot(hub, "0000old")
    if complete is False:
        snapshot(hub, "ffffnew", complete=False)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("ffffnew")
    with pytest.raises(ModelNotFound) as e:
        find_model()
    assert str(e.value) == (
        f"{hub / 'refs' / 'main'} names revision ffffnew, but {hub / 'snapshots' / 'ffffnew'} "
        "has no config.json: that download did not finish; run it again "
        f"(hf download Qwen/Qwen3.5-0.8B), or delete {hub} to search on"
    )


# ----------------------------------------------------------------------------- what a folder holds
@pytest.fixture
def own_hash_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CACHE", tmp_path / "cache" / "sha256.json")


def test_a_copy_of_the_tiny_model_is_the_tiny_model(tiny_copy, own_hash_cache):
    assert checkpoint.identify(tiny_copy).label == "tiny test model"


@pytest.mark.parametrize("doctor", ["weights", "config", "flag only"])
def test_a_doctored_tiny_model_is_not_the_tiny_model(
    tiny_copy, tiny_tensors, own_hash_cache, doctor
):
    if doctor == "weights":  # the flag still says tiny
        save_file({**tiny_tensors, NORM: tiny_tensors[NORM] + 1}, tiny_copy / WEIGHTS)
    elif doctor == "config":
        edit_config(tiny_copy, rms_norm_eps=1e-5)
    else:  # another checkpoint that claims to be the tiny one
        save_file({k: v * 2 for k, v in tiny_tensors.items()}, tiny_copy / WEIGHTS)
    c = checkpoint.identify(tiny_copy)
    assert not c.tiny and not c.official and c.label == f"tiny (sha256 {c.sha256[:12]})"
    assert not tiny.is_tiny(tiny_copy)


def test_the_tiny_weights_under_another_config_are_not_the_tiny_model(tiny_copy, own_hash_cache):
    raw = json.loads((tiny_copy / "config.json").read_text())
    raw.pop("book_tiny_test_model")
    (tiny_copy / "config.json").write_text(json.dumps(raw))
    assert not tiny.is_tiny(tiny_copy)  # its config is not the recipe's: not the tiny model


@pytest.fixture
def small_recipe(monkeypatch, tmp_path):
    """book.tiny with a quick stand-in build, in a cache folder of its own."""

    def build(dest):
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "config.json").write_text('{"book_tiny_test_model": true}')
        save_file({"w": torch.arange(4.0)}, dest / WEIGHTS)

    monkeypatch.setattr(tiny, "build", build)
    monkeypatch.setenv("BOOK_TINY_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "damage,problem",
    [
        (
            lambda f: (f / WEIGHTS).write_bytes((f / WEIGHTS).read_bytes()[:-1] + b"x"),
            f"{WEIGHTS} differs",
        ),
        (lambda f: (f / WEIGHTS).unlink(), "added or missing"),
        (lambda f: (f / "extra.safetensors").write_bytes(b"x"), "added or missing"),
        (lambda f: (f / "config.json").write_text("{}"), "config.json differs"),
        (lambda f: (f / tiny.MANIFEST).unlink(), f"no {tiny.MANIFEST}"),
    ],
)
def test_a_damaged_cached_tiny_model_is_rebuilt(small_recipe, capsys, damage, problem):
    folder = tiny.path()
    good = (folder / WEIGHTS).read_bytes()
    damage(folder)
    assert tiny.path() == folder
    err = capsys.readouterr().err
    assert (
        f"the cached tiny model in {folder} is damaged (" in err
        and problem in err
        and "rebuilding it" in err
    )
    assert (folder / WEIGHTS).read_bytes() == good and tiny.damage(folder) is None
    assert [p.name for p in small_recipe.iterdir()] == [folder.name]  # nothing left aside


@pytest.mark.filterwarnings("ignore:'book.tiny' found in sys.modules")
def test_book_tiny_on_an_unwritable_folder_is_one_message(monkeypatch):
    import runpy

    monkeypatch.setenv("BOOK_TINY_DIR", "/dev/null/tiny")
    with pytest.raises(SystemExit) as e:  # python -m book.tiny
        runpy.run_module("book.tiny", run_name="__main__")
    clear_message(
        str(e.value),
        "error: cannot build the tiny model (",
        "set BOOK_TINY_DIR to a writable folder",
    )


# ----------------------------------------------------------------------------------- first contact
def test_a_chapter_script_without_weights_says_how_to_get_them(tmp_path):
    """The README's first command without weights: the download commands, the tiny model, exit 1."""
    r = run([sys.executable, "scripts/ch02_embedding.py"], tmp_path, NO_WEIGHTS)
    assert r.returncode == 1
    clear_message(
        r.stderr,
        "error: No Qwen/Qwen3.5-0.8B checkpoint found.",
        "hf download Qwen/Qwen3.5-0.8B",
        "python scripts/download.py",
        "export QWEN_MODEL=$(python -m book.tiny)",
    )
    assert r.stdout == ""


def test_every_chapter_script_finds_the_model_before_it_works():
    """So each one ends as ch02 does without weights: find_model() is its first step. (A script
    that reads no checkpoint at all, like chapter 21's from-scratch model, needs none.)"""
    uses = ("find_model()", "from_pretrained(", "load_weights(", "QWEN_MODEL")
    for script in sorted((ROOT / "scripts").glob("ch[0-9][0-9]_*.py")):
        code = script.read_text()
        if not any(s in code for s in uses):
            continue
        assert "find_model()" in code, script.name
        first_model_use = min(
            code.find(s) for s in ("find_model()", "from_pretrained(", "load_weights(") if s in code
        )
        assert code.find("find_model()") == first_model_use, script.name


def test_a_damaged_checkpoint_in_a_chapter_script_is_one_message(tmp_path, tiny_copy):
    (tiny_copy / WEIGHTS).write_bytes(b"")
    r = run([sys.executable, "scripts/ch02_embedding.py"], tmp_path, {"QWEN_MODEL": str(tiny_copy)})
    assert r.returncode == 1
    clear_message(
        r.stderr, f"error: {tiny_copy / WEIGHTS} is damaged or incomplete", "download it again"
    )


def test_the_excepthook_shows_only_our_messages_plainly(capsys):
    seen = []
    hook = plain_errors(lambda *exc: seen.append(exc[0]))
    hook(ModelNotFound, ModelNotFound("No checkpoint. Download it."), None)
    hook(ZeroDivisionError, ZeroDivisionError("x"), None)  # any other error: the usual traceback
    assert capsys.readouterr().err == "error: No checkpoint. Download it.\n" and seen == [
        ZeroDivisionError
    ]


# --------------------------------------------------------------------------------- scripts/main.py
def main_cmd(*args):
    return [sys.executable, str(MAIN), "--tiny", "--dtype", "fp32", *args]


def test_piping_into_head_ends_quietly(tmp_path):
    proc = subprocess.Popen(
        main_cmd("--prompt", "hi", "--temperature", "0", "--max-new-tokens", "400"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    proc.stdout.read(1)  # `| head -c 1`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, as cat would
    assert "Traceback" not in err and "Exception ignored" not in err and "Error" not in err, err


@pytest.mark.parametrize("script", ["scripts/main.py", "scripts/download.py"])
def test_ctrl_c_while_torch_loads_ends_quietly(tmp_path, script):
    proc = subprocess.Popen(
        [sys.executable, script, "--help"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def in_torch():
        try:
            return "libtorch" in Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:  # it has ended
            return True

    deadline = time.monotonic() + 60
    while not in_torch() and time.monotonic() < deadline:
        time.sleep(0.01)  # until it is inside `import torch`
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, 0) and "Traceback" not in err, err  # 0: it was quicker


def test_ctrl_c_while_the_model_loads_ends_quietly(program, capsys, monkeypatch):
    def interrupted(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(program.fast, "from_pretrained", interrupted)
    assert program.main(["--tiny", "--prompt", "hi"]) == 130
    assert capsys.readouterr().err.endswith("(interrupted)\n")


def test_a_full_disk_is_one_message(tmp_path):
    with open("/dev/full", "w") as full:
        r = run(main_cmd("--prompt", "hi", "--max-new-tokens", "4"), tmp_path, stdout=full)
    assert r.returncode == 1
    clear_message(
        r.stderr,
        "error: cannot write the answer to stdout (No space left on device): "
        "free some space or write it elsewhere",
    )
    assert "Exception ignored" not in r.stderr


def test_a_closed_stdin_is_one_message(tmp_path):
    r = run(main_cmd(), tmp_path, stdin=None, preexec_fn=lambda: os.close(0))  # main.py <&-
    assert r.returncode == 1
    clear_message(
        r.stderr,
        "error: stdin is closed, so there is nothing to read the conversation from: "
        'ask with --prompt "your question"',
    )


@pytest.fixture(scope="module")
def program():
    import importlib.util

    spec = importlib.util.spec_from_file_location("chat_main_bad_input", MAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "seed,message",
    [
        (str(2**64), f"argument --seed: must be a whole number from 0 to 2**64 - 1, not {2**64}"),
        ("-1", "argument --seed: must be a whole number from 0 to 2**64 - 1, not -1"),
        ("1e3", "argument --seed: must be a whole number from 0 to 2**64 - 1, not '1e3'"),
    ],
)
def test_a_seed_out_of_range_is_one_line(program, capsys, seed, message):
    with pytest.raises(SystemExit) as e:
        program.main(["--tiny", "--seed", seed, "--prompt", "hi"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_a_closed_stdout_is_one_message_and_a_closed_stderr_is_quiet(program, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    assert program.main(["--tiny", "--prompt", "hi"]) == 1
    clear_message(
        capsys.readouterr().err, "error: stdout is closed, so the answer has nowhere to go"
    )
    monkeypatch.undo()
    monkeypatch.setattr(sys, "stderr", None)
    assert program.main(["--tiny", "--prompt", "hi", "--max-new-tokens", "2"]) == 0
    assert "[prefill" not in capsys.readouterr().out  # the stats did not land in the answer


@pytest.mark.parametrize("prompt", [None, "-"])
def test_a_closed_stdin_is_one_message_in_process(program, capsys, monkeypatch, prompt):
    monkeypatch.setattr(sys, "stdin", None)
    assert program.main(["--tiny"] + (["--prompt", prompt] if prompt else [])) == 1
    clear_message(capsys.readouterr().err, "error: stdin is closed")


def test_a_closed_stdin_does_not_matter_with_a_prompt(program, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    assert program.main(["--tiny", "--prompt", "hi", "--max-new-tokens", "2"]) == 0


def test_a_console_that_is_not_utf8_shows_question_marks_and_says_why(program, capsys, monkeypatch):
    console = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", console)
    assert (
        program.main(["--tiny", "--prompt", "你好", "--temperature", "0", "--max-new-tokens", "6"])
        == 0
    )
    clear_message(
        capsys.readouterr().err,
        "(stdout's encoding is ascii: characters it cannot show print as "
        "'?'; set PYTHONIOENCODING=utf-8 or a UTF-8 locale to see them)",
    )
    assert console.errors == "replace"


def test_the_largest_seed_works(program, capsys):
    assert (
        program.main(
            ["--tiny", "--seed", str(2**64 - 1), "--prompt", "hi", "--max-new-tokens", "2"]
        )
        == 0
    )


def test_a_long_prompt_says_it_will_take_a_while(program, capsys, monkeypatch):
    monkeypatch.setattr(program, "LONG_PROMPT", 10)
    assert (
        program.main(
            ["--tiny", "--prompt", "one two three four five six seven", "--max-new-tokens", "1"]
        )
        == 0
    )
    assert re.search(
        r"\(reading a prompt of \d+ tokens: on a CPU this can take minutes; Ctrl-C stops it\)",
        capsys.readouterr().err,
    )


def test_a_prompt_past_the_context_is_one_message(program, capsys):
    assert program.main(["--tiny", "--prompt", "word " * 40, "--context", "16"]) == 1
    clear_message(
        capsys.readouterr().err, "error: the prompt is ", "the context holds 16 (--context"
    )


@pytest.mark.parametrize("bad", ["nan weights", "int8 tensor", "negative eps", "duplicate"])
def test_a_bad_checkpoint_in_main_is_one_message(program, capsys, tiny_copy, tiny_tensors, bad):
    if bad == "nan weights":
        save_file({**tiny_tensors, NORM: tiny_tensors[NORM] * math.nan}, tiny_copy / WEIGHTS)
    elif bad == "int8 tensor":
        save_file({**tiny_tensors, NORM: tiny_tensors[NORM].to(torch.int8)}, tiny_copy / WEIGHTS)
    elif bad == "negative eps":
        edit_config(tiny_copy, rms_norm_eps=-1)
    else:
        (tiny_copy / INDEX).unlink()
        save_file({NORM: tiny_tensors[NORM]}, tiny_copy / "old.safetensors")
    assert program.main(["--model", str(tiny_copy), "--prompt", "hi", "--max-new-tokens", "3"]) == 1
    err = capsys.readouterr().err
    expected = {
        "nan weights": "NaN or inf",
        "int8 tensor": "is I8; this code reads BF16, F16, F32 only",
        "negative eps": "rms_norm_eps is -1, not a number > 0",
        "duplicate": "is in both",
    }[bad]
    clear_message(err, "error: ", expected)


# -------------------------------------------------------------------------------------- book.regen
@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "abc"])
def test_regen_timeout_must_be_seconds(capsys, value):
    with pytest.raises(SystemExit) as e:
        regen.main(["--timeout", value, "ch02_embedding"])
    assert e.value.code == 2
    assert (
        f"argument --timeout: must be a number of seconds > 0, not {value!r}"
        in capsys.readouterr().err
    )


def _script(tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def _gone(pid, wait=10.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


CHILD = """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open({pidfile!r}, "w").write(str(child.pid))
    time.sleep({sleep})
"""


@pytest.mark.parametrize("sleep,timeout", [(0, 30), (60, 1)])
def test_a_script_leaves_no_process_behind(tmp_path, sleep, timeout):
    """Whether it ends by itself or is stopped at its timeout, what it started goes with it."""
    pidfile = tmp_path / "pid"
    cmd = _script(tmp_path, CHILD.format(pidfile=str(pidfile), sleep=sleep))
    if sleep:
        with pytest.raises(subprocess.TimeoutExpired):
            regen.run_group(cmd, timeout)
    else:
        assert regen.run_group(cmd, timeout).returncode == 0
    assert _gone(int(pidfile.read_text()))


def test_a_killed_regen_takes_its_script_along_and_the_next_run_sweeps_its_scratch(
    tmp_path, monkeypatch
):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    (tmp_path / "scripts").mkdir()
    pidfile = tmp_path / "pid"
    (tmp_path / "scripts" / "ch98_slow.py").write_text(
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    driver = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from book import regen
        regen.SCRIPTS = Path({str(tmp_path / "scripts")!r})
        regen.OUTPUTS = Path({str(tmp_path / "docs" / "outputs")!r})
        regen.EXTRA = {{}}
        regen.choose_model = lambda: regen.Model(Path("."), "a model", "0" * 64, False)
        sys.exit(regen.main([]))
    """)
    env = {**os.environ, "TMPDIR": str(scratch), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", driver],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not pidfile.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _gone(int(pidfile.read_text()))  # not an orphan
    assert [p.name.split("-")[:2] for p in scratch.iterdir()] == [["regen", "ch98_slow"]]
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    regen.sweep_scratch()
    assert list(scratch.iterdir()) == []  # swept by the next run


@pytest.mark.parametrize("batch", [0, -1, 1.5, True])
def test_a_cache_for_no_sequences_is_refused(batch):
    from qwen.cache import Cache
    from qwen.weights import Config

    with pytest.raises(ValueError, match=r"batch=.*whole number >= 1"):
        Cache(Config(layer_types=["linear_attention", "full_attention"]), batch)


def test_the_fast_loader_names_a_nan_weight_as_the_clear_one_does(tmp_path):
    """One loader: the mapped load checks NaN and inf like load_weights, with the same message."""
    import shutil

    from safetensors.torch import load_file, save_file

    from book.tiny import path as tiny_path
    from qwen import fast
    from qwen.model import from_pretrained
    from qwen.weights import CheckpointError

    src = tiny_path()
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    file = next(tmp_path.glob("*.safetensors"))
    W = load_file(file)
    name = next(k for k in W if k.endswith("mlp.up_proj.weight"))
    W[name][0, 0] = float("nan")
    save_file(W, file, metadata={"format": "pt"})
    messages = []
    for load in (from_pretrained, fast.from_pretrained):
        with pytest.raises(CheckpointError) as e:
            load(tmp_path)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and name in messages[0] and "NaN or inf" in messages[0]


@pytest.mark.parametrize("bad", [-1, 248320])
def test_the_model_refuses_an_id_outside_the_vocabulary_on_both_paths(bad):
    """A negative id would index the table from its end: both paths refuse it, in the same words."""
    from book.tiny import path as tiny_path
    from qwen import fast
    from qwen.model import from_pretrained

    messages = []
    for load in (from_pretrained, fast.from_pretrained):
        with pytest.raises(ValueError) as e:
            load(tiny_path())(torch.tensor([[5, bad, 7]]))
        messages.append(str(e.value))
    assert messages[0] == messages[1] and f"ids holds {bad}" in messages[0]
