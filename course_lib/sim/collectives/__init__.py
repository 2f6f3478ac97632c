"""What communication costs: each collective in closed form and transfer by transfer, and replays.

cost.py (collective_time, bus bandwidth), timelines.py (ring, tree and parameter-server events),
traffic.py (bytes per device under ZeRO), replay.py (recorded traffic on a simulated cluster),
buckets.py (a collective's latency share, and what DDP's bucket size costs).
"""
