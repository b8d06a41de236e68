"""The user's input pipeline as stallscope handles it: the user's DataLoader call described so a
recommendation is a change to it (`arguments`), building DataLoaders from a LoaderConfig
(`loaders`), batched fetching (`batching`), finding and substituting composed transforms
(`transforms`), per-worker seeding (`seeding`) and looking at a dataset without loading it
(`inspection`).
"""
