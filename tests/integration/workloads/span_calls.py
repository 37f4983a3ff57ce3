"""--span test workload: Scale.__call__ is entered from C (calling an instance) 300 times; helper is only ever
called from Python, which CPython 3.11+ inlines."""


def helper(x):
    return x + 1


class Scale:
    def __call__(self, x):
        return helper(x) * 2


s = Scale()
for i in range(300):
    s(i)
