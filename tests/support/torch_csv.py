"""A schedule through PyTorch's own CSV loader."""

from __future__ import annotations

import pytest
import torch

from course_lib.schedules.torch_csv import write_csv


def assert_torch_loads(ours, theirs, tmp_path) -> None:
    """Torch's own loader takes our CSV (validating it) and holds the same per-rank orders."""
    write_csv(ours, tmp_path / "ours.csv")
    try:
        theirs._load_csv(str(tmp_path / "ours.csv"))  # torch validates what it loads
    except (AttributeError, TypeError) as err:
        pytest.skip(f"torch {torch.__version__} changed _load_csv: {err!r}")
    assert [[str(a) for a in theirs.pipeline_order[r]] for r in range(ours.n_devices)] == [
        list(map(str, order)) for order in ours.orders
    ]
