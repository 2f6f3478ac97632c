"""The network: alpha-beta links, and the link a collective's group sees on a rail-optimised cluster.

links.py (Link), group_links.py (GroupLink: NVLink hops inside a node, NIC hops across nodes).
"""
