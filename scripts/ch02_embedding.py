"""Chapter 2: the embedding and the tied output layer.
Who is close to whom, and a model with no middle."""
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from book.out import record
from qwen.embedding import Embedding, LMHead
from qwen.weights import Config, find_model, load, load_weights

path = find_model()
cfg = Config.load(path)
W = load_weights(path, dtype=torch.float32)
tok = Tokenizer.from_file(str(path / "tokenizer.json"))
# same names as in the file
emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
head = LMHead(emb.weight)                                  # shares the very Parameter

ids = torch.tensor([tok.encode("今天天气不错，我们去公园").ids])
x = emb(ids)
print(f"in:  ids {tuple(ids.shape)} -> vectors {tuple(x.shape)};  "
      f"out: -> scores {tuple(head(x).shape)}")
share = emb.weight.numel() / sum(t.numel() for t in W.values())
print(f"table {emb.weight.shape[0]:,} x {emb.weight.shape[1]:,} = "
      f"{emb.weight.numel() / 1e6:.1f}M parameters, "
      f"{share:.0%} of the model; head shares it: {head.weight is emb.weight}")

E = F.normalize(emb.weight, dim=-1)                       # unit rows: a dot product is now a cosine
for word in ("今天", "公园", "北京", "快乐", "128"):
    i = tok.encode(word).ids[0]
    near = (E @ E[i]).topk(6).indices[1:]                  # the top one is the word itself
    print(f"  {word!r:7} nearest: {[tok.decode([j]) for j in near.tolist()]}")
a, b, c = (E[tok.encode(w).ids[0]] for w in ("今天", "明天", "公园"))
print(f"  cos(今天, 明天) = {a @ b:.2f},  "
      f"cos(今天, 公园) = {a @ c:.2f}")

out = ids                                                  # a "model": only an entrance and an exit
for _ in range(5):
    out = torch.cat([out, head(emb(out))[0, -1].argmax().view(1, 1)], dim=1)
print("with no layers in between it continues:", repr(tok.decode(out[0, ids.shape[1]:].tolist())))
record(n_ids=ids.shape[1], table_rows=f"{emb.weight.shape[0]:,}",
       table_params_m=f"{emb.weight.numel() / 1e6:.1f}",
       share=f"{share:.0%}", cos_today_tomorrow=f"{a @ b:.2f}", cos_today_park=f"{a @ c:.2f}")
