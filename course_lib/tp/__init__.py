"""Tensor parallelism (Megatron-style) for the toy transformer, set against pipeline parallelism.

Modules, one idea each:

- ``shard``: cut one block's full weights into t slices (heads and MLP columns) and glue gradients back.
- ``comm``: the f / g operators (identity one way, all-reduce the other) and the log that counts them.
- ``simulated``: all t shards in one process; an all-reduce is a plain sum, still counted.
- ``distributed``: one process per rank on torch.distributed (gloo on CPU, NCCL on GPUs); ``tp_layers``
  is one rank's slice of the model, which the distributed pipeline engine cuts into stages.
- ``mesh``: TP x PP x DP, Megatron's rank layout, its process groups, data parallelism's averages.
- ``accounting``: collectives and messages per training step and per generated token, TP against PP.
- ``cost``: the alpha-beta cost model, the latency sweep and the crossover latency.
- ``plots``: the sweep figure, model lines and measured points.

Try it::

    from course_lib.shelf.model import ModelConfig
    from course_lib.tp.simulated import SimulatedTP
    tp = SimulatedTP.from_seed(ModelConfig(n_layers=4), t=2, seed=0)
    python -m course_lib tp --help
"""
