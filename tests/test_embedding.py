"""qwen/embedding.py: a lookup on the way in, the same table on the way out."""

import torch

from qwen.embedding import Embedding, LMHead
from qwen.weights import Config, load, load_weights


def test_lookup_takes_rows():
    emb = Embedding(10, 4)
    torch.nn.init.normal_(emb.weight)
    ids = torch.tensor([[1, 2, 3], [3, 3, 0]])
    x = emb(ids)
    assert x.shape == (2, 3, 4)
    assert torch.equal(x[1, 0], emb.weight[3]) and torch.equal(x[1, 2], emb.weight[0])


def test_head_is_the_same_parameter_and_scores_every_row():
    emb = Embedding(10, 4)
    torch.nn.init.normal_(emb.weight)
    head = LMHead(emb.weight)
    assert head.weight is emb.weight
    h = torch.randn(2, 3, 4)
    assert torch.allclose(head(h), torch.einsum("btd,vd->btv", h, emb.weight))
    with torch.no_grad():
        emb.weight[5] = 0  # change the table: the head sees it at once
    assert torch.equal(head(h)[..., 5], torch.zeros(2, 3))


def test_loads_the_tiny_model_table(tiny_model):
    cfg = Config.load(tiny_model)
    W = load_weights(tiny_model, dtype=torch.float32)
    emb = load(Embedding(cfg.vocab_size, cfg.hidden_size), W, "embed_tokens.")
    assert emb.weight.shape == (248320, cfg.hidden_size) and emb.weight.dtype == torch.float32
    assert torch.equal(emb(torch.tensor([[97375]]))[0, 0], W["embed_tokens.weight"][97375])
