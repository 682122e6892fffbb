"""Plan a training run: which (t, p, d, b, schedule, v, recomputation) to use for a model on a cluster.

    from course_lib.planner import plan
    result = plan("megatron-1t", "a100-selene", gpus=3072, global_batch=3072)
    result.best                 # Layout(t=8, p=64, d=6, ...): the fastest layout that fits memory
    result.layouts[:5]          # the ranked list

One concept per module: ``shapes`` (model presets, parameters and FLOPs: Megatron-LM eq. 2 and 3),
``clusters`` (GPU, node and link presets, one compute efficiency per GPU type), ``memory`` (bytes per
GPU), ``cost`` (the time of each part of a step), ``enumerate`` (every layout, pruned and ranked),
``published`` (the runs the planner is held against).
"""

from course_lib.planner.clusters import CLUSTERS, Cluster, cluster
from course_lib.planner.enumerate import Layout, Plan, plan
from course_lib.planner.shapes import MODELS, ModelShape, model

__all__ = ["CLUSTERS", "MODELS", "Cluster", "Layout", "ModelShape", "Plan", "cluster", "model", "plan"]
