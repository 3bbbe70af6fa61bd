"""Where bundles with ground truth come from: the network-namespace lab and ns-3 simulations."""
