"""Facts and housekeeping of the machine a run happens on: usable cores, host facts and the cache
folder (`host`), child-process reaping and the default start method (`processes`), CPU/memory
sampling (`resources`), NVML (`gpu`) and `torchrun` rank discovery and gathering (`distributed`).
"""
