"""`make grade SLURM=1`: a class graded as a Slurm job array (array_tasks.py: shares, sbatch, task states;
array_grading.py: submitting, waiting, re-queueing and merging).
"""
