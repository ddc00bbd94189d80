"""LoRA and supervised fine-tuning: a fresh LoRA model is the base model, only A and B learn,
merging changes no logit, the merged checkpoint in the official layout gives transformers our
logits, the loss scores the answer tokens only, and bad input is refused with a clear message."""

import pytest
import torch
from tokenizers import Tokenizer
from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

from book import sft_data
from book.tiny import path as tiny_path
from qwen import lora as lora_module
from qwen.lora import LoRALinear, add_lora, merge_lora, save_pretrained, sft_batch, sft_example
from qwen.model import from_pretrained
from qwen.train import next_token_loss
from tests.reference import max_diff, max_rel
from tests.test_parity import tiny_vlm

MERGE_TOL = 1e-5  # fp32: merged against unmerged logits, relative to their largest
HF_TOL = 1e-4  # fp32: transformers on the saved checkpoint against our logits
IDS = torch.randint(0, 512, (2, 70), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module")
def like(tmp_path_factory):
    """A checkpoint folder in the official layout (model.language_model.*, model.visual.*)."""
    folder = tmp_path_factory.mktemp("like")
    tiny_vlm(seed=1).save_pretrained(folder)
    return folder


def trained(model, seed=0):
    """Stand-in for training: every B random, so the update B @ A is not zero."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".B"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def test_a_fresh_lora_model_is_the_base_model(like):
    model = from_pretrained(like)
    with torch.no_grad():
        base = model(IDS)
        add_lora(model, r=4, alpha=8)
        assert torch.equal(model(IDS), base)  # B = 0: not close, equal


def test_only_a_and_b_take_gradients(like):
    model = add_lora(from_pretrained(like), r=4, alpha=8)
    n_proj = sum(isinstance(m, LoRALinear) for m in model.modules())
    assert n_proj == 3 * 3 + 4 + 3 * 4  # 3 DeltaNet layers x 3, one attention layer, 4 MLPs
    trained(model)
    next_token_loss(model(IDS), IDS).backward()
    for name, p in model.named_parameters():
        if name.endswith((".A", ".B")):
            assert p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert not p.requires_grad and p.grad is None, name
    expected = sum(m.A.numel() + m.B.numel() for m in model.modules() if isinstance(m, LoRALinear))
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == expected
    q = model.layers[3].self_attn.q_proj
    assert q.A.shape == (4, 64) and q.B.shape == (2 * 4 * 32, 4) and q.scale == 2


def test_merge_gives_the_same_logits(like):
    model = trained(add_lora(from_pretrained(like), r=4, alpha=8))
    with torch.no_grad():
        unmerged = model(IDS)
        merge_lora(model)
        merged = model(IDS)
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert type(model.layers[0].linear_attn.in_proj_qkv) is torch.nn.Linear
    max_rel("merged vs unmerged LoRA, fp32", merged, unmerged, MERGE_TOL)
    base = from_pretrained(like)(IDS)
    assert (merged - base).abs().max() > 0.1  # the update is really there


def test_the_merged_checkpoint_loads_in_transformers(like, tmp_path):
    model = merge_lora(trained(add_lora(from_pretrained(like), r=4, alpha=8)))
    folder = save_pretrained(model, tmp_path / "merged", like=like)
    names = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "model.safetensors.index.json",
        "model.safetensors-00001-of-00001.safetensors",
    } <= names
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    with torch.no_grad():
        ours = model(IDS)
        text = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        max_diff("transformers on the merged LoRA checkpoint", text(IDS).logits, ours, HF_TOL)
        full, info = Qwen3_5ForConditionalGeneration.from_pretrained(
            folder, dtype=torch.float32, output_loading_info=True
        )
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        max_diff(
            "transformers' multimodal class on it, text only", full.eval()(IDS).logits, ours, HF_TOL
        )
    # our own loader reads it back too, and the base model's files were not touched
    max_diff("our loader on the merged LoRA checkpoint", from_pretrained(folder)(IDS), ours, HF_TOL)


def test_the_loss_scores_the_answer_tokens_only():
    tok = Tokenizer.from_file(str(tiny_path() / "tokenizer.json"))
    ids, mask = sft_example(tok, "What is AI?", "A branch of science.")
    text = [tok.decode([i], skip_special_tokens=False) for i in ids]
    first = mask.index(True)
    assert "".join(text[first:]) == "A branch of science.<|im_end|>" and all(mask[first:])
    assert "".join(text[:first]).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids, mask = sft_batch([(ids, mask), (ids[:10], mask[:10])], pad_id=0)
    assert ids.shape == mask.shape == (2, len(text)) and not mask[1].any()
    logits = torch.randn(2, len(text), 248320, generator=torch.Generator().manual_seed(0))
    loss = next_token_loss(logits, ids, mask)
    for t in (1, first - 1):  # a question token, the last token of the assistant's header
        changed = ids.clone()
        changed[0, t] = 5
        assert next_token_loss(logits, changed, mask) == loss
    changed = ids.clone()
    changed[0, first + 1] = 5  # an answer token
    assert next_token_loss(logits, changed, mask) != loss


def test_right_padding_changes_no_real_token(like):
    model = from_pretrained(like)
    short, long = IDS[0, :10].tolist(), IDS[1].tolist()
    ids, mask = sft_batch([(short, [True] * 10), (long, [True] * len(long))], pad_id=7)
    assert ids[0, 10:].eq(7).all() and not mask[0, 10:].any() and mask[1].all()
    with torch.no_grad():
        max_diff("a padded row, its real tokens", model(ids)[0, :10], model(ids[:1, :10])[0], 1e-5)


def test_the_chat_data_is_real_and_split_once():
    data = sft_data.load()
    assert len(data["train"]) > 2000 and len(data["held_out"]) > 200
    langs = {lang for *_, lang in data["held_out"]}
    assert langs == {"english", "chinese"}
    assert not {q for q, *_ in data["train"]} & {q for q, *_ in data["held_out"]}
    assert "BSD" in sft_data.licence() and "gunthercox/chatterbot-corpus" in sft_data.credit()


def test_bad_input_is_refused(like, tmp_path):
    model = from_pretrained(like)
    for r in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="rank r must be a whole number"):
            add_lora(model, r=r)
    with pytest.raises(ValueError, match="alpha must be a number > 0"):
        add_lora(model, r=4, alpha=0)
    with pytest.raises(ValueError, match=r"unknown LoRA targets \['qkv_proj'\].*q_proj"):
        add_lora(model, targets=["q_proj", "qkv_proj"])
    with pytest.raises(TypeError, match=r"write targets=\['q_proj'\]"):
        add_lora(model, targets="q_proj")
    with pytest.raises(ValueError, match="not low rank"):
        add_lora(model, r=8, targets=["in_proj_b"])  # a [4, 64] projection
    add_lora(model, r=4)
    with pytest.raises(ValueError, match="already has LoRA modules"):
        add_lora(model, r=4)
    with pytest.raises(ValueError, match=r"not merged .* call merge_lora\(model\)"):
        save_pretrained(model, tmp_path / "out", like=like)
    assert not list(tmp_path.iterdir())
    merge_lora(model)
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_pretrained(model, tmp_path / "taken", like=like)


def test_a_failed_save_leaves_no_folder(like, tmp_path, monkeypatch):
    model = from_pretrained(like)

    def full_disk(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(lora_module, "save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        save_pretrained(model, tmp_path / "out", like=like)
    assert not list(tmp_path.iterdir())  # neither the folder nor its temporary twin
    old = tmp_path / "old"
    monkeypatch.undo()
    save_pretrained(model, old, like=like)
    monkeypatch.setattr(lora_module, "save_file", full_disk)
    with pytest.raises(OSError):
        save_pretrained(model, old, like=like, overwrite=True)
    assert (old / "config.json").is_file()  # the old checkpoint is still whole
