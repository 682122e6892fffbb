"""Network presets and fiber physics against their published sources (REFERENCES.md); latency-aware
1F1B against the simulator."""

from __future__ import annotations

import random

import pytest

from course_lib.network import (
    FIBER_S_PER_KM,
    PRESETS,
    distance_km,
    fiber_latency_s,
    fiber_rtt_s,
    haversine_km,
    load_sites,
    preset,
    site,
    site_link,
)
from course_lib.schedules.latency_aware import (
    extra_activation_bytes,
    extra_in_flight,
    flush_bound,
    latency_aware_1f1b,
    plain_1f1b_step,
    warmup_forwards,
)
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import CourseError
from course_lib.shelf.first_schedules import build_schedule
from course_lib.shelf.simulator import StageCosts, simulate
from course_lib.shelf.validate import check


def test_great_circle_distances_match_facts():
    ny, london = site("New York NY"), site("london")
    assert distance_km(ny, london) == pytest.approx(5570, abs=5)
    assert distance_km(ny, site("Los Angeles CA")) == pytest.approx(3936, abs=5)
    assert distance_km(london, site("Frankfurt")) == pytest.approx(638, abs=5)
    assert haversine_km(0, 0, 0, 180) == pytest.approx(3.14159265 * 6371, rel=1e-6)
    assert haversine_km(10, 20, 10, 20) == 0


def test_fiber_floor_new_york_london():
    assert FIBER_S_PER_KM == pytest.approx(4.9e-6, rel=0.01)
    assert fiber_rtt_s(5570) * 1e3 == pytest.approx(54.6, abs=0.05)
    # the measured cable round trip (59 ms) is above the floor: its route factor is about 1.08
    assert preset("transatlantic").latency_s * 2 == pytest.approx(59e-3)
    assert 1.0 < 59e-3 / fiber_rtt_s(5570) < 1.1
    assert fiber_latency_s(100, route_factor=2.1) == pytest.approx(2.1 * fiber_latency_s(100))


def test_presets_have_sources_and_facts_numbers():
    for name, p in PRESETS.items():
        assert p.source and isinstance(p.link, Link), name
    assert preset("NVLink4").bandwidth_Bps == 450e9  # 900 GB/s bidirectional, per direction
    assert preset("nvlink5").bandwidth_Bps == 900e9
    assert preset("ib-ndr").bandwidth_Bps == 400e9 / 8 and preset("ib-xdr").bandwidth_Bps == 800e9 / 8
    assert preset("100gbe").bandwidth_Bps == 12.5e9 and preset("400gbe").bandwidth_Bps == 50e9
    assert preset("us-coast-to-coast").latency_s * 2 == pytest.approx(87e-3)
    assert preset("metro").latency_s == pytest.approx(50 * 4.9e-6, rel=0.01)
    # 64 MiB pipeline boundary (arXiv 2104.04473 sec. 3.2: b*s*h values; 5.4 ms at 100 Gb/s), latency aside
    assert 64 * 2**20 / preset("100gbe").bandwidth_Bps * 1e3 == pytest.approx(5.4, abs=0.05)


def test_sites_table_and_site_links():
    sites = load_sites()
    assert len(sites) >= 15 and {"Ashburn VA", "Tokyo", "Singapore", "Sydney", "Sao Paulo"} <= set(sites)
    for s in sites.values():
        assert -90 <= s.lat <= 90 and -180 <= s.lon <= 180
    link = site_link("Ashburn VA", "Dublin", route_factor=1.5)
    km = distance_km(site("Ashburn VA"), site("Dublin"))
    assert link.latency_s == pytest.approx(km * 1.5 * FIBER_S_PER_KM)
    assert site_link("Tokyo", "tokyo").latency_s < 1e-4  # same site: a datacenter link


@pytest.mark.parametrize(
    "call, named",
    [
        (lambda: site("Atlantis"), "unknown site 'Atlantis'"),
        (lambda: preset("carrier pigeon"), "unknown network preset 'carrier pigeon'"),
        (lambda: fiber_latency_s(-1), "-1"),
        (lambda: fiber_latency_s(10, route_factor=0.5), "0.5"),
        (lambda: haversine_km(91, 0, 0, 0), "91"),
        (lambda: latency_aware_1f1b(3, 4, extra_per_link=[1]), "extra_per_link has 1 entries"),
        (lambda: latency_aware_1f1b(3, 4, extra_per_link=-1), "-1"),
        (lambda: extra_in_flight(0.1, 0, 0), r"t_f \+ t_b must be > 0 .*got 0 \+ 0"),
    ],
)
def test_bad_input_names_the_value(call, named):
    with pytest.raises(CourseError, match=named):
        call()


def test_extra_in_flight_formula():
    assert extra_in_flight(0.0, 1.0, 2.0) == 0
    assert extra_in_flight(1.5, 1.0, 2.0) == 1  # 2L = 3 = one slot exactly
    assert extra_in_flight(1.6, 1.0, 2.0) == 2
    assert extra_in_flight(Link(latency_s=1.0, bandwidth_Bps=1.0), 1.0, 1.0, nbytes=1) == 2
    assert warmup_forwards(4, 0) == [3, 2, 1, 0]  # plain 1F1B
    assert warmup_forwards(4, [2, 0, 1]) == [6, 3, 2, 0]


def test_latency_aware_is_valid_and_plain_when_extra_is_zero():
    for p in range(1, 7):
        for m in range(1, 13):
            assert latency_aware_1f1b(p, m, 0).orders == build_schedule("1f1b", p, m).orders
            assert check(latency_aware_1f1b(p, m, 2)) == []
    assert build_schedule("latency-aware-1f1b", 4, 8).orders == latency_aware_1f1b(4, 8, 1).orders


def test_plain_1f1b_step_grows_with_latency_as_predicted():
    rng = random.Random(0)
    for _ in range(60):
        p, m = rng.randint(2, 8), rng.randint(1, 40)
        t_f, t_b, lat = rng.uniform(0.5, 2), rng.uniform(0.5, 3), rng.uniform(0, 20)
        tl = simulate(build_schedule("1f1b", p, m), StageCosts.fused(f=t_f, b=t_b), links=Link(latency_s=lat))
        assert tl.makespan == pytest.approx(plain_1f1b_step(p, m, t_f, t_b, lat), rel=1e-9), (p, m, lat)
    # none of it is hidden: the step grows by 2L per round trip on the critical path
    no_lat = plain_1f1b_step(4, 16, 1, 2, 0)
    assert plain_1f1b_step(4, 16, 1, 2, 1.0) - no_lat == pytest.approx(2 * (3 + 11))


def test_latency_aware_idle_stays_within_the_flush_bound():
    rng = random.Random(1)
    for _ in range(60):
        p, m = rng.randint(2, 8), rng.randint(1, 40)
        t_f, t_b = rng.uniform(0.5, 2), rng.uniform(0.5, 3)
        lats = [rng.choice([0.0, rng.uniform(0, 2), rng.uniform(0, 20)]) for _ in range(p - 1)]
        links = [Link(latency_s=x) for x in lats]
        extra = [extra_in_flight(x, t_f, t_b) for x in lats]
        costs = StageCosts.fused(f=t_f, b=t_b)
        aware = simulate(latency_aware_1f1b(p, m, extra), costs, links=links)
        bound = flush_bound(p, t_f, t_b, lats)
        for d in range(p):
            assert aware.idle(d) <= bound + 1e-9, (p, m, lats, d)
        plain = simulate(build_schedule("1f1b", p, m), costs, links=links)
        assert aware.makespan <= plain.makespan + 1e-9


def test_hiding_costs_activation_memory():
    p, m, lat, t_f, t_b = 4, 32, 5.0, 1.0, 2.0
    k = extra_in_flight(lat, t_f, t_b)  # ceil(10 / 3) = 4
    assert k == 4
    costs = StageCosts.fused(f=t_f, b=t_b)
    aware = simulate(latency_aware_1f1b(p, m, k), costs, links=Link(latency_s=lat))
    plain = simulate(build_schedule("1f1b", p, m), costs, links=Link(latency_s=lat))
    assert [plain.peak_inflight(d) for d in range(p)] == [4, 3, 2, 1]
    # device d holds p - d plus k for every link below it
    assert [aware.peak_inflight(d) for d in range(p)] == [4 + 3 * k, 3 + 2 * k, 2 + k, 1]
    assert extra_activation_bytes(p, k, [10, 10, 10, 10], m) == [120, 80, 40, 0]
    # and buys back almost all the latency: idle is the flush bound, plain pays 2L per round trip
    assert aware.idle(0) == pytest.approx(flush_bound(p, t_f, t_b, [lat] * 3))
    assert plain.makespan - aware.makespan > 20 * lat


def test_latency_map_functions_and_widget_never_raise_on_bad_input():
    from course_lib.widgets.latency_map import latency_map, link_rows, placement_links, simulate_placement

    places = ["Ashburn VA", "Dublin", "Frankfurt", "Singapore"]
    rows = link_rows(places)
    assert [r["link"] for r in rows] == ["stage 0 -> 1", "stage 1 -> 2", "stage 2 -> 3"]
    assert rows[0]["km"] == pytest.approx(distance_km(site("Ashburn VA"), site("Dublin")))
    plain = simulate_placement(places, 8, 0.01, 0.02, "1f1b")
    aware = simulate_placement(places, 8, 0.01, 0.02, "latency-aware-1f1b")
    assert aware.makespan < plain.makespan
    bound = flush_bound(4, 0.01, 0.02, [link.latency_s for link in placement_links(places)])
    assert max(aware.idle(d) for d in range(4)) <= bound + 1e-12
    box = latency_map(places)
    box.children[5].value = -3.0  # t_f: a negative compute time gives a message, not a traceback
    assert "cannot simulate this placement: compute times must be > 0 seconds, got t_f=-0.003" in box.text
    with pytest.raises(CourseError, match="unknown schedule 'zb'"):
        simulate_placement(places, schedule="zb")
