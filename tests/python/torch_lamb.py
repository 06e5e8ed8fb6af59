"""A reference LAMB for the tests, written from the paper in torch."""
import torch


class TorchLamb(torch.optim.Optimizer):
    """LAMB as the paper writes it (You et al. 2019, Algorithm 2), in torch: Adam's moments, the
    bias-corrected ratio plus weight decay as the update, scaled by ||x|| / ||update|| (1 when either
    is 0; ||x|| clamped at max_weight_norm when given), as poptorch.optim.LAMB defines it."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 bias_correction=True, max_weight_norm=None):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction, max_weight_norm=max_weight_norm))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                t, m, v, g = state["step"], state["m"], state["v"], p.grad
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                bc1 = 1 - b1 ** t if group["bias_correction"] else 1.0
                bc2 = 1 - b2 ** t if group["bias_correction"] else 1.0
                update = (m / bc1) / ((v / bc2).sqrt() + group["eps"]) + group["weight_decay"] * p
                w_norm = p.double().norm()
                if group["max_weight_norm"] is not None:
                    w_norm = w_norm.clamp(max=group["max_weight_norm"])
                u_norm = update.double().norm()
                trust = float(w_norm / u_norm) if w_norm > 0 and u_norm > 0 else 1.0
                p.add_(update, alpha=-group["lr"] * trust)
