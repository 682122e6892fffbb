"""Pipeline schedules as data: the IR, the builders, the validator and PyTorch CSV interop."""
