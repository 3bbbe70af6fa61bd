"""Capture containers: pcap and pcapng record walks, and the one table of magic numbers (detect)."""
