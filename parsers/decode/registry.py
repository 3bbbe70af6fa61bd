"""Which decoder handles which link type, EtherType and IP protocol, for both decoders."""
from __future__ import annotations

from parsers.layers import dot11
from parsers.layers import ip
from parsers.layers import link
from parsers.layers import radioheaders
from parsers.layers import radiotap
from parsers.layers import transport

# Vectorized: (buf, Span, ColumnBuilder) -> Span
LINK_DECODERS = {**link.LINK_DECODERS, **radiotap.LINK_DECODERS, **radioheaders.LINK_DECODERS,
                 **dot11.LINK_DECODERS}
DOT11_DECODER = dot11.decode_dot11
NET_DECODERS = dict(ip.NET_DECODERS)
TRANSPORT_DECODERS = dict(transport.TRANSPORT_DECODERS)

# Per frame: (data, start, end, claimed, cut, row) -> (kind, start, end, claimed) | None
LINK_FRAME_DECODERS = {**link.LINK_FRAME_DECODERS, **radiotap.LINK_FRAME_DECODERS,
                       **radioheaders.LINK_FRAME_DECODERS, **dot11.LINK_FRAME_DECODERS}
DOT11_FRAME_DECODER = dot11.frame_dot11
NET_FRAME_DECODERS = dict(ip.NET_FRAME_DECODERS)
TRANSPORT_FRAME_DECODERS = dict(transport.TRANSPORT_FRAME_DECODERS)

# Names shown in reasons and `xlayer info` (LINKTYPE_ registry names).
LINKTYPE_NAMES = {
    0: "NULL", 1: "ETHERNET", 12: "RAW", 14: "RAW", 101: "RAW", 105: "IEEE802_11",
    108: "LOOP", 113: "LINUX_SLL", 119: "IEEE802_11_PRISM", 127: "IEEE802_11_RADIOTAP",
    163: "IEEE802_11_AVS", 192: "PPI", 228: "IPV4", 229: "IPV6", 276: "LINUX_SLL2",
}


def linktype_name(lt: int) -> str:
    """Return the LINKTYPE_ name of a link type number, or 'LINKTYPE <n>'."""
    return LINKTYPE_NAMES.get(lt, f"LINKTYPE {lt}")
