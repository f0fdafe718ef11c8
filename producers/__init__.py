"""What an engine or serve uses to write to the stream: the feedback, click and
impression producers, how feedback is batched, the producer they own, and the checks
of what an engine sends (`candidate_checks`).
"""
