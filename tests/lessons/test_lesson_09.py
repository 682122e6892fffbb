"""Lesson 09's sentences against the outputs committed beside them (no kernel: each test reads the cell's
committed output), and its hand-typed link speeds against the cluster they describe."""

from __future__ import annotations

import re

from support.committed import output_text, source

from course_lib.planner import cluster, model

NB = "09_planning_a_real_run"


def rows(cell_id: str, pattern: str) -> list[tuple[str, ...]]:
    found = re.findall(pattern, output_text(NB, cell_id))
    assert found, f"{cell_id}: no line matches {pattern!r}"
    return found


def test_sec_1_more_replicas_shorter_step_less_per_gpu_and_the_textbook_bubble_beside_it():
    text = output_text(NB, "c03")
    assert f"{model('megatron-145b').parameters() / 1e9:.1f}B parameters" in text
    assert "145.6B model" in source(NB, "c02")
    table = [
        (int(d), int(m), float(share), float(book), float(tflops), float(step))
        for d, m, share, book, tflops, step in rows(
            "c03", r"\n\s*(\d+)\s+\d+\s+(\d+)\s+\d+\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)\s+([\d.]+)"
        )
    ]
    assert [r[0] for r in table] == [1, 2, 4, 8, 16, 24]
    for _, m, _, book, _, _ in table:
        assert abs(book - 100 * 7 / (m + 7)) < 0.06  # the printed column is (p-1)/(m+p-1) at p = 8
    for before, after in zip(table, table[1:], strict=False):
        assert after[5] < before[5] and after[4] < before[4]  # the step falls, and so does TFLOP/s per GPU
        assert after[2] >= before[2]  # the bubble grows as m shrinks
    assert all(
        share <= book for (_, _, share, book, _, _) in table
    )  # "a little smaller" as a share of the step


def test_sec_3_link_speeds_are_the_clusters_and_tp_across_infiniband_costs_more_than_compute():
    selene, text = cluster("a100-selene"), source(NB, "c07")
    nvlink, infiniband = (
        float(x)
        for x in re.search(r"at (\d+) GB/s per direction.*InfiniBand at\s+(\d+) GB/s", text, re.S).groups()
    )
    assert (nvlink, infiniband) == (selene.nvlink.bandwidth_Bps / 1e9, selene.network.bandwidth_Bps / 1e9)
    assert "beyond eight GPUs" in text and selene.gpus_per_node == 8
    share = {int(t): float(x) for t, x in rows("c08", r"\n\s*(\d+)\s+\S.*?\s([\d.]+)%")}
    assert all(share[t] < 10 for t in (2, 4, 8)) and share[16] > 100 and share[32] > share[16]


def test_sec_4_interleaving_divides_the_bubble_multiplies_messages_scatter_gather_short_of_t():
    pattern = r"\n\S+\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
    table = {int(v): (float(b), float(msg), float(step)) for v, b, msg, step in rows("c11", pattern)}
    fastest = int(re.search(r"fastest of these: v = (\d+)", output_text(NB, "c11")).group(1))
    assert fastest == min(table, key=lambda v: table[v][2]) and fastest != max(table)  # "past some v"
    vs = sorted(table)
    assert all(
        table[a][0] > table[b][0] and table[a][1] < table[b][1] for a, b in zip(vs, vs[1:], strict=False)
    )
    whole, split, faster = re.search(
        r"([\d.]+) ms whole, ([\d.]+) ms with scatter/gather \(([\d.]+)x faster at t = 8\)",
        output_text(NB, "c11"),
    ).groups()
    assert 1 < float(faster) < 8 and abs(float(whole) / float(split) - float(faster)) < 0.1


def test_sec_6_every_row_within_15_percent_the_smallest_models_furthest_and_the_free_choices():
    errors = [
        (name, float(e))
        for name, e in rows("c17", r"\n(\S+)\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+([+-][\d.]+)%")
    ]
    assert len(errors) == 9 and all(abs(e) < 15 for _, e in errors)
    by_size = sorted(errors, key=lambda x: -abs(x[1]))
    assert {by_size[0][0], by_size[1][0]} == {"megatron-18b", "megatron-39b"} and by_size[1][1] > 0
    pattern = (r"(\S+)\s+(\d+) GPUs: published \(t, p, d\) = \((\d+),\s*(\d+),\s*(\d+)\), "
               r"chosen \((\d+),\s*(\d+),\s*(\d+)\) \S+ v=(\d+):\s+([\d.]+)% faster")  # fmt: skip
    free = {(name, int(gpus)): tuple(int(x) for x in rest[:7]) + (float(rest[7]),)
            for name, gpus, *rest in rows("c17free", pattern)}  # fmt: skip
    assert free["megatron-1t", 3072][3:6] == (8, 64, 6)
    for key in [("megatron-76b", 1024), ("megatron-145b", 1536), ("megatron-310b", 1920),
                ("megatron-530b", 2520), ("llama3-405b", 8192)]:  # fmt: skip
        assert free[key][7] <= 5.0
    for key in [("megatron-18b", 256), ("megatron-39b", 512)]:  # a smaller t, a longer pipeline
        t, p, _, t_free, p_free, _, _, _ = free[key]
        assert t_free < t and p_free > p
    _, p, _, _, p_free, _, v_free, _ = free["llama3-405b", 16384]
    assert p_free < p and v_free > 1  # a shorter pipeline with more virtual stages


def test_sec_6_fig_13_tp_in_the_node_wins_and_no_smaller_t_times_p_fits():
    text = output_text(NB, "c19")
    speed = {
        (int(t), int(p)): float(x)
        for t, p, x in re.findall(r"\(\s*(\d+),\s*(\d+),\s*\d+\): +([\d.]+) TFLOP/s", text)
    }
    assert max(speed, key=speed.get) == (8, 8)
    assert re.search(r"\(\s*1, 32,\s*2\):\s+does not fit memory", text)
    states, budget = (
        float(x) for x in re.search(r"alone take (\d+) GiB per GPU, over the (\d+) GiB", text).groups()
    )
    assert states > budget


def test_sec_7_the_chart_plays_fewer_micro_batches_so_its_bubble_is_the_larger():
    text = output_text(NB, "c23")
    table = float(re.search(r"\n\s*0\s+t=.*\s([\d.]+)%", text).group(1))
    played, every = (int(x) for x in re.search(r"the first (\d+) of its (\d+) micro-batches", text).groups())
    chart = float(re.search(r"bubble ([\d.]+)% of device-time idle", text).group(1))
    assert played < every and chart > table


def test_sec_8_says_whether_the_measured_gap_stands_clear_and_every_step_is_slower():
    text = output_text(NB, "c26")
    gap, spread, ratio = re.search(
        r"the gap: \+(\d+) ms.*spread (\d+) ms.*: ([\d.]+)x its spread", text
    ).groups()
    assert abs(float(gap) / float(spread) - float(ratio)) < 0.1
    assert ("stands clear" in text) == (float(ratio) >= 3)
    assert "every measured step slower than predicted: True" in text
    assert "each of" in output_text(NB, "c25") and "0.7 * whole" in source(NB, "c25")
    assert "70% of what the whole toy needs" in source(NB, "c24")


def test_sec_2_the_activations_do_not_shrink_with_p_and_the_states_decide_the_fit():
    table = rows("c06", r"\n\s+8\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(yes|no)")
    assert [int(p) for p, *_ in table] == [1, 8, 16, 32, 64, 128]
    assert len({act for _, _, act, _, _ in table}) == 1  # the same activations at every p
    budget = float(re.search(r"budget (\d+) GiB", output_text(NB, "c06")).group(1))
    assert all((fits == "yes") == (float(total) <= budget) for _, _, _, total, fits in table)
    assert "does not shrink with p" in source(NB, "c06act")
