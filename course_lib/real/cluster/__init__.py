"""The cluster from a notebook: Slurm jobs submitted, waited on and read (``slurm_jobs``), a job
preempted and requeued (``slurm_requeue``), and ranks preempted on purpose at a planned point
(``preemption``, the rank's side in ``preemption_rank``). May import every room before it in the
package's list; the top of the package.
"""
