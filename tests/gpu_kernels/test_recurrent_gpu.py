"""The GRU on PyTorch's fused cells against cuDNN's, and the choice between them timed on the GPU (device only)."""

from __future__ import annotations

import pytest
import torch

from tasks.core.training.model import FaultGNN
from tasks.core.training.recurrent import choose_kernel
from tests.core.training.test_model_and_checkpoint import _adj

pytestmark = pytest.mark.gpu


def _grads(model, x, adj, kernel: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    model.recurrent = kernel
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x, adj)
    out.float().sum().backward()
    return out.float(), {k: p.grad.float().clone() for k, p in model.named_parameters()}


def test_the_native_gru_gives_cudnns_outputs_and_gradients():
    torch.manual_seed(0)
    topo, adj = _adj()
    adj = adj.to("cuda")
    model = FaultGNN(7, hidden=32).cuda()
    x = torch.randn(8, 6, topo.n, 7, device="cuda")
    ref_out, ref_grads = _grads(model, x, adj, "cudnn")
    out, grads = _grads(model, x, adj, "native")
    torch.testing.assert_close(out, ref_out, atol=3e-2, rtol=3e-2)  # bf16 either way
    for k, g in grads.items():
        torch.testing.assert_close(g, ref_grads[k], atol=5e-2, rtol=5e-2, msg=k)
    assert torch.backends.cudnn.enabled  # switched off for the GRU alone


def test_auto_times_both_kernels_on_the_step_shape_and_keeps_the_faster():
    gru = torch.nn.GRU(32, 32, batch_first=True).cuda()
    before = torch.cuda.get_rng_state()
    chosen, how = choose_kernel(gru, 4096, 6, torch.device("cuda"), True)
    assert set(how["timed_s"]) == {"cudnn", "native"}
    assert all(isinstance(t, float) and t > 0 for t in how["timed_s"].values()), how
    assert chosen == min(how["timed_s"], key=how["timed_s"].get)
    assert torch.equal(torch.cuda.get_rng_state(), before)
    assert all(p.grad is None for p in gru.parameters())
