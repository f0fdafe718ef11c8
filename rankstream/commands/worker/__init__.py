"""`rankstream worker ...`: the long-running workers."""
