"""The entrance and exit: one table turns token ids into vectors and vectors back into scores."""
import torch
import torch.nn as nn


class Embedding(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, dim))   # one row per token id

    def forward(self, ids):
        return self.weight[ids]                        # taking rows: [B, T] -> [B, T, dim]


class LMHead(nn.Module):
    """tie_word_embeddings=True: the output layer reuses the embedding table instead of its own."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight                           # the very same Parameter object

    def forward(self, x):
        return x @ self.weight.T                       # [B, T, dim] @ [dim, vocab] -> [B, T, vocab]
