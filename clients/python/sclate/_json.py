"""sclate.v1 messages as plain JSON values, every field present.

The proto3 JSON mapping (``json_format.MessageToDict``) leaves out every field
holding its zero value and writes 64-bit integers as strings: a round that
scored 0 loses its ``score`` key and ``"events_fired": "59"`` is a string. A
script reading ``sclate ... -o json`` wants neither. :func:`message_to_json`
walks the message's descriptor instead:

- every field is present; a field with explicit presence (a message field, a
  proto3 ``optional`` scalar) that is not set is ``None`` (JSON ``null``),
  except a ``Struct`` (``{}``) or ``ListValue`` (``[]``), which like a map or a
  repeated field has no "unset" apart from empty;
- integers of every width are ``int``, floating-point fields are ``float``
  (NaN and the infinities, which JSON numbers cannot hold, are the strings
  "NaN", "Infinity" and "-Infinity", as in the proto3 mapping);
- enums are their value names, bytes are base64 text;
- ``Timestamp`` and ``Duration`` are their RFC 3339 / "1.5s" strings,
  ``Struct``/``Value``/``ListValue`` are the JSON they hold (a whole number
  as an ``int``, as it was most likely written: ``days=2``, not ``2.0``), the
  wrapper types are their value;
- maps are objects (keys as text), repeated fields are lists;
- of a ``oneof`` (such as ``RunEvent.kind``) only the member that is set is
  written, as in the proto3 mapping, so its key tells which one it is.

Keys are the proto field names (``events_fired``), in declaration order.
"""

from __future__ import annotations

import base64
import functools
import math
import struct
from typing import Any

from google.protobuf import descriptor_pb2, json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

__all__ = ["message_to_json"]

_INTEGER_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SFIXED64,
    }
)
_TEXT_FORM = frozenset({"google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"})
_WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)


def message_to_json(msg: Message) -> Any:
    """``msg`` as a value ``json.dumps`` writes as is: a dict for an ordinary
    message, a string, list, number or None for the well-known types."""
    name = msg.DESCRIPTOR.full_name
    if name in _TEXT_FORM:
        return msg.ToJsonString()  # type: ignore[attr-defined]
    if name == "google.protobuf.Struct":
        return {key: _json_value(v) for key, v in msg.fields.items()}  # type: ignore[attr-defined]
    if name == "google.protobuf.ListValue":
        return [_json_value(v) for v in msg.values]  # type: ignore[attr-defined]
    if name == "google.protobuf.Value":
        return _json_value(msg)
    if name in _WRAPPERS:
        return _scalar(msg.DESCRIPTOR.fields_by_name["value"], msg.value)  # type: ignore[attr-defined]
    if name == "google.protobuf.Any":
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    synthetic = _proto3_optional_fields(msg.DESCRIPTOR)
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {_map_key(k): _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.containing_oneof is not None and field.name not in synthetic:
            if msg.WhichOneof(field.containing_oneof.name) == field.name:
                out[field.name] = _value(field, value)
        elif field.has_presence and not msg.HasField(field.name):
            out[field.name] = _unset(field)
        else:
            out[field.name] = _value(field, value)
    return out


@functools.cache
def _proto3_optional_fields(desc: Descriptor) -> frozenset[str]:
    """Fields declared ``optional`` in proto3: their oneof is synthetic, only
    there to give them presence, so they are written like any other field."""
    proto = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(proto)
    return frozenset(f.name for f in proto.field if f.proto3_optional)


def _unset(field: FieldDescriptor) -> Any:
    """The value of a field with presence that is not set."""
    kind = field.message_type.full_name if field.message_type is not None else ""
    if kind == "google.protobuf.Struct":
        return {}
    if kind == "google.protobuf.ListValue":
        return []
    return None


def _is_map(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated and field.message_type is not None and field.message_type.GetOptions().map_entry)


def _map_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _value(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_to_json(value)
    return _scalar(field, value)


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind in _INTEGER_TYPES:
        return int(value)
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return _finite_or_name(float(value))
    if kind == FieldDescriptor.TYPE_FLOAT:
        return _finite_or_name(_shortest_float32(float(value)))
    if kind == FieldDescriptor.TYPE_BOOL:
        return bool(value)
    if kind == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else int(value)
    if kind == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _json_value(value: Any) -> Any:
    """A ``google.protobuf.Value`` as the JSON it holds."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {key: _json_value(v) for key, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_json_value(v) for v in value.list_value.values]
    if kind == "number_value":
        number = float(value.number_value)
        if number.is_integer() and abs(number) <= 2**53:
            return int(number)
        return _finite_or_name(number)
    if kind == "string_value":
        return str(value.string_value)
    if kind == "bool_value":
        return bool(value.bool_value)
    return None  # null_value, or nothing set


def _finite_or_name(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _shortest_float32(value: float) -> float:
    """The shortest decimal that is the same 32-bit float (0.1, not 0.10000000149011612)."""
    if not math.isfinite(value):
        return value
    packed = struct.pack("<f", value)
    for digits in range(6, 10):
        shorter = float(f"{value:.{digits}g}")
        if struct.pack("<f", shorter) == packed:
            return shorter
    return value
