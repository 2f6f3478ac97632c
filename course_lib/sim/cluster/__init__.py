"""What the job runs on: alpha-beta links, hardware presets with their sources, nodes and NICs.

hardware.py (Link, HardwarePreset), presets.py (named presets), network.py (the link a group sees),
topology.py (Cluster, make_cluster).
"""
