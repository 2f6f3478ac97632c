"""`make grade` for a class: submissions vetted, each autograded and re-checked in the isolated judge,
merged into the class gradebook, reported and fed back; fixtures, preflight and the demo class.
"""
