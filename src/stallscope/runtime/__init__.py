"""Facts and housekeeping of the machine a run happens on: usable cores and host facts (`host`),
child-process reaping (`processes`), CPU/memory sampling (`resources`), NVML (`gpu`) and
`torchrun` rank discovery and gathering (`distributed`).
"""
