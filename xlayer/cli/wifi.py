"""The Wi-Fi part of `xlayer info`: networks, channels, frame types and stations of a capture's 802.11 frames.

Summed chunk by chunk from the packet table the decoders produce (one group-by per chunk), so a capture
of any size is summarised in bounded memory: each list keeps at most `MAX_KEYS` distinct entries and
counts the frames of the rest, which the summary says.  Frames whose FCS failed are counted but not
read further: their addresses and SSIDs may be garbage.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from xlayer.text import safe_text

MAX_KEYS = 10_000       # distinct SSIDs, BSSIDs, stations... kept per list; the rest are counted together
SHOWN = 10              # entries of each list `lines` prints
TYPE_NAMES = {0: "management", 1: "control", 2: "data", 3: "extension"}
_NEEDED = ("wlan_type", "wlan_protected", "wlan_ssid", "wlan_bssid", "wlan_to_ds", "wlan_from_ds", "wlan_ta",
           "wlan_ra", "freq_mhz", "fcs_bad")


def channel_of(freq_mhz: int) -> int | None:
    """Return the 802.11 channel number of a centre frequency in MHz (2.4, 5 and 6 GHz bands), or None."""
    if freq_mhz == 2484:
        return 14
    if 2412 <= freq_mhz <= 2472 and (freq_mhz - 2407) % 5 == 0:
        return (freq_mhz - 2407) // 5
    if 5955 <= freq_mhz <= 7115 and (freq_mhz - 5950) % 5 == 0:
        return (freq_mhz - 5950) // 5
    if 5000 < freq_mhz <= 5925 and (freq_mhz - 5000) % 5 == 0:
        return (freq_mhz - 5000) // 5
    if 58320 <= freq_mhz <= 70200 and (freq_mhz - 58320) % 2160 == 0:     # 802.11ad/ay, 60 GHz
        return (freq_mhz - 58320) // 2160 + 1
    return None


def _frames(n: int) -> str:
    return f"{n} frame" if n == 1 else f"{n} frames"


def _unicast(col: str) -> pl.Expr:
    # the group bit is the low bit of the first octet ("01:00:5e:...", "ff:ff:...", "33:33:...")
    first = pl.col(col).str.slice(0, 2).str.to_integer(base=16, strict=False)
    return pl.col(col).is_not_null() & (first % 2 == 0)


@dataclass
class CappedCounter:
    """A Counter that keeps at most MAX_KEYS keys; frames of further keys go to `others`."""

    counts: Counter = field(default_factory=Counter)
    others: int = 0          # frames of keys not kept
    other_keys: int = 0      # keys not kept (each chunk's new ones: an upper bound across chunks)

    def add(self, pairs: list[tuple[Any, int]]) -> None:
        """Add (key, frames) pairs; return None."""
        for k, n in pairs:
            if k in self.counts or len(self.counts) < MAX_KEYS:
                self.counts[k] += n
            else:
                self.others += n
                self.other_keys += 1


@dataclass
class WifiSummary:
    """What the 802.11 frames of a capture hold, summed over the chunks it was decoded in."""

    frames: int = 0
    fcs_bad: int = 0
    types: Counter = field(default_factory=Counter)
    data_frames: int = 0
    protected_data: int = 0
    ssids: CappedCounter = field(default_factory=CappedCounter)
    bssids: CappedCounter = field(default_factory=CappedCounter)
    bssid_freq: dict[tuple[str, int], int] = field(default_factory=dict)
    channels: CappedCounter = field(default_factory=CappedCounter)
    stations: CappedCounter = field(default_factory=CappedCounter)

    def add(self, df: pl.DataFrame) -> None:
        """Add one chunk of the packet table (rows of any link type: only 802.11 frames count); return None."""
        if "wlan_type" not in df.columns:
            return
        df = df.select(c for c in _NEEDED if c in df.columns).filter(pl.col("wlan_type").is_not_null())
        if df.is_empty():
            return
        for c in _NEEDED:       # a decoder may leave out columns it never fills
            if c not in df.columns:
                df = df.with_columns(pl.lit(None).alias(c))
        self.frames += df.height
        bad = pl.col("fcs_bad").fill_null(False)
        self.fcs_bad += int(df.select(bad.sum()).item())
        df = df.filter(~bad)
        self.types.update(dict(df.group_by("wlan_type").len().iter_rows()))
        data = df.filter(pl.col("wlan_type") == 2)
        self.data_frames += data.height
        self.protected_data += int(data.select(pl.col("wlan_protected").fill_null(False).sum()).item())
        self.ssids.add(df.filter(pl.col("wlan_ssid").is_not_null()).group_by("wlan_ssid").len().rows())
        bss = df.filter(_unicast("wlan_bssid"))
        self.bssids.add(bss.group_by("wlan_bssid").len().rows())
        for b, f, n in bss.filter(pl.col("freq_mhz").is_not_null()).group_by("wlan_bssid", "freq_mhz").len().rows():
            # kept BSSIDs only, and a bounded number of pairs (a hostile capture can hop every frame)
            if b in self.bssids.counts and ((b, f) in self.bssid_freq or len(self.bssid_freq) < 4 * MAX_KEYS):
                self.bssid_freq[(b, f)] = self.bssid_freq.get((b, f), 0) + n
        self.channels.add(df.filter(pl.col("freq_mhz").is_not_null()).group_by("freq_mhz").len().rows())
        # a station is the non-AP end of a data frame: the receiver of one leaving the DS, the sender of one entering it
        to_ds, from_ds = pl.col("wlan_to_ds").fill_null(False), pl.col("wlan_from_ds").fill_null(False)
        sta = pl.concat([data.filter(from_ds & ~to_ds).select(pl.col("wlan_ra").alias("s")),
                         data.filter(to_ds & ~from_ds).select(pl.col("wlan_ta").alias("s"))])
        self.stations.add(sta.filter(_unicast("s")).group_by("s").len().rows())

    def _channel_text(self, freq: int) -> str:
        ch = channel_of(int(freq))
        return f"{freq} MHz (channel {ch})" if ch is not None else f"{freq} MHz"

    def _bssid_channels(self, bssid: str) -> list[int]:
        found = sorted(((n, f) for (b, f), n in self.bssid_freq.items() if b == bssid), reverse=True)
        return [f for _, f in found]

    def as_dict(self) -> dict[str, Any]:
        """Return the summary as JSON-ready values (strings as decoded; JSON escapes control characters)."""
        def listed(c: CappedCounter, key: str) -> list[dict[str, Any]]:
            return [{key: k, "frames": n} for k, n in c.counts.most_common()]

        return {
            "frames": self.frames, "fcs_bad": self.fcs_bad,
            "frame_types": {TYPE_NAMES.get(t, str(t)): n for t, n in sorted(self.types.items())},
            "data_frames": self.data_frames, "protected_data_frames": self.protected_data,
            "protected_share": self.protected_data / self.data_frames if self.data_frames else None,
            "ssids": listed(self.ssids, "ssid"),
            "bssids": [{"bssid": k, "frames": n, "freq_mhz": self._bssid_channels(k)}
                       for k, n in self.bssids.counts.most_common()],
            "channels": [{"freq_mhz": f, "channel": channel_of(int(f)), "frames": n}
                         for f, n in self.channels.counts.most_common()],
            "stations": listed(self.stations, "mac"),
            "not_listed": {name: {"keys": c.other_keys, "frames": c.others}
                           for name, c in (("ssids", self.ssids), ("bssids", self.bssids),
                                           ("channels", self.channels), ("stations", self.stations)) if c.others},
        }

    def lines(self) -> list[str]:
        """Return the text lines `xlayer info` prints (every capture string escaped), or none without 802.11."""
        if not self.frames:
            return []
        t = safe_text
        types = ", ".join(f"{TYPE_NAMES.get(k, k)} {n}" for k, n in sorted(self.types.items()))
        bad = f"; FCS bad {self.fcs_bad}" if self.fcs_bad else ""
        out = ["802.11:", f"  frames: {self.frames} ({types}{bad})"]
        if self.data_frames:
            out.append(f"  protected: {self.protected_data} of {self.data_frames} data frames "
                       f"({100 * self.protected_data / self.data_frames:.1f} %)")
        out += self._list("SSIDs", self.ssids,
                          lambda k: f'"{t(k)}"' if k else "(empty: a hidden network or a wildcard probe)")
        out += self._list("BSSIDs", self.bssids, lambda k: t(k) + "".join(
            f", {self._channel_text(f)}" for f in self._bssid_channels(k)[:2]))
        out += self._list("channels", self.channels, self._channel_text)
        out += self._list("stations", self.stations, t)
        return out

    def _list(self, title: str, c: CappedCounter, show) -> list[str]:
        n = len(c.counts) + c.other_keys
        head = f"  {title}: {n}" + (" (at most)" if c.other_keys else "")
        if not n:
            return [head]
        rows = [f"    {show(k)}: {_frames(v)}" for k, v in c.counts.most_common(SHOWN)]
        rest = n - min(SHOWN, len(c.counts))
        if rest > 0:
            rows.append(f"    ... and {'up to ' if c.other_keys else ''}{rest} more")
        return [head, *rows]
