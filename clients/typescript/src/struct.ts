// Conversion between plain JSON values and google.protobuf.Struct/Value as
// @grpc/proto-loader represents them (camelCase fields, enums as strings,
// virtual `kind` oneof field).
import type { Struct } from "./generated/google/protobuf/Struct";
import type { Struct__Output } from "./generated/google/protobuf/Struct";
import type { Value, Value__Output } from "./generated/google/protobuf/Value";

export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

export function toValue(v: JsonValue, path = "$"): Value {
  if (v === null) return { nullValue: "NULL_VALUE" };
  switch (typeof v) {
    case "string":
      return { stringValue: v };
    case "boolean":
      return { boolValue: v };
    case "number":
      if (!Number.isFinite(v)) {
        throw new TypeError(`${path}: ${v} cannot be encoded in a google.protobuf.Value`);
      }
      return { numberValue: v };
    case "object":
      if (Array.isArray(v)) {
        return { listValue: { values: v.map((x, i) => toValue(x, `${path}[${i}]`)) } };
      }
      return { structValue: toStruct(v, path) };
    default:
      throw new TypeError(`${path}: a ${typeof v} is not a JSON value`);
  }
}

export function toStruct(obj: JsonObject, path = "$"): Struct {
  const fields: Record<string, Value> = {};
  for (const [k, v] of Object.entries(obj)) {
    // Skip undefined like JSON.stringify does (an optional key left unset).
    if (v === undefined) continue;
    fields[k] = toValue(v, `${path}.${k}`);
  }
  return { fields };
}

export function fromValue(v: Value__Output): JsonValue {
  switch (v.kind) {
    case "nullValue":
      return null;
    case "numberValue":
      return v.numberValue ?? 0;
    case "stringValue":
      return v.stringValue ?? "";
    case "boolValue":
      return v.boolValue ?? false;
    case "structValue":
      return v.structValue ? fromStruct(v.structValue) : {};
    case "listValue":
      return (v.listValue?.values ?? []).map(fromValue);
    case undefined:
      // An unset Value decodes as null (as in the protobuf JSON mapping).
      return null;
  }
}

export function fromStruct(s: Struct__Output): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(s.fields)) out[k] = fromValue(v);
  return out;
}
