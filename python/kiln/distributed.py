"""kiln.distributed: this process's place in a distributed run (`mpirun -np N python script.py`).

    import kiln.distributed as dist
    dist.rank(), dist.world_size(), dist.local_rank()   # 0, 1, 0 for a process alone
    dist.barrier()

The Trainer finds the run by itself (TrainingArguments.world_size, process_index, ...); these are
for a script's own logic around it.
"""
from kiln._core import core

__all__ = ["rank", "world_size", "local_rank", "local_world_size", "backend", "is_main_process", "barrier"]


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
