"""Chapter 10: the tokenizer. Text -> NFC -> regex pieces -> bytes -> BPE tokens, and back."""
from collections import Counter

from tokenizers import Tokenizer

from book.out import record, save_figure
from book.tokenizer import bytes_to_unicode
from qwen.weights import Config, find_model

path = find_model()
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
# the vocabulary writes each byte as one character
to_byte = {c: b for b, c in bytes_to_unicode().items()}
token_bytes = lambda i: bytes(to_byte[c] for c in tok.id_to_token(i))   # noqa: E731


def show(text):
    """The ids of `text`, then each token as text,
    or as hex bytes when it is not a whole printable character."""
    ids = tok.encode(text).ids
    shown = [tok.decode([i]) if tok.decode([i]).isprintable() and "\ufffd" not in tok.decode([i])
             else token_bytes(i).hex(" ") for i in ids]
    print(f"   {text!r} -> {ids}\n      " + " | ".join(shown))


text = "The capital of France is Paris. 今天天气不错，我们去公园 in 2026!"
pieces = [text[a:b] for _, (a, b) in tok.pre_tokenizer.pre_tokenize_str(text)]
print(f"1. the regex cuts {len(text)} characters into {len(pieces)} pieces; "
      "BPE never merges across them:")
print("   ", pieces)
show(text)

print("\n2. common Chinese words are single tokens (one id for two characters, six bytes):")
for word in ("今天", "公园", "北京", "快乐", "天气"):
    print(f"   {word} -> {tok.encode(word).ids}")
vocab = [token_bytes(i) for i in range(tok.get_vocab_size(with_added_tokens=False))]
cjk = Counter()
for b in vocab:
    s = b.decode("utf-8", errors="ignore")
    if s and len(s.encode()) == len(b) and all("\u4e00" <= ch <= "\u9fff" for ch in s):
        cjk[len(s)] += 1
print(f"   the vocabulary holds {sum(cjk.values()):,} all-Chinese tokens: "
      + ", ".join(f"{cjk[n]:,} of {n} character{'s' * (n > 1)}" for n in sorted(cjk) if n <= 4)
      + ", ...")
sizes = {}                                                 # characters, bytes, tokens
for lang, sample in (("zh", "今天天气不错，我们去公园"),
                     ("en", "The weather is nice today, let's go to the park")):
    n = len(tok.encode(sample).ids)
    sizes[lang] = len(sample), len(sample.encode()), n
    print(f"   {len(sample):2} characters, {len(sample.encode()):2} bytes -> "
          f"{n:2} tokens: {sample!r}")

print("\n3. numbers are split digit by digit, so every number is spelled the same way:")
for number in ("7", "128", "2026", "3.14159"):
    print(f"   {number:>8} -> {tok.encode(number).ids}")

print("\n4. byte level: all 256 bytes are tokens, so any text encodes; "
      "a character may span tokens:")
single = sum(len(b) == 1 for b in vocab)
print(f"   single-byte tokens: {single}; longest token: {max(map(len, vocab))} bytes")
# emoji, emoji + skin tone, control bytes, private use
for s in ("😀", "👍🏽", "\x00\x07\x1b", "\ue000"):
    show(s)
    assert tok.decode(tok.encode(s).ids) == s

print("\n5. NFC first: the same letter typed two ways gets the same ids")
composed, decomposed = "caf\u00e9", "cafe\u0301"
print(f"   {composed.encode()} -> {tok.encode(composed).ids};  "
      f"{decomposed.encode()} -> {tok.encode(decomposed).ids}")

print("\n6. added tokens (special ones vanish with skip_special_tokens; <think> stays visible):")
added = tok.get_added_tokens_decoder()
for i in (248044, 248045, 248046, 248068, 248069, 248076):
    print(f"   {i} {added[i].content:15} special={added[i].special}")
chat = "<|im_start|>user\nhi<|im_end|>"
print(f"   {chat!r} -> {tok.encode(chat).ids} -> {tok.decode(tok.encode(chat).ids)!r}")

rows, ids_used = Config.load(path).vocab_size, tok.get_vocab_size(with_added_tokens=True)
print(f"\n7. the embedding has {rows:,} rows, the tokenizer {ids_used:,} ids: "
      f"rows {ids_used:,}..{rows - 1:,} ({rows - ids_used} rows) are padding that no text reaches")

lengths = Counter(len(b) for b in vocab)
record(n_pieces=len(pieces), n_tokens_example=len(tok.encode(text).ids),
       cjk_tokens=f"{sum(cjk.values()):,}", cjk_two_char=f"{cjk[2]:,}",
       vocab_tokens=f"{len(vocab):,}", padding_rows=rows - ids_used,
       longest_token_bytes=max(lengths), n_special=ids_used - len(vocab), n_ids=f"{ids_used:,}",
       zh_chars=sizes["zh"][0], zh_bytes=sizes["zh"][1], zh_tokens=sizes["zh"][2],
       en_chars=sizes["en"][0], en_tokens=sizes["en"][2],
       tallest_bar_bytes=max(range(1, 17), key=lengths.get),
       length_peaks=", ".join(str(k) for k in range(2, 16)
                                if lengths[k - 1] < lengths[k] > lengths[k + 1]))


def draw(t):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    n = range(1, 17)
    ax.bar(list(n), [lengths[k] for k in n], color="#4c72b0")
    ax.set_xlabel(t("词元长度（字节）", "token length (bytes)"))
    ax.set_ylabel(t("词元数", "tokens"))
    ax.set_xticks(list(n))
    return fig


save_figure("ch10_token_lengths", draw)
