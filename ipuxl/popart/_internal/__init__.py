"""``popart._internal``: the private PopART modules PopXL and popxl-addons reach into.

Only :mod:`ipuxl.popart._internal.ir` (``popart._internal.ir``) exists: a view of ipuxl's
own IR through PopART's C++ object model (see docs/popart_internal.md).
"""
