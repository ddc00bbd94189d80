"""The chunked gated delta rule's backward, written by hand (chapter 19): the forward keeps only
its inputs and the state entering each chunk; the backward walks the chunks in reverse, recomputes
one chunk's intermediates and applies the gradient formulas derived on the page."""
# --8<-- [start:imports]
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from qwen.deltanet import GatedDeltaNet

# --8<-- [end:imports]


# --8<-- [start:pieces]
def chunk_pieces(q, k, v, g, beta):
    """What one chunk computes without the state, chapter 7's formulas for one chunk.
    q, k [B, H, C, dk], v [B, H, C, dv], g, beta [B, H, C]."""
    C = g.shape[-1]
    gamma = g.cumsum(-1)                                    # log decay from chunk start to step i
    causal = torch.ones(C, C, dtype=torch.bool, device=g.device).tril()
    decay = ((gamma[..., :, None] - gamma[..., None, :])    # Gamma [B, H, C, C]
             .masked_fill(~causal, float("-inf")).exp())
    kb = k * beta[..., None]
    G = kb @ k.transpose(-1, -2)                            # beta_i k_i . k_j
    M = (G * decay).tril(-1) + torch.eye(C, dtype=G.dtype, device=G.device)
    Xu, Xw = v * beta[..., None], kb * gamma.exp()[..., None]
    U = torch.linalg.solve_triangular(M, Xu, upper=False)   # M U = beta v   [B, H, C, dv]
    W = torch.linalg.solve_triangular(M, Xw, upper=False)   # M W = beta e^gamma k   [B, H, C, dk]
    QK = q @ k.transpose(-1, -2)
    return dict(gamma=gamma, decay=decay, kb=kb, G=G, M=M, Xu=Xu, Xw=Xw, U=U, W=W, QK=QK,
                attn=QK * decay,                            # causal, decayed q.k
                q_in=q * gamma.exp()[..., None],            # queries read S decayed to step i
                k_out=k * (gamma[..., -1:] - gamma).exp()[..., None])  # keys decayed to chunk end
# --8<-- [end:pieces]


def chunked(C, *xs):
    """Pad [B, H, T, ...] tensors to a multiple of C steps and view them [B, H, n, C, ...]."""
    out = []
    for x in xs:
        T = x.shape[2]
        pad = -T % C                                        # zero steps (beta = g = 0): no change
        x = F.pad(x, (0, 0) * (x.ndim - 3) + (0, pad))
        out.append(x.view(*x.shape[:2], (T + pad) // C, C, *x.shape[3:]))
    return out


class ChunkGatedDeltaRule(torch.autograd.Function):
    """chunk_gated_delta_rule with a backward by hand. Saved for the backward: the inputs and the
    state entering each chunk, [B, H, n, dk, dv]; nothing of size C x C or C x d per chunk."""

    # --8<-- [start:forward]
    @staticmethod
    def forward(ctx, q, k, v, g, beta, state, chunk_size):
        B, H, T, dk = k.shape
        qc, kc, vc, gc, bc = chunked(chunk_size, q, k, v, g, beta)
        n = gc.shape[2]
        S = q.new_zeros(B, H, dk, v.shape[-1]) if state is None else state
        states = q.new_empty(B, H, n, dk, v.shape[-1])      # the state entering each chunk
        out = q.new_empty(*vc.shape)
        for i in range(n):
            p = chunk_pieces(qc[:, :, i], kc[:, :, i], vc[:, :, i], gc[:, :, i], bc[:, :, i])
            states[:, :, i] = S
            new_v = p["U"] - p["W"] @ S                      # V' = U - W S
            out[:, :, i] = p["q_in"] @ S + p["attn"] @ new_v
            S = S * p["gamma"][..., -1, None, None].exp() + p["k_out"].transpose(-1, -2) @ new_v
        ctx.save_for_backward(q, k, v, g, beta, states)
        ctx.chunk_size, ctx.has_state = chunk_size, state is not None
        return out.view(B, H, -1, v.shape[-1])[:, :, :T], S
    # --8<-- [end:forward]

    @staticmethod
    @once_differentiable                                    # no graph of the backward itself
    def backward(ctx, d_out, d_state):
        # --8<-- [start:backward_walk]
        q, k, v, g, beta, states = ctx.saved_tensors
        T, C = q.shape[2], ctx.chunk_size
        if d_out is None:                                   # only the final state was used
            d_out = v.new_zeros(v.shape)
        qc, kc, vc, gc, bc, dOc = chunked(C, q, k, v, g, beta, d_out)
        dS = states.new_zeros(states[:, :, 0].shape) if d_state is None else d_state
        dq, dk, dv = (torch.empty_like(x) for x in (qc, kc, vc))
        dg, dbeta = torch.empty_like(gc), torch.empty_like(bc)
        for i in reversed(range(gc.shape[2])):
            qi, ki, vi, bi = qc[:, :, i], kc[:, :, i], vc[:, :, i], bc[:, :, i]
            p = chunk_pieces(qi, ki, vi, gc[:, :, i], bi)   # recompute this chunk only
            S, dO = states[:, :, i], dOc[:, :, i]
            gamma, decay = p["gamma"], p["decay"]
            last = gamma[..., -1, None, None].exp()         # e^{gamma_C}  [B, H, 1, 1]
            # --8<-- [end:backward_walk]
            # --8<-- [start:backward_state]
            # O = Q_in S + P V',  S_next = e^{gamma_C} S + K_out^T V',  V' = U - W S
            new_v = p["U"] - p["W"] @ S
            d_new_v = p["attn"].transpose(-1, -2) @ dO + p["k_out"] @ dS
            d_q_in = dO @ S.transpose(-1, -2)
            d_attn = dO @ new_v.transpose(-1, -2)
            d_k_out = new_v @ dS.transpose(-1, -2)
            d_last = (dS * S).sum((-1, -2)) * last[..., 0, 0]   # through e^{gamma_C} S
            dU, dW = d_new_v, -d_new_v @ S.transpose(-1, -2)
            dS = (p["q_in"].transpose(-1, -2) @ dO + last * dS   # to the chunk before
                  - p["W"].transpose(-1, -2) @ d_new_v)
            # --8<-- [end:backward_state]
            # --8<-- [start:backward_solve]
            # U = M^{-1} Xu, W = M^{-1} Xw:  dX = M^{-T} dU,  dM = -dX U^T (strictly lower part)
            Mt = p["M"].transpose(-1, -2)
            dXu = torch.linalg.solve_triangular(Mt, dU, upper=True, unitriangular=True)
            dXw = torch.linalg.solve_triangular(Mt, dW, upper=True, unitriangular=True)
            dA = -(dXu @ p["U"].transpose(-1, -2) + dXw @ p["W"].transpose(-1, -2)).tril(-1)
            # --8<-- [end:backward_solve]
            # --8<-- [start:backward_products]
            # A = (Kb K^T) * Gamma below the diagonal, P = (Q K^T) * Gamma, Xu = beta V,
            # Xw = Kb e^gamma, Kb = beta K, Q_in = Q e^gamma, K_out = K e^{gamma_C - gamma}
            dG, dQK = dA * decay, d_attn * decay
            dkb = dG @ ki + dXw * gamma.exp()[..., None]
            dq[:, :, i] = d_q_in * gamma.exp()[..., None] + dQK @ ki
            dk[:, :, i] = (dQK.transpose(-1, -2) @ qi + dG.transpose(-1, -2) @ p["kb"]
                           + d_k_out * (gamma[..., -1:] - gamma).exp()[..., None]
                           + dkb * bi[..., None])
            dv[:, :, i] = dXu * bi[..., None]
            dbeta[:, :, i] = (dXu * vi).sum(-1) + (dkb * ki).sum(-1)
            # --8<-- [end:backward_products]
            # --8<-- [start:backward_decay]
            # Gamma_ij = e^{gamma_i - gamma_j}: its gradient E goes to gamma_i, minus to gamma_j
            E = (dA * p["G"] + d_attn * p["QK"]) * decay
            d_gamma = (E.sum(-1) - E.sum(-2)
                       + (d_q_in * p["q_in"]).sum(-1)       # e^{gamma_i} in Q_in
                       + (dXw * p["Xw"]).sum(-1)            # e^{gamma_i} in Xw
                       - (d_k_out * p["k_out"]).sum(-1))    # e^{-gamma_i} in K_out
            d_gamma[..., -1] += (d_k_out * p["k_out"]).sum((-1, -2)) + d_last   # e^{gamma_C}
            dg[:, :, i] = d_gamma.flip(-1).cumsum(-1).flip(-1)  # gamma = cumsum(g): reverse cumsum
            # --8<-- [end:backward_decay]
        # --8<-- [start:backward_end]
        d = [x.flatten(2, 3)[:, :, :T] for x in (dq, dk, dv, dg, dbeta)]   # cut the padding off
        return *d, dS if ctx.has_state else None, None      # dS: the initial state's gradient
        # --8<-- [end:backward_end]


# --8<-- [start:hand]
def chunk_gated_delta_rule_hand(q, k, v, g, beta, state=None, chunk_size=64):
    """chunk_gated_delta_rule of qwen/deltanet.py, the same outputs (o [B, H, T, dv], the final
    state [B, H, dk, dv]), with the backward written by hand: it keeps the inputs and one state per
    chunk, and recomputes the rest one chunk at a time."""
    check_delta_inputs(q, k, v, g, beta, state, chunk_size)
    return ChunkGatedDeltaRule.apply(q, k, v, g, beta, state, chunk_size)
# --8<-- [end:hand]


# --8<-- [start:step]
class HandDeltaNet(GatedDeltaNet):
    """A DeltaNet layer whose prompt pass uses the hand-written backward; a decode step after a
    cache is left to the class below it (the recurrence, or chapter 15's in-place step)."""

    def delta_rule(self, q, k, v, g, beta, state):
        if state is not None and q.shape[2] == 1:
            return super().delta_rule(q, k, v, g, beta, state)
        return chunk_gated_delta_rule_hand(q, k, v, g, beta, state)


def hand_backward(model):
    """The step of chapter 19: every DeltaNet layer of `model` trains through the backward by hand.
    The same gradients, less memory kept between the forward and the backward."""
    from qwen.fast import swap  # the module swap of chapters 14-16

    layers = [m for m in model.modules() if isinstance(m, GatedDeltaNet)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no GatedDeltaNet layer: hand_backward "
                         "changes the DeltaNet layers only")
    for m in layers:
        swap(m, HandDeltaNet)
    return model
# --8<-- [end:step]


def check_delta_inputs(q, k, v, g, beta, state, chunk_size):
    """Clear errors for shapes and types the delta rule would otherwise crash on, or misread."""
    for name, x in dict(q=q, k=k, v=v, g=g, beta=beta).items():
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating point tensor, not "
                            f"{getattr(x, 'dtype', type(x).__name__)}")
    if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k must be [B, H, T, dk] and v [B, H, T, dv] with the same B, H, T; "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "(heads first: transpose [B, T, H, d] with .transpose(1, 2))")
    if g.shape != q.shape[:3] or beta.shape != q.shape[:3]:
        raise ValueError(f"g and beta must be [B, H, T] = {list(q.shape[:3])}; got "
                         f"{tuple(g.shape)} and {tuple(beta.shape)}")
    want = (*q.shape[:2], q.shape[-1], v.shape[-1])
    if state is not None and tuple(state.shape) != want:
        raise ValueError(f"state must be [B, H, dk, dv] = {list(want)}, not {tuple(state.shape)}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, not {chunk_size!r}")
    dtypes = {x.dtype for x in (q, k, v, g, beta) + (() if state is None else (state,))}
    if len(dtypes) > 1:
        raise TypeError(f"q, k, v, g, beta and state must share one dtype, got "
                        f"{sorted(map(str, dtypes))}: convert them with .float()")
