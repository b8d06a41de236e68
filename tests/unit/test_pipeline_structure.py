"""Sizes and shapes of batches whatever holds them: Mapping (not only dict), dataclasses,
named tuples."""

from __future__ import annotations

import collections
import collections.abc
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from stallscope.pipeline.structure import batch_length, describe_structure, nbytes, to_device


class Encoding(collections.UserDict):
    """Like transformers' BatchEncoding: a Mapping that is not a dict."""


@dataclass
class Batch:
    images: torch.Tensor
    labels: list


class Pair(NamedTuple):
    tokens: np.ndarray
    raw: bytes


class Store(collections.abc.MutableMapping):
    """A graph library's attribute store: a Mapping that is not a dict."""

    def __init__(self, **tensors):
        self._mapping = dict(tensors)

    def __getitem__(self, key):
        return self._mapping[key]

    def __setitem__(self, key, value):
        self._mapping[key] = value

    def __delitem__(self, key):
        del self._mapping[key]

    def __iter__(self):
        return iter(self._mapping)

    def __len__(self):
        return len(self._mapping)


class GraphBatch:
    """Like a graph library's ``Batch``: no container, its tensors in a store among its attributes,
    and a ``to`` of its own."""

    def __init__(self, store, num_graphs):
        self._store = store
        self._num_graphs = num_graphs

    def to(self, device, non_blocking=False):
        moved = {k: v.to(device, non_blocking=non_blocking) for k, v in self._store.items()}
        return GraphBatch(Store(**moved), self._num_graphs)


class Tokens:
    """A batch class whose ``to`` takes the device only."""

    def __init__(self, ids):
        self.ids = ids

    def to(self, device):
        return Tokens(self.ids.to(device))


def test_nbytes_counts_mappings_dataclasses_and_named_tuples():
    ids = torch.zeros(8, 512, dtype=torch.int64)
    assert nbytes(Encoding({"input_ids": ids, "attention_mask": ids})) == 2 * 8 * 512 * 8
    assert nbytes(Batch(torch.zeros(4, 3, dtype=torch.float32), [1, 2, 3, 4])) == 48
    assert nbytes(Pair(np.zeros(10, dtype=np.int32), b"abcd")) == 44
    assert nbytes([torch.zeros(3), torch.zeros(5)]) == 32  # variable-length items
    assert nbytes({"a": 1, "b": "text"}) == 0


def test_nbytes_counts_the_tensors_a_batch_class_keeps_among_its_attributes():
    store = Store(x=torch.zeros(10, 4, dtype=torch.float32), edge_index=torch.zeros(2, 30))
    assert nbytes(GraphBatch(store, num_graphs=3)) == 10 * 4 * 4 + 2 * 30 * 4
    assert nbytes(Tokens(torch.zeros(8, dtype=torch.int64))) == 64
    assert nbytes(GraphBatch) == 0 and nbytes(len) == 0  # a class, a function: no payload


def test_to_device_keeps_each_container_type_and_uses_a_batch_class_own_to():
    ids = torch.zeros(2, 4, dtype=torch.int64)
    moved = to_device(Encoding({"input_ids": ids}), "meta")
    assert isinstance(moved, Encoding) and moved["input_ids"].is_meta
    moved = to_device(Batch(torch.zeros(4, 3), [1, 2, 3, 4]), "meta")
    assert isinstance(moved, Batch) and moved.images.is_meta and moved.labels == [1, 2, 3, 4]
    moved = to_device((Pair(np.zeros(3), b"x"), ids), "meta")
    assert isinstance(moved, tuple) and isinstance(moved[0], Pair) and moved[1].is_meta
    assert isinstance(moved[0].tokens, np.ndarray)  # not a tensor: stays where it is
    graph = to_device(GraphBatch(Store(x=torch.zeros(3)), num_graphs=1), "meta")
    assert isinstance(graph, GraphBatch) and graph._store["x"].is_meta
    assert to_device(Tokens(ids), "meta").ids.is_meta  # a ``to`` without non_blocking
    assert not ids.is_meta  # the host batch is untouched
    moved = to_device({1: torch.zeros(1), "1": torch.ones(1)}, "meta")
    assert set(moved) == {1, "1"} and moved[1].is_meta  # keys as they were, none merged


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
