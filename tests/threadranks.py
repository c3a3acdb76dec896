"""A stand-in for a torchrun job inside a shared call: ranks as threads whose gathers meet at a barrier."""

from __future__ import annotations


def as_ranks(monkeypatch, world: int, body):
    """Run ``body()`` as each of ``world`` ranks in threads whose gathers meet at a barrier (a
    stand-in for a torchrun job inside a shared call); the results by rank. torch's thread count
    is one setting for all threads (and ranks must agree on it), so it is pinned to 1 meanwhile."""
    import threading

    import torch

    from mhaaudit import distributed

    barrier, box, local = threading.Barrier(world, timeout=60), [None] * world, threading.local()

    class Ranked(distributed.Session):
        def all_gather_tensors(self, obj):
            box[self.rank] = obj
            barrier.wait()
            out = list(box)
            barrier.wait()
            return out

    one_process = distributed.lockstep()  # outside the rank threads: the single-process session
    monkeypatch.setattr(distributed, "lockstep", lambda: getattr(local, "session", one_process))
    results: list = [None] * world

    def rank(r: int) -> None:
        local.session = Ranked(rank=r, world_size=world, local_rank=r, backend="gloo", depth=1)
        results[r] = body()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        torch.set_num_threads(before)
    assert not any(t.is_alive() for t in threads)
    return results
