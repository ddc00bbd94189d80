"""Solutions to the three exercises of the embedding lesson (docs/*/lessons/embedding.ipynb)."""

# the lessons show this code with its comments aligned in columns, which the
# formatter would undo (as for qwen/); ruff check still holds it to the rules
# fmt: off
import torch
from sklearn.manifold import TSNE


def lookup(table, ids):
    """Exercise 1: the rows of `table` picked by `ids`."""
    # [...] ids -> [..., dim]: indexing is the whole lookup
    return table[ids]


def pull_together(embedding, steps=20, lr=0.1):
    """Exercise 2: train rows 0 and 1 of `embedding` toward each other with plain SGD."""
    optimizer = torch.optim.SGD(embedding.parameters(), lr=lr)
    for _ in range(steps):
        vec0 = embedding(torch.tensor(0))
        vec1 = embedding(torch.tensor(1))
        # squared distance: zero exactly when they meet
        loss = (vec0 - vec1).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def embed_and_project(model, words):
    """Exercise 3: one unit vector per word from the model, and a 2-D t-SNE map of them."""
    vectors = model.encode(words, normalize_embeddings=True)                      # [16, 384]
    points = TSNE(n_components=2, perplexity=5, random_state=0).fit_transform(vectors)   # [16, 2]
    return vectors, points
