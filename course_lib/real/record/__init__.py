"""What ranks did, recorded while they run: every torch.distributed call with its bytes (``traffic_log``,
``traffic_sizes``, ``wire``), the work below Python (``compute_log``), NCCL's own INFO lines read
(``nccl_log``), and a recorded run turned into the simulator's Timeline (``recorded_timeline``). May
import ``plumbing``, ``launch`` and ``course_lib.sim``; recording never measures or predicts.
"""
