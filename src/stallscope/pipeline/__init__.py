"""The user's input pipeline as stallscope handles it: building DataLoaders from a LoaderConfig
(`loaders`), batched fetching (`batching`), finding and substituting composed transforms
(`transforms`), per-worker seeding (`seeding`) and looking at a dataset without loading it
(`inspection`).
"""
