"""The [sandbox] limit keys: ``memory``, ``pids``, ``cpus``, ``disk``, their defaults and
how human sizes read ("4GiB", "512M", 1073741824).

Defaults are what a user would expect on a shared box: one cell may not take the machine
(4 GiB of memory, 1024 processes, 2 CPUs, 10 GiB of workspace). ``"unlimited"`` turns one
off. Binary units (KiB, MiB, GiB, TiB, and K, M, G, T) are powers of 1024; decimal ones
(kB, MB, GB, TB) powers of 1000; a bare number is bytes.
"""

from __future__ import annotations

import math
import re

from arenad.errors import CampaignError

DEFAULT_MEMORY = "4GiB"
DEFAULT_PIDS = 1024
DEFAULT_CPUS = 2.0
DEFAULT_DISK = "10GiB"
UNLIMITED = "unlimited"
# Below these a run cannot even start its sandbox: a typo ("4M" for "4G") is refused.
MIN_MEMORY_BYTES = 16 << 20
MIN_PIDS = 8
MIN_DISK_BYTES = 1 << 20

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tib": 1 << 40,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_size(value: object, key: str, where: str, minimum: int) -> int | None:
    """Bytes from a human size (None: ``"unlimited"``); a bad one raises CampaignError
    naming ``key``."""
    if value == UNLIMITED:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise CampaignError(f'{where}: {key} must be a size such as "4GiB", not {value!r}')
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise CampaignError(
                f'{where}: {key} = {value!r} is not a size (such as "4GiB", "512MiB",'
                f' or "{UNLIMITED}")'
            )
        size = math.floor(float(match.group(1)) * _UNITS[unit])
    if size < minimum:
        raise CampaignError(
            f"{where}: {key} = {value!r} is below the least allowed, {minimum} bytes"
        )
    return size


def parse_pids(value: object, key: str, where: str) -> int | None:
    if value == UNLIMITED:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_PIDS:
        raise CampaignError(
            f'{where}: {key} must be a whole number of at least {MIN_PIDS} or "{UNLIMITED}",'
            f" not {value!r}"
        )
    return value


def parse_cpus(value: object, key: str, where: str) -> float | None:
    if value == UNLIMITED:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0.01
        or value > 4096
    ):
        raise CampaignError(
            f'{where}: {key} must be a number of CPUs (such as 2 or 0.5) or "{UNLIMITED}",'
            f" not {value!r}"
        )
    return float(value)
