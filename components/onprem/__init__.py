"""On-prem tier: bare-metal Kubernetes with the NVIDIA GPU and Network Operators, InfiniBand, local NVMe, MetalLB."""
