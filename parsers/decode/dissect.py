"""Wireshark's full dissection tree of single frames (pyshark), for notebooks and spot checks."""
from __future__ import annotations

import os


def _layer_fields(layer) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in layer.field_names:
        try:
            out[name] = str(layer.get_field_value(name))
        except Exception:  # noqa: BLE001 - pyshark raises assorted errors on odd fields
            out[name] = "<unreadable>"
    return out


def dissect_frame(path: str | os.PathLike, frame: int, decode_as: dict[str, str] | None = None,
                  prefs: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Return {layer name: {field: value}} for one frame (1-based), as Wireshark dissects it.

    Needs pyshark (`pip install xlayer[shark]`) and tshark. `prefs` passes Wireshark preferences,
    e.g. {"wlan.enable_decryption": "TRUE", "uat:80211_keys": '"wpa-pwd","PASS:SSID"'}.
    """
    import pyshark

    params = []
    for k, v in (prefs or {}).items():
        params += ["-o", f"{k}:{v}"]
    cap = pyshark.FileCapture(os.fspath(path), display_filter=f"frame.number == {int(frame)}",
                              decode_as=decode_as, custom_parameters=params, keep_packets=False)
    try:
        for pkt in cap:
            return {layer.layer_name: _layer_fields(layer) for layer in pkt.layers}
        raise IndexError(f"{path}: no frame {frame}")
    finally:
        cap.close()
