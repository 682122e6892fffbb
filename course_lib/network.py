"""The network between pipeline stages: where datacenters are, how far apart, and the links between them.

    from course_lib.network import PRESETS, preset, fiber_latency_s, site_link, site, distance_km
    preset("transatlantic")                       # Link(latency_s=0.0295, bandwidth_Bps=12.5e9, ...)
    PRESETS["nvlink4"].source                     # where the numbers come from
    distance_km(site("New York NY"), site("London"))   # about 5,570 km, great circle (haversine)
    fiber_latency_s(5570)                         # 0.0273 s one way: New York-London, great circle
    site_link("Ashburn VA", "Frankfurt", route_factor=1.5)   # a Link between two data/sites.csv sites

Sites: data/sites.csv holds approximate city locations (see the comment at its top). A great-circle
distance is the shortest path over the Earth's surface; a fiber route is always longer, so
``fiber_latency_s`` takes a route factor for that.

Every preset is a :class:`~course_lib.shelf.costs.Link` (latency + bandwidth, one direction) plus a source
string naming where its numbers come from (the full list: REFERENCES.md at the repository root);
where a number is an assumption (no measurement is quoted), the source says "assumed". Bandwidths
are per direction: NVLink's datasheet figures are bidirectional, so they are halved here.

Collectives cross these links too: :func:`ring_all_reduce_s` is what a ring all-reduce of n bytes
over t ranks costs on one (tensor parallelism, the planner's TP and DP)::

    ring_all_reduce_s(2**30, 8, preset("nvlink4"))   # 2(t-1) latencies + 2(t-1)/t of the bytes
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from course_lib.input_files import read_input
from course_lib.shelf.costs import Link
from course_lib.shelf.errors import LIMITS, CourseError, real, require, shown, whole

SITES_CSV = Path(__file__).resolve().parent.parent / "data" / "sites.csv"
EARTH_RADIUS_KM = 6371.0  # mean radius (IUGG); the choice moves distances by well under 1%


@dataclass(frozen=True)
class Site:
    name: str
    country: str
    lat: float  # degrees north
    lon: float  # degrees east
    operators: str = ""


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance between two points given in degrees, on a sphere of mean Earth radius."""
    for lat in (lat1, lat2):
        require(-90 <= lat <= 90, f"latitude must be in [-90, 90] degrees, got {lat!r}")
    for lon in (lon1, lon2):
        require(-180 <= lon <= 180, f"longitude must be in [-180, 180] degrees, got {lon!r}")
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    # haversine form: stays accurate for short distances, where the spherical law of cosines does not
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def distance_km(a: Site, b: Site) -> float:
    return haversine_km(a.lat, a.lon, b.lat, b.lon)


@lru_cache(maxsize=4)
def _read(path: str) -> dict[str, Site]:
    data = read_input(path, "sites CSV", 2**20)  # a few hundred sites: kilobytes
    try:
        lines = data.decode("utf-8").splitlines(keepends=True)
        rows = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
        sites = {
            row["name"]: Site(
                row["name"], row["country"], float(row["lat"]), float(row["lon"]), row.get("operators") or ""
            )
            for row in csv.DictReader(rows)
        }
    except (UnicodeDecodeError, KeyError, ValueError, TypeError) as err:  # not UTF-8, a column missing
        wanted = "UTF-8 text with the columns name, country, lat, lon (and operators)"
        why = f"{type(err).__name__} {err}"
        raise CourseError(f"sites CSV {path!r} is not a sites table ({wanted}): {why}") from None
    require(sites != {}, f"sites CSV {path!r} holds no site")
    return sites


def load_sites(path: str | Path = SITES_CSV) -> dict[str, Site]:
    """Site name -> Site, in the file's order."""
    return dict(_read(str(path)))


def site(name: str) -> Site:
    """One site of data/sites.csv by name (case-insensitive)."""
    sites = load_sites()
    for key, value in sites.items():
        if key.lower() == str(name).strip().lower():
            return value
    raise CourseError(f"unknown site {name!r}; data/sites.csv has: {', '.join(sites)}")


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
    distance_km = real("distance_km", distance_km)
    route_factor = real("route_factor (no route beats the great circle)", route_factor, low=1.0)
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


def ring_all_reduce_bytes(nbytes: float, ranks: int) -> float:
    """Bytes each rank sends in a ring all-reduce of `nbytes` (a reduce-scatter, then an all-gather):
    2(n-1)/n of them, the bus factor of NVIDIA's nccl-tests (doc/PERFORMANCE.md)."""
    nbytes, ranks = real("nbytes", nbytes), whole("ranks", ranks, high=LIMITS["gpus"])  # 0: named
    return 2 * (ranks - 1) / ranks * nbytes


def ring_all_reduce_s(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds of a ring all-reduce of `nbytes` over `ranks` ranks joined by `link`: 2(n-1) steps,
    each paying the latency, and ``ring_all_reduce_bytes`` over the bandwidth; 0 for one rank."""
    nbytes, ranks = real("nbytes", nbytes), whole("ranks", ranks, high=LIMITS["gpus"])
    if not isinstance(link, Link):
        raise CourseError(f"link must be a Link, got {shown(link)}")
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * link.latency_s + ring_all_reduce_bytes(nbytes, ranks) / link.bandwidth_Bps
