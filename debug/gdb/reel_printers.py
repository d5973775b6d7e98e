# gdb pretty-printers for reel: Tensor (shape, dtype, device, requires_grad, grad_fn
# with its op, site and module path, and the first values of a CPU tensor),
# TensorImpl, Node (a tape entry: op, shapes, site, module path), Dims, Site, Device,
# ModulePath and Ref<T>.
#
# libreel carries this file in its .debug_gdb_scripts section, so gdb loads it with
# the library once the library's directory is on gdb's auto-load safe-path:
#   gdb -iex 'add-auto-load-safe-path /path/to/lib' ./train
# It can also be sourced by hand: (gdb) source share/reel/gdb/reel_printers.py
# (generated into libreel by debug/gdb/embed.cmake; the text must not contain an at-sign)
import struct

import gdb
import gdb.printing

_DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"]
_SIZES = [4, 8, 2, 2, 4, 8, 1, 1]
_FORMATS = ["<f", "<d", "<e", "<H", "<i", "<q", "<B", "<?"]
_SHOWN = 6  # values shown for a CPU tensor


def _pointer(ref):
    """The raw pointer inside a reel::Ref<T>."""
    return ref["p_"]


def _dims(d):
    n = int(d["n_"])
    return [int(d["d_"][i]) for i in range(n)]


def _dims_str(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


def _dtype(v):
    i = int(v)
    return _DTYPES[i] if 0 <= i < len(_DTYPES) else "dtype(%d)" % i


def _device(dev):
    if int(dev["type"]) == 0:
        return "cpu"
    return "cuda:%d" % int(dev["index"])


def _site(site):
    f = site["file"]
    if int(f) == 0 or int(site["line"]) == 0:
        return "unknown site"
    return "%s:%d" % (f.string(), int(site["line"]))


def _string(s):
    """A libstdc++ std::string."""
    return s["_M_dataplus"]["_M_p"].string(length=int(s["_M_string_length"]))


def _module(p):
    """A ModulePath pointer as reel prints it: "feat.fc", the type for the root; "" for null."""
    if int(p) == 0:
        return ""
    m = p.dereference()
    path = _string(m["path"])
    return path if path else _string(m["type"])


def _where(node):
    """ "file:line in feat.fc" for a tape entry (without " in ..." outside modules)."""
    s = _site(node["site"])
    module = _module(node["module"])
    return s + " in " + module if module else s


def _vector(v):
    """The elements of a libstdc++ std::vector."""
    start, finish = v["_M_impl"]["_M_start"], v["_M_impl"]["_M_finish"]
    return [(start + i).dereference() for i in range(int(finish - start))]


def _meta_str(m):
    return "%s %s" % (_dims_str(_dims(m["shape"])), _dtype(m["dtype"]))


def _format_value(raw, dt):
    if dt == 3:  # bf16: the top half of an f32
        raw = struct.unpack("<f", struct.pack("<I", raw << 16))[0]
    if dt == 7:
        return "true" if raw else "false"
    if dt in (0, 1, 2, 3):
        return "%g" % raw
    return str(raw)


def _first_values(impl, dt, shape, device):
    """The first values in row-major order, following strides and offset."""
    if device != "cpu":
        return " (values on %s: copy with .cpu() to see them)" % device
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return " = {}"
    storage = _pointer(impl["storage"])
    base = int(storage["data_"])
    if base == 0:
        return ""
    strides = _dims(impl["strides"])
    offset = int(impl["offset"])
    size = _SIZES[dt]
    inferior = gdb.selected_inferior()
    values = []
    index = [0] * len(shape)
    try:
        for _ in range(min(numel, _SHOWN)):
            element = offset + sum(i * s for i, s in zip(index, strides))
            data = inferior.read_memory(base + element * size, size).tobytes()
            values.append(_format_value(struct.unpack(_FORMATS[dt], data)[0], dt))
            for d in reversed(range(len(shape))):
                index[d] += 1
                if index[d] < shape[d]:
                    break
                index[d] = 0
    except gdb.MemoryError:
        return " = <unreadable>"
    more = ", ..." if numel > _SHOWN else ""
    return " = {" + ", ".join(values) + more + "}"


def _impl_str(impl):
    shape = _dims(impl["shape"])
    dt = int(impl["dtype"])
    storage = _pointer(impl["storage"])
    device = _device(storage["device_"]) if int(storage) else "no storage"
    s = "%s %s %s" % (_dims_str(shape), _dtype(dt), device)
    if bool(impl["requires_grad"]):
        s += " requires_grad"
    node = _pointer(impl["grad_fn"])
    if int(node):
        s += " grad_fn=%s at %s" % (node["op"].string(), _where(node))
    if int(storage) and 0 <= dt < len(_DTYPES):
        s += _first_values(impl, dt, shape, device)
    return s


class TensorPrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        impl = _pointer(self.val["impl_"])
        if int(impl) == 0:
            return "reel::Tensor (undefined)"
        return "reel::Tensor " + _impl_str(impl.dereference())


class TensorImplPrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        return "reel::TensorImpl " + _impl_str(self.val)


class NodePrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        v = self.val
        ins = ", ".join(_meta_str(m) for m in _vector(v["inputs"]))
        outs = ", ".join(_meta_str(m) for m in _vector(v["outputs"]))
        return "reel::Node #%d %s %s -> %s at %s" % (int(v["seq"]), v["op"].string(), ins, outs, _where(v))


class DimsPrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        return _dims_str(_dims(self.val))


class SitePrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        return _site(self.val)


class ModulePathPrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        return "reel::ModulePath " + _module(self.val.address)


class DevicePrinter:
    def __init__(self, val):
        self.val = val

    def to_string(self):
        return _device(self.val)


class RefPrinter:
    """Ref<T>: the pointee through its own printer when it has one."""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        p = _pointer(self.val)
        if int(p) == 0:
            return "reel::Ref (null)"
        target = p.dereference()
        printer = gdb.default_visualizer(target)
        if printer is not None:
            return printer.to_string()
        return "reel::Ref -> (%s) 0x%x" % (target.type, int(p))


def build_printers():
    pp = gdb.printing.RegexpCollectionPrettyPrinter("reel")
    pp.add_printer("Tensor", "^reel::Tensor$", TensorPrinter)
    pp.add_printer("TensorImpl", "^reel::TensorImpl$", TensorImplPrinter)
    pp.add_printer("Node", "^reel::Node$", NodePrinter)
    pp.add_printer("Dims", "^reel::Dims$", DimsPrinter)
    pp.add_printer("Site", "^reel::Site$", SitePrinter)
    pp.add_printer("Device", "^reel::Device$", DevicePrinter)
    pp.add_printer("ModulePath", "^reel::ModulePath$", ModulePathPrinter)
    pp.add_printer("Ref", "^reel::Ref<.*>$", RefPrinter)
    return pp


# Loaded from libreel's section: for that library; sourced by hand: for everything.
gdb.printing.register_pretty_printer(gdb.current_objfile(), build_printers(), replace=True)
