"""The course framework's `ops_mathematic`: elementwise, shape, reduction and
matrix ops, defined in ops_elementwise, ops_shape and ops_reduce and gathered
here so that code importing from `needle.ops.ops_mathematic` keeps working."""
from .ops_elementwise import *  # noqa: F401,F403
from .ops_reduce import *  # noqa: F401,F403
from .ops_reduce import max, mean, unbroadcast  # noqa: F401
from .ops_shape import *  # noqa: F401,F403
