"""What chapters 17 and 18 add to qwen/train.py and claim on their pages: the loss keeps fp64 and
widens bf16 to fp32, a uniform guess over V tokens has perplexity V, and SavedBytes counts what the
pages say a layer keeps (the MLP of exercise 18.2; a checkpointed layer keeps only its input)."""

import math

import torch
import torch.nn.functional as F

from qwen.mlp import MLP
from qwen.model import Qwen
from qwen.train import IGNORE, SavedBytes, cross_entropy, next_token_loss, trainable
from tests.reference import our_config, reference_model


def test_the_loss_is_summed_in_fp32_or_wider():
    z = torch.randn(4, 9, dtype=torch.float64)
    y = torch.tensor([0, 3, IGNORE, 8])
    assert cross_entropy(z, y).dtype == torch.float64
    assert cross_entropy(z.bfloat16(), y).dtype == torch.float32
    assert torch.allclose(cross_entropy(z, y), F.cross_entropy(z, y), rtol=1e-12)


def test_a_uniform_guess_has_perplexity_v():
    V = 248_320
    loss = cross_entropy(torch.zeros(3, V, dtype=torch.float64), torch.tensor([0, 7, V - 1]))
    assert math.isclose(loss.item(), math.log(V), rel_tol=1e-12)
    assert round(math.exp(loss.item())) == V


def test_ignored_targets_drop_out_of_the_mean():
    z = torch.randn(6, 5)
    y = torch.tensor([1, IGNORE, 2, IGNORE, IGNORE, 4])
    keep = y != IGNORE
    assert torch.allclose(cross_entropy(z, y), cross_entropy(z[keep], y[keep]))


def test_an_mlp_keeps_its_input_once_and_four_hidden_tensors():
    T, dim, hidden = 5, 8, 12
    mlp = MLP(dim, hidden)
    with SavedBytes(mlp) as saved:
        mlp(torch.randn(1, T, dim, requires_grad=True))
    assert saved.bytes == 4 * T * (dim + 4 * hidden)


def test_checkpointed_layers_keep_their_inputs_and_nothing_inside():
    """With checkpointing each layer keeps its input [1, T, hidden] and the rope tables (shared by
    all): exactly that many bytes more than the model with no layers at all keeps."""
    cfg = our_config(reference_model(seed=0).config)
    T = 70

    def kept(checkpointing, layers=True):
        torch.manual_seed(0)
        model = Qwen(cfg)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.02)
        trainable(model, checkpointing=checkpointing)
        if not layers:
            model.layers = torch.nn.ModuleList()
        ids = torch.randint(0, cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(1))
        with SavedBytes(model) as saved:
            next_token_loss(model(ids), ids)
        return saved.bytes

    rotary = int(cfg.head_dim * cfg.partial_rotary_factor)
    inputs = len(cfg.layer_types) * T * cfg.hidden_size * 4 + 2 * T * rotary * 4  # + cos, sin
    assert kept(True) == kept(True, layers=False) + inputs
    assert kept(False) > 10 * kept(True)


def test_the_chunked_loss_equals_the_whole_one_and_keeps_no_logits():
    from qwen.embedding import LMHead
    from qwen.train import chunked_cross_entropy

    gen = torch.Generator().manual_seed(0)
    W = torch.nn.Parameter(torch.randn(1000, 16, generator=gen))
    head = LMHead(W)
    y = torch.randint(0, 1000, (70,), generator=gen)
    y[:30] = IGNORE  # the first chunk of 25 scores nothing, the second only part
    grads = []
    for chunked in (False, True):
        h = torch.randn(70, 16, generator=torch.Generator().manual_seed(1), requires_grad=True)
        W.grad = None
        with SavedBytes(head) as saved:
            if chunked:
                loss = chunked_cross_entropy(h, head, y, chunk=25)
            else:
                loss = cross_entropy(head(h), y)
        loss.backward()
        grads.append((loss.detach(), h.grad, W.grad.clone(), saved.bytes))
    (l1, h1, w1, b1), (l2, h2, w2, b2) = grads
    assert torch.allclose(l1, l2) and torch.allclose(h1, h2, atol=1e-6)
    assert torch.allclose(w1, w2, atol=1e-5)
    assert b2 < 70 * 16 * 4 * 2 < b1  # h and a few scalars, not [70, 1000] logits
