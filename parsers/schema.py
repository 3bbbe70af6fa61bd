"""The packet table's schema: every column's name, dtype, unit and meaning, written once.

One row per capture record.  A column is null where the field is absent from that record (a wired
frame has no radio columns, a UDP datagram no TCP columns, a truncated frame nothing past the cut).

Addresses: MAC addresses are lower-case ``aa:bb:cc:dd:ee:ff`` strings; IP addresses are strings in
their usual text form (dotted quad for IPv4, RFC 5952 compressed form for IPv6), as Wireshark shows them.
Timestamps are int64 nanoseconds since the Unix epoch.  PHY rates are in Mbit/s, as 802.11 names them.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl


@dataclass(frozen=True)
class Column:
    """One column of a table schema: name, polars dtype, unit and meaning."""

    name: str
    dtype: pl.DataType
    unit: str
    doc: str


_C = Column
SACK_DTYPE = pl.List(pl.Array(pl.UInt32, 2))

COLUMNS: tuple[Column, ...] = (
    # --- record (container) ---
    _C("frame", pl.Int64, "", "record number in the file, 1-based, as Wireshark numbers it"),
    _C("ts_ns", pl.Int64, "ns", "capture timestamp, nanoseconds since the Unix epoch"),
    _C("caplen", pl.UInt32, "B", "bytes captured"),
    _C("wirelen", pl.UInt32, "B", "bytes on the wire (original length)"),
    _C("linktype", pl.UInt16, "", "LINKTYPE_ value of the record's interface (127 radiotap, 1 Ethernet, ...)"),
    _C("iface", pl.UInt16, "", "pcapng interface id (0 for pcap)"),
    _C("malformed", pl.Utf8, "", "null, or why the record could not be decoded completely"),
    # --- radio pseudo-header (radiotap, PPI, Prism, AVS) ---
    _C("rt_layout", pl.Utf8, "", "radiotap presence words as hex, comma-separated (the header's layout)"),
    _C("rt_len", pl.UInt16, "B", "radiotap header length it_len (bytes 2-3), null for other link types"),
    _C("tsft", pl.UInt64, "us", "MAC timestamp (TSFT) of the first bit of the MPDU"),
    _C("rt_flags", pl.UInt8, "", "radiotap Flags field (0x10 FCS at end, 0x40 bad FCS, 0x02 short preamble...)"),
    _C("phy_rate_mbps", pl.Float64, "Mbit/s", "PHY data rate: legacy rate, or computed from HT/VHT/HE MCS, NSS, width, GI"),
    _C("phy", pl.Utf8, "", "PHY kind the rate came from: legacy, ht, vht, he"),
    _C("mcs", pl.UInt8, "", "MCS index (HT: 0-76, VHT/HE: per-stream index of the first user)"),
    _C("nss", pl.UInt8, "", "spatial streams (HT: derived from the MCS index)"),
    _C("bw_mhz", pl.UInt16, "MHz", "channel width of the PPDU"),
    _C("sgi", pl.Boolean, "", "short guard interval (HT/VHT); HE: GI < 1.6 us"),
    _C("he_gi_us", pl.Float32, "us", "HE guard interval (0.8, 1.6, 3.2)"),
    _C("freq_mhz", pl.UInt16, "MHz", "channel centre frequency"),
    _C("chan_flags", pl.UInt16, "", "radiotap channel flags"),
    _C("signal_dbm", pl.Int16, "dBm", "antenna signal (first dBm value in the header)"),
    _C("noise_dbm", pl.Int16, "dBm", "antenna noise (first dBm value in the header)"),
    _C("antenna", pl.UInt8, "", "antenna index"),
    _C("rx_flags", pl.UInt16, "", "radiotap RX flags"),
    _C("tx_flags", pl.UInt16, "", "radiotap TX flags (TX-status frames)"),
    _C("data_retries", pl.UInt8, "", "radiotap data retries (TX-status frames)"),
    _C("fcs_bad", pl.Boolean, "", "FCS failed: the radio's bad-FCS flag, or the FCS at the end does not verify"),
    _C("ampdu_ref", pl.UInt32, "", "A-MPDU reference number shared by the MPDUs of one A-MPDU"),
    _C("ampdu_flags", pl.UInt16, "", "radiotap A-MPDU status flags (0x08 last subframe known, ...)"),
    _C("rt_timestamp", pl.UInt64, "", "radiotap Timestamp field value, in its own unit"),
    # --- 802.11 MAC ---
    _C("wlan_type", pl.UInt8, "", "frame type: 0 management, 1 control, 2 data, 3 extension"),
    _C("wlan_subtype", pl.UInt8, "", "frame subtype"),
    _C("wlan_flags", pl.UInt8, "", "frame-control flags octet"),
    _C("wlan_to_ds", pl.Boolean, "", "To DS"),
    _C("wlan_from_ds", pl.Boolean, "", "From DS"),
    _C("wlan_more_frag", pl.Boolean, "", "More Fragments"),
    _C("wlan_retry", pl.Boolean, "", "Retry"),
    _C("wlan_pwr_mgt", pl.Boolean, "", "Power Management"),
    _C("wlan_more_data", pl.Boolean, "", "More Data"),
    _C("wlan_protected", pl.Boolean, "", "Protected Frame"),
    _C("wlan_order", pl.Boolean, "", "+HTC/Order"),
    _C("wlan_duration", pl.UInt16, "us", "Duration/ID field (raw 16 bits)"),
    _C("wlan_ra", pl.Utf8, "", "receiver address"),
    _C("wlan_ta", pl.Utf8, "", "transmitter address (null for CTS/ACK)"),
    _C("wlan_da", pl.Utf8, "", "destination address (from the DS bits)"),
    _C("wlan_sa", pl.Utf8, "", "source address (from the DS bits)"),
    _C("wlan_bssid", pl.Utf8, "", "BSSID (from the DS bits; null for WDS frames)"),
    _C("wlan_seq", pl.UInt16, "", "sequence number"),
    _C("wlan_frag", pl.UInt8, "", "fragment number"),
    _C("wlan_tid", pl.UInt8, "", "QoS TID"),
    _C("wlan_amsdu", pl.Boolean, "", "QoS A-MSDU Present"),
    _C("wlan_pn", pl.UInt64, "", "CCMP/TKIP packet number of protected frames"),
    _C("wlan_decrypted", pl.Boolean, "", "protected frame decrypted with the keys given (null: no keys given, "
       "or not protected); its IP and transport columns are those of the plaintext"),
    _C("wlan_mic", pl.Utf8, "", "MIC of a protected frame when keys were given: ok, unverified (cut by the snap "
       "length: its captured prefix was decrypted), failed (not decoded further), or null"),
    _C("wlan_key", pl.Utf8, "", "kind of key that decrypted the frame: ptk, gtk or tk (never key material)"),
    _C("wlan_ssid", pl.Utf8, "", "SSID of beacons, probe requests/responses, (re)association requests; "
       "bytes that are not UTF-8 are escaped as \\xNN"),
    _C("wlan_reason", pl.UInt16, "", "reason code of deauthentication/disassociation"),
    _C("wlan_status", pl.UInt16, "", "status code of authentication/(re)association responses"),
    _C("wlan_ba_ssn", pl.UInt16, "", "Block Ack / Block Ack Request starting sequence number"),
    _C("wlan_ba_bitmap", pl.Utf8, "", "Block Ack bitmap as hex, as transmitted"),
    # --- link (wired) ---
    _C("eth_src", pl.Utf8, "", "Ethernet / SLL source address"),
    _C("eth_dst", pl.Utf8, "", "Ethernet destination address"),
    _C("eth_type", pl.UInt16, "", "EtherType of the payload (after VLAN tags / LLC-SNAP)"),
    _C("vlan_id", pl.UInt16, "", "outermost VLAN id (802.1Q or 802.1ad)"),
    _C("vlan_depth", pl.UInt8, "", "number of VLAN tags"),
    # --- network ---
    _C("ip_version", pl.UInt8, "", "4 or 6"),
    _C("ip_src", pl.Utf8, "", "source address"),
    _C("ip_dst", pl.Utf8, "", "destination address"),
    _C("ip_proto", pl.UInt8, "", "transport protocol (IPv6: after extension headers)"),
    _C("ip_id", pl.UInt32, "", "IPv4 identification, or the IPv6 fragment header's identification"),
    _C("ip_len", pl.UInt32, "B", "IPv4 total length / IPv6 payload length + 40, as the header says "
       "(0 for BIG TCP headers that say 0)"),
    _C("ip_hdr_len", pl.UInt16, "B", "IP header length including IPv6 extension headers"),
    _C("ip_df", pl.Boolean, "", "IPv4 Don't Fragment"),
    _C("ip_mf", pl.Boolean, "", "More Fragments (IPv4 flag or IPv6 fragment header)"),
    _C("ip_frag_offset", pl.UInt16, "B", "fragment offset in bytes (IPv4 or IPv6 fragment header)"),
    _C("ip_ttl", pl.UInt8, "", "IPv4 TTL / IPv6 hop limit"),
    _C("ip_dscp", pl.UInt8, "", "DSCP"),
    _C("ip_ecn", pl.UInt8, "", "ECN"),
    _C("ip_checksum", pl.UInt16, "", "IPv4 header checksum as transmitted (not verified)"),
    # --- transport ---
    _C("sport", pl.UInt16, "", "TCP/UDP source port"),
    _C("dport", pl.UInt16, "", "TCP/UDP destination port"),
    _C("tcp_seq", pl.UInt32, "", "raw sequence number"),
    _C("tcp_ack", pl.UInt32, "", "raw acknowledgement number"),
    _C("tcp_flags", pl.UInt16, "", "flags (12 bits: NS..FIN)"),
    _C("tcp_hdr_len", pl.UInt8, "B", "TCP header length"),
    _C("tcp_win", pl.UInt16, "", "window field as transmitted (unscaled)"),
    _C("tcp_len", pl.UInt32, "B", "TCP payload length (from the IP length; from the frame for BIG TCP)"),
    _C("tcp_mss", pl.UInt16, "B", "MSS option"),
    _C("tcp_wscale", pl.UInt8, "", "window-scale option shift count"),
    _C("tcp_sack_perm", pl.Boolean, "", "SACK-permitted option present"),
    _C("tcp_tsval", pl.UInt32, "", "timestamp option TSval"),
    _C("tcp_tsecr", pl.UInt32, "", "timestamp option TSecr"),
    _C("tcp_sack", SACK_DTYPE, "", "SACK blocks as [left, right] pairs (raw sequence numbers), up to 4"),
    _C("udp_len", pl.UInt16, "B", "UDP length field"),
    _C("icmp_type", pl.UInt8, "", "ICMP / ICMPv6 type"),
    _C("icmp_code", pl.UInt8, "", "ICMP / ICMPv6 code"),
)

SCHEMA: dict[str, pl.DataType] = {c.name: c.dtype for c in COLUMNS}
NAMES: tuple[str, ...] = tuple(SCHEMA)
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}


def empty_frame() -> pl.DataFrame:
    """Return a zero-row table with the packet schema."""
    return pl.DataFrame(schema=SCHEMA)


def markdown_table(columns: tuple[Column, ...] = COLUMNS) -> str:
    """Return a schema (the packet table's by default) as a Markdown table, for the reference pages."""
    lines = ["| column | dtype | unit | meaning |", "|---|---|---|---|"]
    for c in columns:
        lines.append(f"| `{c.name}` | {c.dtype} | {c.unit} | {c.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
