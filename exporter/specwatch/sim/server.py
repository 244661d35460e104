"""placeholder"""
def serve(*a, **k):
    raise NotImplementedError
