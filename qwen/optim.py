"""What a training step does with the gradients (chapter 21): AdamW, the learning rate's warm-up and
cosine decay, and clipping the gradient's norm. Each equals torch's own (tests/test_train.py)."""
# --8<-- [start:imports]
import math

import torch

# --8<-- [end:imports]


# --8<-- [start:adamw]
class AdamW:
    """Adam with decoupled weight decay (Loshchilov and Hutter, 2019): each parameter moves by its
    gradient's running mean over the root of its running mean square, and shrinks by lr * decay."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("AdamW got no parameter that requires grad: call qwen.train.trainable "
                             "(or requires_grad_) on the model first")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1) or lr < 0 or eps <= 0:
            raise ValueError(f"AdamW needs lr >= 0, 0 <= betas < 1 and eps > 0; got lr={lr}, "
                             f"betas={betas}, eps={eps}")
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.t = 0                                            # steps taken
        self.m = [torch.zeros_like(p) for p in self.params]  # running mean of the gradient
        self.v = [torch.zeros_like(p) for p in self.params]  # running mean of its square

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)                           # m = b1 m + (1 - b1) g
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)  # v = b2 v + (1 - b2) g^2
            m_hat = m / (1 - b1**self.t)                      # both start at 0: undo the bias
            v_hat = v / (1 - b2**self.t)
            p.mul_(1 - self.lr * self.weight_decay)           # decay the weight, not the gradient
            p.addcdiv_(m_hat, v_hat.sqrt().add_(self.eps), value=-self.lr)

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def state_dict(self):
        return {"t": self.t, "lr": self.lr, "m": self.m, "v": self.v}

    def load_state_dict(self, state):
        if len(state["m"]) != len(self.params):
            raise ValueError(f"the saved optimizer holds {len(state['m'])} parameters, this one "
                             f"{len(self.params)}: it was saved for another model")
        self.t, self.lr = state["t"], state["lr"]
        for mine, saved in zip(self.m + self.v, state["m"] + state["v"]):
            mine.copy_(saved)
# --8<-- [end:adamw]


# --8<-- [start:schedule]
def lr_at(step, total, peak, warmup, floor=0.1):
    """The learning rate of step `step` (0-based) of `total`: a straight rise to `peak` over
    `warmup` steps, then half a cosine down to floor * peak at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    done = (step - warmup) / max(1, total - 1 - warmup)      # 0 -> 1 after the warm-up
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(done, 1.0))))
# --8<-- [end:schedule]


# --8<-- [start:clip]
@torch.no_grad()
def clip_grad_norm(params, max_norm):
    """Scale every gradient by the same factor so that their joint L2 norm is at most max_norm;
    return the norm before clipping (a spike in it is the first sign of a diverging run)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
    return norm
# --8<-- [end:clip]
