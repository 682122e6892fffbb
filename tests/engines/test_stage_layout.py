"""Megatron-core layout strings (course_lib/course_lib/stage_layout.py): parsed as its documentation writes
them, refused before any work when they would drop or repeat a piece of the model, and trained by both
engines to the reference trainer's loss and gradients, empty and virtual stages included."""

from __future__ import annotations

import pytest

import course_lib.engines  # noqa: F401  (the split backward of zero-bubble schedules)
import course_lib.schedules  # noqa: F401  (interleaved, zero-bubble and V schedules by name)
from course_lib.balance import stage_memory, stage_totals
from course_lib.shelf import distributed_engine as distributed
from course_lib.shelf.errors import CourseError
from course_lib.shelf.local_engine import LocalPipelineTrainer
from course_lib.shelf.reference import TrainConfig, max_grad_diff, reference_gradients
from course_lib.stage_layout import parse_layout


def tiny(n_layers: int = 3, **kw) -> TrainConfig:
    return TrainConfig(**(dict(n_layers=n_layers, d_model=16, n_heads=2, seq_len=8, batch_size=6,
                               microbatches=3, steps=1) | kw))  # fmt: skip


@pytest.mark.parametrize(
    ("text", "stages", "sizes"),
    [
        ("E|t|t|L", ("E", "t", "t", "L"), (1, 1, 1, 1)),
        ("Et*3|(tt|)*2,t|L", ("Ettt", "tt", "tt", "t", "L"), (4, 2, 2, 1, 1)),  # the docs' style
        ("E||t|L", ("E", "", "t", "L"), (1, 0, 1, 1)),  # the docs' empty stage
        ("E,t , t|t,L", ("Ett", "tL"), (3, 2)),  # commas (and spaces) only for reading
        ("E|((t|)*2)*2L", ("E", "t", "t", "t", "t", "L"), (1, 1, 1, 1, 1, 1)),  # nested groups
        ("EtL", ("EtL",), (3,)),
    ],
)
def test_layout_strings_parse_as_megatron_writes_them(text, stages, sizes) -> None:
    layout = parse_layout(text)
    assert layout.stages == stages
    assert layout.partition(layout.n_blocks).sizes == sizes


def test_the_docs_example_has_32_stages_on_16_ranks_and_its_m_is_refused_by_name() -> None:
    with pytest.raises(CourseError, match="'m' .*multi-token prediction"):
        parse_layout("Et*3|(tt|)*29,m|L")
    layout = parse_layout("Et*3|(tt|)*29,t|L")  # the same with a block where the MTP layer was
    assert (layout.n_stages, layout.n_blocks, layout.virtual(16)) == (32, 62, 2)
    # Megatron's table: rank 0 holds the embedding + 3 blocks, then 2 blocks; rank 15 ends with the loss
    assert layout.describe(16)[0] == "rank 0: embedding + 3 blocks | 2 blocks"
    assert layout.describe(16)[15] == "rank 15: 2 blocks | head + loss"
    assert [layout.rank_of(s, 16) for s in (0, 15, 16, 31)] == [0, 15, 0, 15]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("E|t|L", "places 1 blocks .* has 3: 2 would be silently dropped"),
        ("E|t*5|L", "places 5 blocks .* has 3: 2 would be built twice"),
        ("E|ttt", "has no L"),
        ("ttt|L", "has no E"),
        ("E|E|ttt|L", "2 E's"),
        ("tE|tt|L", "E .* must stand at the start of the first stage"),
        ("E|ttt|L|", "L .* must stand at the end of the last stage"),
        ("E|t*|tt|L", "needs a whole count"),
        ("E|t*0|ttt|L", "needs a whole count"),
        ("E|(ttt|L", "never closed"),
        ("E|ttt)|L", "closes no"),
        ("E|tXt|L", "'X' at position 3 is not a layout symbol"),
        ("(t*1000)*1000", "more than 100,000"),
    ],
)
def test_a_bad_layout_is_refused_before_any_work_naming_the_problem(text, words) -> None:
    with pytest.raises(CourseError, match=words):
        LocalPipelineTrainer(tiny(), "1f1b", partition=text)


def test_issue_1304_thirty_blocks_on_four_ranks_that_build_28_are_refused() -> None:
    with pytest.raises(CourseError, match="places 28 blocks .* has 30: 2 would be silently dropped"):
        LocalPipelineTrainer(tiny(30), "1f1b", partition="E|(t*7|)*4L")


def test_virtual_stages_need_megatrons_order_and_whole_ranks() -> None:
    with pytest.raises(CourseError, match="schedule 'zb-v' places its stages on ranks"):
        LocalPipelineTrainer(tiny(), "zb-v", 2, partition="Et|t||tL")
    with pytest.raises(CourseError, match="4 stages, which 3 ranks cannot share"):
        LocalPipelineTrainer(tiny(), "interleaved-1f1b", 3, partition="Et|t||tL")


@pytest.mark.parametrize(
    ("schedule", "stages", "text"),
    [("1f1b", None, "Et|t||tL"), ("gpipe", None, "E||ttt|L"), ("interleaved-1f1b", 2, "E|t||ttL"),
     ("zb-h1", None, "Et||tt|L")],
)  # fmt: skip
def test_the_local_engine_trains_a_layout_as_the_reference(schedule, stages, text) -> None:
    cfg = tiny()
    trainer = LocalPipelineTrainer(cfg, schedule, stages, partition=text)
    assert trainer.plan.partition.sizes == parse_layout(text).sizes
    assert trainer.schedule.n_stages == parse_layout(text).n_stages
    assert trainer.max_grad_diff_vs_reference() < 1e-6


def test_the_distributed_engine_trains_layouts_with_empty_and_virtual_stages_as_the_reference() -> None:
    configs = [tiny(2), tiny(4)]
    specs = [
        distributed.make_spec(configs[0], "1f1b", partition="Et||tL", return_grads=True),  # rank 1: nothing
        distributed.make_spec(configs[1], "interleaved-1f1b", 3, partition="E|t||tt|t|L", return_grads=True),
    ]
    assert [s.world for s in specs] == [3, 3]
    assert [s.partition.sizes for s in specs] == [(2, 0, 2), (1, 1, 0, 2, 1, 1)]
    for cfg, result in zip(configs, distributed.launch(specs), strict=True):
        want_loss, want = reference_gradients(cfg)
        assert max_grad_diff(result.grads, want) < 1e-6
        assert result.losses[0] == pytest.approx(want_loss, abs=1e-6)


def test_the_balancing_lesson_reads_a_layout_as_a_partition() -> None:
    from course_lib.balance import LayerProfile

    prof = LayerProfile(names=[f"l{i}" for i in range(5)], params=[1, 2, 2, 2, 3], time_s=[0.1] * 5,
                        activation_bytes=[10] * 5, batch_size=1, seq_len=8)  # fmt: skip
    assert stage_totals(prof.params, "Et|tt|L") == [3.0, 4.0, 3.0]
    assert [m.activation_bytes for m in stage_memory("Et|tt|L", prof, "1f1b", 4)] == [20, 20, 10]
    with pytest.raises(CourseError, match="would be silently dropped"):
        stage_totals(prof.params, "Et|t|L")


def test_torchs_runner_refuses_an_empty_stage_by_name() -> None:
    import course_lib.engines.torch_pipelining  # noqa: F401  (adds runner=)

    with pytest.raises(CourseError, match="takes no empty stages"):
        distributed.make_spec(tiny(microbatches=6), "1f1b", partition="Ett||tL", runner="torch")


def test_a_layout_may_have_more_stages_than_layers_its_empty_ones_passing_input_on() -> None:
    trainer = LocalPipelineTrainer(tiny(1), "1f1b", partition="E|||tL")  # 4 stages, 3 layers
    assert trainer.plan.partition.sizes == (1, 0, 0, 2)
    assert trainer.max_grad_diff_vs_reference() < 1e-6
