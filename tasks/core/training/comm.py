"""The two distributed engines behind one small interface, so the training loop is written once.

Horovod: ``hvd.init()``, ``DistributedOptimizer`` averages gradients with allreduce (Gloo on CPU, NCCL
on GPU). DDP: ``torch.distributed`` (gloo / nccl) launched by ``torchrun``; gradients averaged by DDP.

Order in the loop: ``wrap`` (before any state is loaded, since Horovod's DistributedOptimizer is a new
optimizer object), build the LR scheduler on the wrapped optimizer, let rank 0 load a checkpoint, then
``sync`` so every rank starts from rank 0's parameters and optimizer state.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch


class HorovodComm:
    name = "horovod"

    def __init__(self, device: str = "cpu") -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()  # [dist] start Horovod: one process per slot, ranks agreed through Gloo rendezvous
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        # [dist] gradients are averaged across ranks by allreduce inside optimizer.step()
        return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def sync(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        # [dist] every rank starts from rank 0's weights (fresh or resumed)
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        # [dist] and from rank 0's optimizer state (Adam moments and step after a resume). As an object,
        # so an empty (fresh) state stays empty: broadcast_optimizer_state would take a zero-grad step.
        optimizer.load_state_dict(self.broadcast_object(optimizer.state_dict()))

    def mean(self, value: float) -> float:
        # [dist] metric averaged over ranks so rank 0 logs the global figure
        return float(self.hvd.allreduce(torch.tensor([value], dtype=torch.float64), op=self.hvd.Average)[0])

    def broadcast_object(self, obj: Any) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=0)  # [dist] rank 0 decides (e.g. resume epoch)

    def shutdown(self) -> None:
        self.hvd.shutdown()


class DDPComm:
    name = "ddp"

    def __init__(self, device: str = "cpu") -> None:
        import torch.distributed as dist

        self.dist = dist
        backend = "nccl" if device == "cuda" and torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)  # [dist] env:// rendezvous set up by torchrun
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.backend = backend

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.local_rank] if self.backend == "nccl" else None
        # [dist] DDP averages gradients across ranks during backward
        return DDP(model, device_ids=ids), optimizer

    def sync(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        with torch.no_grad():
            for t in model.state_dict().values():  # [dist] rank 0's (possibly resumed) weights everywhere
                self.dist.broadcast(t, src=0)
        optimizer.load_state_dict(self.broadcast_object(optimizer.state_dict()))  # [dist] and its optimizer state

    def mean(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        if self.backend == "nccl":
            t = t.cuda()
        self.dist.all_reduce(t)  # [dist] sum over ranks, then divide: the global mean
        return float(t[0]) / self.size

    def broadcast_object(self, obj: Any) -> Any:
        box = [obj]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def shutdown(self) -> None:
        # [dist] wait for every rank (rank 0 writes the model last) before tearing the group down: a rank that
        # destroys its Gloo group while a peer is still in it can abort ("terminate called without an active
        # exception"), seen once in CI
        self.dist.barrier()
        self.dist.destroy_process_group()


def make_comm(engine: str, device: str = "cpu"):
    return HorovodComm(device) if engine == "horovod" else DDPComm(device)


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown: every file is written and closed by now, and a Gloo worker thread
    still holding a tensor when the interpreter finalizes aborts the rank (SIGABRT, "terminate called without an
    active exception") after its work is done, which failed a two-rank DDP run that had finished its epochs."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
