"""PyTorch Geometric's ``DataLoader`` (a torch DataLoader subclass whose collate builds a graph
``Batch``) over a ``torch_geometric.data.Dataset`` of small random graphs, with a little message
passing per graph as the CPU work.

TARGET: ``tests/pipelines/real_pyg.py:make_loader`` (the factory takes ``num_workers``).
"""

from __future__ import annotations

import torch
from torch_geometric.data import Data, Dataset
from torch_geometric.loader import DataLoader

GRAPHS = 256


class RandomGraphs(Dataset):
    def __init__(self, n: int = GRAPHS) -> None:
        super().__init__()
        self.n = n

    def len(self) -> int:
        return self.n

    def get(self, idx: int) -> Data:
        g = torch.Generator().manual_seed(idx)
        nodes = int(torch.randint(8, 24, (1,), generator=g))
        x = torch.randn(nodes, 16, generator=g)
        edges = torch.randint(0, nodes, (2, nodes * 3), generator=g)
        degree = torch.bincount(edges[0], minlength=nodes).clamp(min=1).float()
        for _ in range(4):  # degree-normalised smoothing: a few small scatter-adds per graph
            x = x + torch.zeros_like(x).index_add_(0, edges[0], x[edges[1]]) / degree[:, None]
        return Data(x=x, edge_index=edges, y=torch.tensor([idx % 4]))


def make_loader(num_workers: int = 0, batch_size: int = 16) -> DataLoader:
    return DataLoader(RandomGraphs(), batch_size=batch_size, shuffle=True, num_workers=num_workers)
