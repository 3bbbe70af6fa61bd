"""Host TCP state samples (`ss -tin` text, tcp_info JSON lines, iperf3 and flent results) into one table.

`READERS` is the registry: format name -> reader(path, vantage) returning a table in `SCHEMA`.
"""
from parsers.hoststate import iperf3, ss, tcpinfo
from parsers.hoststate.common import SCHEMA, ReadStats

READERS = {
    "ss": ss.read_ss,
    "tcpinfo-jsonl": tcpinfo.read_tcpinfo_jsonl,
    "iperf3-json": iperf3.read_iperf3_json,
    "flent": iperf3.read_flent,
}

__all__ = ["READERS", "SCHEMA", "ReadStats"]
