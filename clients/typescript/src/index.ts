export { SclateClient, defaultProtoDir, runName } from "./client";
export type { SclateClientOptions, CallOptions } from "./client";
export { SclateError, REASON_KEY, FIELD_KEY, statusName } from "./errors";
export type { StatusName } from "./errors";
export { formatEvent } from "./format";
export { toStruct, fromStruct, toValue, fromValue } from "./struct";
export type { JsonObject, JsonValue, JsonPrimitive } from "./struct";
export * from "./types";
export { status, Metadata } from "@grpc/grpc-js";
