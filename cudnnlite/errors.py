"""CudnnError and one subclass per cuDNN 9 status; the message names the C function, its arguments
(descriptors print their whole setup) and cuDNN's own cudnnGetLastErrorString text.

    CudnnError
    ├── NotInitialized, SublibraryVersionMismatch, ... (the 1xxx statuses, one class each)
    ├── BadParam        ── BadParamNullPointer, BadParamShapeMismatch, ... (2xxx)
    ├── NotSupported    ── NotSupportedShape, NotSupportedDataType, ...    (3xxx)
    ├── InternalError   ── ...                                             (4xxx)
    └── ExecutionFailed ── ...                                             (5xxx)
"""
import ctypes

from .enums import Status


class CudnnError(RuntimeError):
    """A cuDNN call returned a status other than CUDNN_STATUS_SUCCESS (or a set-up was rejected
    before the call, with the function it would have reached named in `function`)."""

    STATUS = None   # each subclass's own status; raise_for passes the exact one

    def __init__(self, function, arguments=(), detail="", status=None):
        status = self.STATUS if status is None else status
        try:
            self.status = Status(status)
        except ValueError:  # a status newer than this table: keep the number
            self.status = int(status)
        self.function = function
        self.arguments = dict(arguments)
        self.detail = detail
        name = self.status.name if isinstance(self.status, Status) else "UNKNOWN"
        lines = [f"{function} failed: CUDNN_STATUS_{name} ({int(self.status)})"]
        if detail:
            lines[0] += f": {detail}"
        lines += [f"  {name} = {_describe(value)}" for name, value in self.arguments.items()]
        super().__init__("\n".join(lines))


def _describe(value):
    if isinstance(value, ctypes.Array):
        return repr(list(value))
    if isinstance(value, (ctypes._Pointer, ctypes._SimpleCData)) or type(value).__name__ == "CArgObject":
        return "<output>" if type(value).__name__ == "CArgObject" else repr(getattr(value, "value", value))
    return repr(value)


def _class_name(status):
    return "".join(part.capitalize() for part in status.name.split("_"))


# Category classes first (x000), then one subclass per specific status under its category.
_CATEGORY_CLASSES = {}
_STATUS_CLASSES = {}
for _status in Status:
    if _status is Status.SUCCESS:
        continue
    _category = _status // 1000 * 1000
    _base = _CATEGORY_CLASSES.get(_category, CudnnError)
    _cls = type(_class_name(_status), (_base,),
                {"__doc__": f"CUDNN_STATUS_{_status.name}", "STATUS": _status})
    _STATUS_CLASSES[_status] = _cls
    if _status % 1000 == 0:
        _CATEGORY_CLASSES[_status] = _cls
    globals()[_cls.__name__] = _cls

# The 1xxx statuses have no x000 parent: each is its own CudnnError subclass.
NotInitialized = _STATUS_CLASSES[Status.NOT_INITIALIZED]
BadParam = _STATUS_CLASSES[Status.BAD_PARAM]
BadParamShapeMismatch = _STATUS_CLASSES[Status.BAD_PARAM_SHAPE_MISMATCH]
NotSupported = _STATUS_CLASSES[Status.NOT_SUPPORTED]
NotSupportedDataType = _STATUS_CLASSES[Status.NOT_SUPPORTED_DATA_TYPE]
InternalError = _STATUS_CLASSES[Status.INTERNAL_ERROR]
ExecutionFailed = _STATUS_CLASSES[Status.EXECUTION_FAILED]


def error_class(status):
    """The CudnnError subclass for a status number; unknown numbers map to their category."""
    try:
        return _STATUS_CLASSES[Status(status)]
    except ValueError:
        return _CATEGORY_CLASSES.get(status // 1000 * 1000, CudnnError)


def raise_for(status, function, arguments=(), detail=""):
    raise error_class(status)(function, arguments, detail, status)


__all__ = ["CudnnError", "error_class", "raise_for"] + [c.__name__ for c in _STATUS_CLASSES.values()]
