import { Metadata, status, type ServiceError } from "@grpc/grpc-js";

/** Trailing-metadata key in which sclated puts a machine-readable reason. */
export const REASON_KEY = "sclate-reason";
/** Trailing-metadata key naming the request field at fault, when there is one. */
export const FIELD_KEY = "sclate-field";

/** The name of a gRPC status code, e.g. "NOT_FOUND". */
export type StatusName = keyof typeof status;

export function statusName(code: status): StatusName | `UNKNOWN_CODE_${number}` {
  const name = status[code] as StatusName | undefined;
  return name ?? `UNKNOWN_CODE_${code}`;
}

/**
 * A failed call to sclated: the gRPC status code and details, plus the
 * daemon's machine-readable `reason` and the offending `field` (from trailing
 * metadata) when it sent them.
 */
export class SclateError extends Error {
  override readonly name = "SclateError";
  /** Numeric gRPC status code (compare with `status.NOT_FOUND` etc.). */
  readonly code: status;
  /** The status code's name, e.g. "INVALID_ARGUMENT". */
  readonly codeName: string;
  /** The status message sent by the server. */
  readonly details: string;
  /** Machine-readable reason (trailer `sclate-reason`), if any. */
  readonly reason: string | undefined;
  /** The request field at fault (trailer `sclate-field`), if any. */
  readonly field: string | undefined;
  /** The RPC that failed, e.g. "CreateRun". */
  readonly method: string;
  /** All trailing metadata of the failed call. */
  readonly metadata: Metadata;

  constructor(
    method: string,
    code: status,
    details: string,
    metadata: Metadata,
    options?: { cause?: unknown },
  ) {
    const reason = firstString(metadata, REASON_KEY);
    const field = firstString(metadata, FIELD_KEY);
    const codeName = statusName(code);
    const extra = [reason ? `reason=${reason}` : "", field ? `field=${field}` : ""]
      .filter(Boolean)
      .join(" ");
    super(`${method}: ${codeName}: ${details}${extra ? ` (${extra})` : ""}`, options);
    this.method = method;
    this.code = code;
    this.codeName = codeName;
    this.details = details;
    this.reason = reason;
    this.field = field;
    this.metadata = metadata;
  }
}

function firstString(md: Metadata, key: string): string | undefined {
  const v = md.get(key)[0];
  if (v === undefined) return undefined;
  return typeof v === "string" ? v : v.toString("utf8");
}

export function isServiceError(e: unknown): e is ServiceError {
  return (
    e instanceof Error &&
    typeof (e as Partial<ServiceError>).code === "number" &&
    (e as Partial<ServiceError>).metadata instanceof Metadata
  );
}

/** Wraps a grpc-js error into a SclateError; anything else is returned as is. */
export function toSclateError(method: string, e: unknown): unknown {
  if (e instanceof SclateError) return e;
  if (isServiceError(e)) {
    return new SclateError(method, e.code, e.details, e.metadata, { cause: e });
  }
  return e;
}
