"""Taking captures: tcpdump/dumpcap runs with a host TCP-state sampler beside them, written as a bundle."""
