"""Token batches are counted in tokens too: padding left out where a mask says which is padding."""

from __future__ import annotations

from collections import UserDict, namedtuple
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from stallscope.pipeline.structure import token_counter
from stallscope.target import pipeline_from_object
from stallscope.throughput.measure import measure


def _count(batch):
    counter = token_counter(batch)
    return None if counter is None else counter(batch)


def test_a_mask_counts_only_real_tokens():
    ids = torch.ones(2, 5, dtype=torch.int64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    assert _count({"input_ids": ids, "attention_mask": mask}) == 8
    assert _count(UserDict(input_ids=ids)) == 10  # a Mapping that is not a dict; no mask: every id


def test_streams_pairs_dataclasses_named_tuples_and_ragged_lists():
    assert _count(torch.zeros(4, 16, dtype=torch.int64)) == 64  # one matrix of token ids
    assert (
        _count((torch.zeros(4, 16, dtype=torch.int32), torch.zeros(4, 16, dtype=torch.int64))) == 64
    )  # inputs only

    @dataclass
    class Batch:
        input_ids: torch.Tensor
        labels: torch.Tensor

    assert _count(Batch(torch.zeros(3, 7, dtype=torch.int64), torch.zeros(3))) == 21
    Pair = namedtuple("Pair", "tokens lengths")
    assert _count(Pair(np.zeros((2, 9), dtype=np.int64), np.array([9, 4]))) == 18
    assert _count([[1, 2, 3], [4, 5], [6]]) == 6
    assert _count([torch.tensor([1, 2]), torch.tensor([3, 4, 5])]) == 5


def test_images_labels_and_pixels_are_not_tokens():
    assert _count((torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.int64))) is None
    assert _count(torch.zeros(4, 64, dtype=torch.uint8)) is None  # a uint8 matrix is pixels
    assert (
        _count({"image": torch.zeros(2, 3, 4, 4), "label": torch.zeros(2, dtype=torch.int64)})
        is None
    )
    assert _count(["a photo", "another"]) is None


class Sentences(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.arange(3 + i % 5)


def pad(items):
    ids = torch.nn.utils.rnn.pad_sequence(items, batch_first=True)
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones_like(t) for t in items], batch_first=True)
    return {"input_ids": ids, "attention_mask": mask}


def test_measure_reports_tokens_per_second_of_real_tokens():
    pipeline = pipeline_from_object(DataLoader(Sentences(), batch_size=8, collate_fn=pad))
    m = measure(pipeline, pipeline.baseline, min_window_s=0.1, min_batches=8)
    # every item is 3..7 tokens long (5 on average): padded matrices would count more
    assert m.tokens is not None and 3 * m.samples <= m.tokens <= 7 * m.samples
    assert m.tokens_per_s == m.tokens / m.window_s


def test_image_batches_have_no_token_rate():
    data = torch.utils.data.TensorDataset(
        torch.zeros(64, 3, 4, 4), torch.zeros(64, dtype=torch.int64)
    )
    pipeline = pipeline_from_object(DataLoader(data, batch_size=8))
    m = measure(pipeline, pipeline.baseline, min_window_s=0.05, min_batches=4)
    assert m.tokens is None and m.tokens_per_s is None and m.samples > 0
