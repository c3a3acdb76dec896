"""The streaming reduction keeps O(T d) memory: nothing it stores pins a (B, n, d) batch."""

import torch

from mhaaudit.features import StreamingReducer


def test_reducer_keeps_only_vectors_not_batches():
    red = StreamingReducer(query_index=0)
    B, n, d = 8, 12, 16
    for seed in range(5):
        tokens = torch.randn(B, n, d, generator=torch.Generator().manual_seed(seed))
        red.update(tokens)
    for t in red._q + red._a3:
        assert t.shape == (B, d)
        assert t.untyped_storage().nbytes() == B * d * t.element_size()
    fs = red.result()
    assert fs.queries.shape == (5 * B, d) and fs.a3.shape == (5 * B, d)
    assert fs.context["context_rank"].shape == (5 * B,)
