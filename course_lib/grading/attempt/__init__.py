"""How a check runs a student's code: on real ranks or in one isolated child, from a function or from the
notebook's answer cells (one reader of them), and how instructor-only hidden checks are found.
"""
