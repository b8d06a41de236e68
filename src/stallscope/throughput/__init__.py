"""Steady-state throughput: one config measured correctly (`measure`) and the `bench` grid over
many, interleaved (`sweep`).
"""
