"""Where datacenters are, and how far apart: great-circle (haversine) distances between sites.

    from course_lib.geo import load_sites, distance_km, site
    sites = load_sites()                               # data/sites.csv: name -> Site
    distance_km(site("New York NY"), site("London"))   # about 5,570 km

The table holds approximate city locations (see the comment at the top of data/sites.csv). A
great-circle distance is the shortest path over the Earth's surface; a fiber route is always longer
(course_lib.network.fiber_latency_s takes a route factor for that).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from course_lib.shelf.errors import CourseError, require

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
    with open(path, newline="", encoding="utf-8") as fh:
        rows = [line for line in fh if line.strip() and not line.lstrip().startswith("#")]
    return {
        row["name"]: Site(
            row["name"], row["country"], float(row["lat"]), float(row["lon"]), row.get("operators", "")
        )
        for row in csv.DictReader(rows)
    }


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
