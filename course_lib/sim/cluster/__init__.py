"""What the job runs on: hardware presets with their sources, nodes and NICs.

hardware.py (HardwarePreset), presets.py (named presets), topology.py (Cluster, make_cluster); the links
themselves are in network/.
"""
