"""One module per protocol layer: radiotap and other radio headers, 802.11, link, IP, TCP/UDP, PHY rates, FCS."""
