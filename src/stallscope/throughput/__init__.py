"""Steady-state throughput: one config measured correctly (`measure`), the `bench` grid over many,
interleaved (`sweep`), and the gap at an epoch boundary that persistent_workers changes (`epochs`).
"""
