"""The network between pipeline stages: link presets with their sources, and fiber latency from distance.

    from course_lib.network import PRESETS, preset, fiber_latency_s, site_link
    preset("transatlantic")                       # Link(latency_s=0.0295, bandwidth_Bps=12.5e9, ...)
    PRESETS["nvlink4"].source                     # where the numbers come from
    fiber_latency_s(5570)                         # 0.0273 s one way: New York-London, great circle
    site_link("Ashburn VA", "Frankfurt", route_factor=1.5)   # a Link between two data/sites.csv sites

Every preset is a :class:`~course_lib.shelf.costs.Link` (latency + bandwidth, one direction) plus a source
string naming where its numbers come from (the full list: REFERENCES.md at the repository root);
where a number is an assumption (no measurement is quoted), the source says "assumed". Bandwidths
are per direction: NVLink's datasheet figures are bidirectional, so they are halved here.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.geo import distance_km, site
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import require

FIBER_S_PER_KM = 1.0 / 204_000.0  # light in fiber: c / 1.468 (silica's group index), about 4.9 us per km

GB = 1e9  # bytes; network rates are decimal
Gbit = 1e9 / 8  # bytes per second in one Gb/s


@dataclass(frozen=True)
class Preset:
    link: Link
    source: str


def fiber_latency_s(distance_km: float, route_factor: float = 1.0) -> float:
    """One-way time of light through fiber over `distance_km` of great circle, times `route_factor`
    (1.0: a cable along the great circle, the physical floor; real routes run longer: internet paths
    about 2.1x the line of sight, Bozkurt et al. 2018, arXiv 1811.10737)."""
    require(distance_km >= 0, f"distance must be >= 0 km, got {distance_km!r}")
    require(
        route_factor >= 1.0,
        f"route_factor must be >= 1 (no route beats the great circle), got {route_factor!r}",
    )
    return distance_km * route_factor * FIBER_S_PER_KM


def fiber_rtt_s(distance_km: float, route_factor: float = 1.0) -> float:
    return 2 * fiber_latency_s(distance_km, route_factor)


PRESETS: dict[str, Preset] = {
    "nvlink4": Preset(
        Link(latency_s=10e-6, bandwidth_Bps=450 * GB, name="NVLink 4"),
        "900 GB/s bidirectional per GPU, H100/H200 (NVIDIA datasheet via stas00/ml-engineering "
        "network/README.md) -> 450 GB/s each way; latency assumed 10 us (framework-level small "
        "messages take tens of us: stas00/ml-engineering all-reduce benchmark)",
    ),
    "nvlink5": Preset(
        Link(latency_s=10e-6, bandwidth_Bps=900 * GB, name="NVLink 5"),
        "1.8 TB/s bidirectional per GPU, B200 (NVIDIA datasheet via stas00/ml-engineering "
        "network/README.md) -> 900 GB/s each way; latency assumed 10 us, as NVLink 4",
    ),
    "ib-ndr": Preset(
        Link(latency_s=5e-6, bandwidth_Bps=400 * Gbit, name="InfiniBand NDR"),
        "400 Gb/s per port (InfiniBand NDR); switch latency well under 1 us; 5 us end to end "
        "(NIC + software) assumed",
    ),
    "ib-xdr": Preset(
        Link(latency_s=5e-6, bandwidth_Bps=800 * Gbit, name="InfiniBand XDR"),
        "800 Gb/s per port (InfiniBand XDR); 5 us end to end assumed, as NDR",
    ),
    "100gbe": Preset(
        Link(latency_s=10e-6, bandwidth_Bps=100 * Gbit, name="100 GbE"),
        "100 Gb/s Ethernet; 10 us end to end inside a datacenter assumed",
    ),
    "400gbe": Preset(
        Link(latency_s=10e-6, bandwidth_Bps=400 * Gbit, name="400 GbE"),
        "400 Gb/s Ethernet; 10 us end to end inside a datacenter assumed",
    ),
    "metro": Preset(
        Link(latency_s=fiber_latency_s(50), bandwidth_Bps=400 * Gbit, name="metro fiber 50 km"),
        "50 km of fiber at 4.9 us/km (light in fiber, c/1.468: Corning SMF-28) = 245 us one way; "
        "400 Gb/s (one wavelength) assumed",
    ),
    "us-coast-to-coast": Preset(
        Link(latency_s=87e-3 / 2, bandwidth_Bps=100 * Gbit, name="US coast to coast"),
        "AWS us-east-1 to us-west-2 measured round trip about 87 ms (2017), one way = half; "
        "100 Gb/s (a leased wavelength) assumed",
    ),
    "transatlantic": Preset(
        Link(latency_s=59e-3 / 2, bandwidth_Bps=100 * Gbit, name="transatlantic"),
        "New York-London on the Hibernia Express cable, round trip about 59 ms (2015), one way = "
        "half (the great-circle floor is 54.6 ms round trip); 100 Gb/s assumed",
    ),
}


def preset(name: str) -> Link:
    """The Link of a preset (see PRESETS for the names and their sources)."""
    key = str(name).strip().lower().replace(" ", "-").replace("_", "-")
    require(key in PRESETS, f"unknown network preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[key].link


def site_link(a: str, b: str, route_factor: float = 1.0, bandwidth_Bps: float = 100 * Gbit) -> Link:
    """A fiber Link between two sites of data/sites.csv: great-circle distance x route_factor at
    4.9 us/km. Two stages at the same site get a 400 GbE link instead (same datacenter)."""
    here, there = site(a), site(b)
    if here == there:
        return PRESETS["400gbe"].link
    km = distance_km(here, there)
    return Link(
        fiber_latency_s(km, route_factor), bandwidth_Bps, name=f"{here.name} - {there.name} ({km:,.0f} km)"
    )
