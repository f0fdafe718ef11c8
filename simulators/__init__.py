"""Simulated collections and users, plain numpy: the synthetic and real test beds, users
who judge (`judged_feedback`, the paper's feedback loop) and who click (`click_models`,
`click_feedback`). No services: what they produce is put on the stream by `workers`."""
