"""The two distributed engines behind one small interface, so the training loop is written once.

Horovod: ``hvd.init()``, ``DistributedOptimizer`` averages gradients with allreduce (Gloo on CPU, NCCL
on GPU). DDP: ``torch.distributed`` (gloo / nccl) launched by ``torchrun``; gradients averaged by DDP.
"""

from __future__ import annotations

import os
from typing import Any

import torch


class HorovodComm:
    name = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd

        self.hvd = hvd
        hvd.init()  # [dist] start Horovod: one process per slot, ranks agreed through Gloo rendezvous
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        hvd = self.hvd
        # [dist] every rank starts from rank 0's weights and optimizer state (fresh or resumed)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        # [dist] gradients are averaged across ranks by allreduce inside optimizer.step()
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        return model, optimizer

    def mean(self, value: float) -> float:
        # [dist] metric averaged over ranks so rank 0 logs the global figure
        return float(self.hvd.allreduce(torch.tensor([value], dtype=torch.float64), op=self.hvd.Average)[0])

    def broadcast_object(self, obj: Any) -> Any:
        return self.hvd.broadcast_object(obj, root_rank=0)  # [dist] rank 0 decides (e.g. resume epoch)

    def shutdown(self) -> None:
        self.hvd.shutdown()


class DDPComm:
    name = "ddp"

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist = dist
        backend = "nccl" if torch.cuda.is_available() and os.environ.get("FAULTLINE_DEVICE") == "cuda" else "gloo"
        dist.init_process_group(backend)  # [dist] env:// rendezvous set up by torchrun
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.backend = backend

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        from torch.nn.parallel import DistributedDataParallel as DDP

        # [dist] optimizer state (possibly resumed on rank 0) broadcast like Horovod does
        state = [optimizer.state_dict() if self.rank == 0 else None]
        self.dist.broadcast_object_list(state, src=0)
        optimizer.load_state_dict(state[0])
        ids = [self.local_rank] if self.backend == "nccl" else None
        # [dist] DDP broadcasts rank 0's parameters at construction and averages gradients in backward
        return DDP(model, device_ids=ids), optimizer

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
        self.dist.destroy_process_group()


def make_comm(engine: str):
    return HorovodComm() if engine == "horovod" else DDPComm()
