"""A bundle: a directory of captures and its `bundle.json` manifest, validated, and read as lazy tables."""
from xlayer.bundle.manifest import (FORMATS, KINDS, MANIFEST, PACKET_FORMATS, PACKET_KINDS, STATE_FORMATS, Bundle,
                                    BundleError, CaptureEntry, guess_format, guess_format_bytes, load_manifest,
                                    open_bundle, utc_now, write_manifest)

__all__ = ["FORMATS", "KINDS", "MANIFEST", "PACKET_FORMATS", "PACKET_KINDS", "STATE_FORMATS", "Bundle", "BundleError",
           "CaptureEntry", "guess_format", "guess_format_bytes", "load_manifest", "open_bundle", "utc_now",
           "write_manifest"]
