"""`rankstream model ...`: the stored models (show, list, pin, unpin, history)."""
