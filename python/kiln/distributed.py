"""kiln.distributed: this process's place in a distributed run (`mpirun -np N python script.py`).

    import kiln.distributed as dist
    dist.rank(), dist.world_size(), dist.local_rank()   # 0, 1, 0 for a process alone
    dist.barrier()

The Trainer finds the run by itself (TrainingArguments.world_size, process_index, ...); these are
for a script's own logic around it. DataParallel gives the on-device API (kiln.training.api)
torch DDP's gradient averaging, and DeepSpeed's ZeRO stages 1 and 2:

    ddp = dist.DataParallel(module, zero_stage=2)          # rank 0's parameters on every rank
    optimizer = Optimizer(path, module, shard=ddp.owned_ranges())
    for x, y in my_shard_of_the_data:
        loss = ddp(x, y)                                    # forward, backward, averaged gradients
        optimizer.step()
        ddp.gather_parameters()                             # ZeRO: every rank's updates, everywhere
        module.lazy_reset_grad()
"""
import contextlib

from kiln._core import core

__all__ = ["rank", "world_size", "local_rank", "local_world_size", "backend", "is_main_process", "barrier",
           "DataParallel"]


def _info():
    return core.dist_info()


def rank():
    return _info()["rank"]


def world_size():
    return _info()["world_size"]


def local_rank():
    return _info()["local_rank"]


def local_world_size():
    return _info()["local_world_size"]


def backend():
    """"mpi" when an MPI launcher started the ranks, "none" for a process alone."""
    return _info()["backend"]


def is_main_process():
    return rank() == 0


def barrier():
    """Waits until every rank gets here."""
    core.dist_barrier()


class DataParallel:
    """torch DistributedDataParallel's semantics for a kiln.training.api.Module: every rank trains
    on its own data; calling the DataParallel runs the module and, in train mode, averages the
    gradients over the ranks (in buckets of bucket_cap_mb, started as the backward pass completes
    them when overlap_comm). Construction checks that every rank has the same trainable
    parameters and broadcasts rank 0's.

    zero_stage 1 or 2 (DeepSpeed's ZeRO): each rank owns an equal range of the flattened
    parameters, updates only it (give the Optimizer shard=owned_ranges()) and holds only its
    optimizer state; call gather_parameters() after each step. Stage 2 reduce-scatters the
    gradients (reduce_scatter) so each rank receives only its range's averages.
    """

    def __init__(self, module, bucket_cap_mb=25.0, zero_stage=0, overlap_comm=True, reduce_scatter=True,
                 allgather_bucket_mb=25.0):
        from kiln.training.api import Module

        if not isinstance(module, Module):
            raise TypeError(f"module must be a kiln.training.api.Module, not {type(module).__name__}")
        self.module = module
        self._ddp = core.DataParallel(module._model, float(bucket_cap_mb), int(zero_stage), bool(overlap_comm),
                                      bool(reduce_scatter), float(allgather_bucket_mb))

    def __call__(self, *inputs):
        """The module's outputs; in train mode its gradients are averaged over the ranks (summed
        locally only inside no_sync())."""
        out = self.module(*inputs)
        if self.module.training:
            self._ddp.finish()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """torch's no_sync(): the calls inside accumulate their gradients locally (the micro-steps
        of gradient accumulation but the last)."""
        previous = self._ddp.sync()
        self._ddp.set_sync(False)
        try:
            yield
        finally:
            self._ddp.set_sync(previous)

    @property
    def zero_stage(self):
        return self._ddp.zero_stage()

    def owned_ranges(self):
        """This rank's (parameter, begin, end) element ranges: every whole trainable parameter
        without ZeRO."""
        return self._ddp.ranges_of(rank())

    def communication_seconds(self):
        """(seconds the collectives took on this rank, seconds this rank waited for them): the
        communication time, and the part of it the computation did not hide."""
        return self._ddp.busy_seconds(), self._ddp.wait_seconds()

    def owned_elements(self):
        """The trainable elements each rank owns."""
        return self._ddp.owned_elements()

    def gather_parameters(self):
        """ZeRO, after this rank's optimizer step: every rank's updated parameters on every rank."""
        self._ddp.gather_parameters()

    def broadcast_buffers(self):
        """Rank 0's non-trainable parameters (BatchNorm's running statistics) on every rank."""
        self._ddp.broadcast_buffers()

    def broadcast_parameters(self):
        """Rank 0's parameters, trainable or not, on every rank."""
        self._ddp.broadcast_parameters()
