"""What should cross the datacenter boundary: the pipeline, data parallelism, or DiLoCo-style local SGD.

A run split over two sites must send something over the fiber between them. Three ways, on the same
cluster, by the planner's cost model (lessons 06 and 09 both call this, so that their numbers agree):

- **pipeline across**: each site holds half of every pipeline; the middle stage boundary crosses, and
  every micro-batch's activations go over and their gradients come back: 2 x B x b*s*h values a step
  (Narayanan et al. 2021, arXiv 2104.04473, sec. 3.2), all d pipelines sharing the fiber. The planner
  lays the pipeline out with the site link in it (``Cluster.site_link``) and picks the best layout.
- **DP across**: each site runs whole pipelines on half of the batch; the gradients (2 bytes a
  parameter) are reduced inside each site, then all-reduced once over the fiber, after the step's flush:
  the one-site step plus a ring all-reduce over 2 ranks joined by the link.
- **DiLoCo** (Douillard et al. 2023, arXiv 2311.08105): each site trains on its own for H inner steps
  (H = 500 in the paper), then the sites synchronise their parameter changes: the same bytes as DP, once
  every H steps. A different algorithm: what its drift costs in accuracy is measured in training runs,
  not in this cost model.

    from course_lib.lessons.crossing import compare_crossings
    rows = compare_crossings(batches=(1536,), links=("transatlantic",))
    rows["transatlantic", 1536].step_s        # {"pipeline": ..., "DP": ..., "DiLoCo": ...}, seconds
    rows["transatlantic", 1536].winner()      # the faster synchronous way: "pipeline" or "DP"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from course_lib.network import PRESETS, ring_all_reduce_s
from course_lib.planner import plan
from course_lib.planner.clusters import cluster
from course_lib.planner.shapes import model
from course_lib.planner.step_time import boundary_bytes
from course_lib.shelf.errors import require

WAYS = ("pipeline", "DP", "DiLoCo")
DILOCO_H = 500  # inner steps between two synchronisations (Douillard et al. 2023, arXiv 2311.08105)


@dataclass(frozen=True)
class Crossing:
    """One link and one global batch: what each way sends over the fiber per step, and its step time."""

    link: str
    batch: int
    one_site_s: float  # the planner's best step with every GPU in one site (nothing crosses)
    bytes_per_step: dict[str, float]  # bytes over the fiber per training step, each way of crossing
    step_s: dict[str, float]  # predicted seconds per step, each way

    def winner(self, ways: Sequence[str] = ("pipeline", "DP")) -> str:
        """The fastest of `ways` (default: the two synchronous ones, which train the same model)."""
        return min(ways, key=self.step_s.__getitem__)


def compare_crossings(
    model_name: str = "megatron-145b", cluster_name: str = "a100-selene", gpus: int = 1536,
    batches: Sequence[int] = (384, 768, 1536, 2304),
    links: Sequence[str] = ("metro", "us-coast-to-coast", "transatlantic"), inner_steps: int = DILOCO_H,
) -> dict[tuple[str, int], Crossing]:  # fmt: skip
    """Every (link, batch): the three ways of crossing, predicted by the planner (activation
    recomputation on, as in the paper's runs). Links are names of ``course_lib.network.PRESETS``."""
    unknown = [name for name in links if name not in PRESETS]
    require(not unknown, f"links {unknown} are not link presets; choose among {sorted(PRESETS)}")
    require(
        isinstance(inner_steps, int) and inner_steps >= 1,
        f"inner_steps (DiLoCo's H) must be a whole number >= 1, got {inner_steps!r}",
    )
    shape, site = model(model_name), cluster(cluster_name)
    gradient_bytes = 2 * shape.parameters()  # bf16 gradients: the model's worth, each way
    rows = {}
    for batch in batches:
        one_site = plan(shape, site, gpus, batch, recompute=(True,)).best
        activation_bytes = 2 * batch * boundary_bytes(shape, 1)  # every sequence's b*s*h, over and back
        sent = {"pipeline": activation_bytes, "DP": gradient_bytes, "DiLoCo": gradient_bytes / inner_steps}
        for name in links:
            link = PRESETS[name].link
            sync = ring_all_reduce_s(gradient_bytes, 2, link)
            across = plan(shape, replace(site, site_link=link), gpus, batch, recompute=(True,)).best
            step = {"pipeline": across.step_s, "DP": one_site.step_s + sync,
                    "DiLoCo": one_site.step_s + sync / inner_steps}  # fmt: skip
            rows[name, batch] = Crossing(name, batch, one_site.step_s, sent, step)
    return rows
