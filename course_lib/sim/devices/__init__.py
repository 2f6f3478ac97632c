"""The message-level simulator: a GPU that computes, sends and receives on a virtual clock.

simulated_gpu.py (SimulatedGPU, simulated_gpus), examples_0d_1d.py (one GPU; data parallel),
examples_2d_to_4d.py (DP x TP, then + PP, then + CP).
"""
