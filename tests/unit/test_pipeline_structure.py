"""Sizes and shapes of batches whatever holds them: Mapping (not only dict), dataclasses,
named tuples."""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from stallscope.pipeline.structure import batch_length, describe_structure, nbytes


class Encoding(collections.UserDict):
    """Like transformers' BatchEncoding: a Mapping that is not a dict."""


@dataclass
class Batch:
    images: torch.Tensor
    labels: list


class Pair(NamedTuple):
    tokens: np.ndarray
    raw: bytes


def test_nbytes_counts_mappings_dataclasses_and_named_tuples():
    ids = torch.zeros(8, 512, dtype=torch.int64)
    assert nbytes(Encoding({"input_ids": ids, "attention_mask": ids})) == 2 * 8 * 512 * 8
    assert nbytes(Batch(torch.zeros(4, 3, dtype=torch.float32), [1, 2, 3, 4])) == 48
    assert nbytes(Pair(np.zeros(10, dtype=np.int32), b"abcd")) == 44
    assert nbytes([torch.zeros(3), torch.zeros(5)]) == 32  # variable-length items
    assert nbytes({"a": 1, "b": "text"}) == 0


def test_batch_length_finds_the_samples_in_any_container():
    ids = torch.zeros(8, 512, dtype=torch.int64)
    assert batch_length(Encoding({"input_ids": ids})) == 8
    assert batch_length(Batch(torch.zeros(4, 3), [1, 2, 3, 4])) == 4
    assert batch_length(Pair(np.zeros((6, 2)), b"")) == 6
    assert (
        batch_length([torch.zeros(3), torch.zeros(5), torch.zeros(2)]) == 3
    )  # one tensor per sample... of one field
    assert batch_length((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_length(["a", "b"]) == 2
    assert batch_length(torch.tensor(3.0)) == 1


def test_describe_structure_names_the_container():
    ids = torch.zeros(2, 4, dtype=torch.int64)
    assert (
        describe_structure(Encoding({"input_ids": ids})) == "Encoding{input_ids: Tensor[2,4] int64}"
    )
    assert describe_structure({"x": ids}) == "{x: Tensor[2,4] int64}"
    assert (
        describe_structure(Pair(np.zeros(3, dtype=np.int32), b""))
        == "Pair{tokens: ndarray[3] int32, raw: bytes}"
    )
    assert describe_structure((ids, 1)) == "tuple(Tensor[2,4] int64, int)"
