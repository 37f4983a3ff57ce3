"""The user's own container class in a pipeline's place (a Compose of its own): its call runs its ops in turn. A
workload imports it from here (the script's directory is on sys.path); tests name it with --pipeline Pipeline."""


class Pipeline:
    def __init__(self, ops):
        self.ops = ops

    def __call__(self, x):
        for op in self.ops:
            x = op(x)
        return x
