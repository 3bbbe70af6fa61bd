"""A bundle: a directory of captures and its `bundle.json` manifest (`manifest`), read as lazy tables (`tables`)."""
from xlayer.bundle.manifest import (
                                    FORMATS,
                                    KINDS,
                                    MANIFEST,
                                    PACKET_FORMATS,
                                    PACKET_KINDS,
                                    STATE_FORMATS,
                                    Bundle,
                                    BundleError,
                                    CaptureEntry,
                                    load_manifest,
                                    open_bundle,
                                    utc_now,
                                    write_manifest,
)
from xlayer.bundle.tables import (
                                    describe,
                                    guess_format,
                                    packets,
                                    read_state,
                                    scan,
                                    tcp_state,
)

__all__ = ["FORMATS", "KINDS", "MANIFEST", "PACKET_FORMATS", "PACKET_KINDS", "STATE_FORMATS", "Bundle", "BundleError",
           "CaptureEntry", "describe", "guess_format", "load_manifest", "open_bundle", "packets", "read_state", "scan",
           "tcp_state", "utc_now", "write_manifest"]
