/**
 * The dashboard's only way out: calls to this origin's `/v1` API with the signed-in API key as
 * `Authorization: Bearer`. The key lives in sessionStorage (this tab, until it closes or signs
 * out) and is sent nowhere else: paths must start with `/v1/`, requests go to the page's own
 * origin without cookies or a referrer. API errors become `ApiError` with the API's code,
 * message and field.
 */

const KEY_ITEM = "kairos.apiKey";

export class ApiError extends Error {
  /**
   * @param {number} status HTTP status (0: the API could not be reached)
   * @param {string} code the API's error code
   * @param {string} message
   * @param {string | undefined} field the request field the error is about
   */
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

/** @returns {string | null} */
export function getKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

/** @param {string} key */
export function setKey(key) {
  sessionStorage.setItem(KEY_ITEM, key);
}

export function clearKey() {
  sessionStorage.removeItem(KEY_ITEM);
}

/**
 * @param {string} method
 * @param {string} path starting with /v1/
 * @param {{ body?: unknown, headers?: Record<string, string> }} [opts]
 * @returns {Promise<any>} the parsed JSON answer (null for 204)
 */
export async function api(method, path, opts = {}) {
  if (!path.startsWith("/v1/")) throw new Error(`not an API path: ${path}`);
  const key = getKey();
  if (key === null) throw new ApiError(401, "unauthenticated", "Not signed in.", undefined);
  /** @type {Record<string, string>} */
  const headers = { authorization: `Bearer ${key}`, ...(opts.headers ?? {}) };
  if (opts.body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch (e) {
    throw new ApiError(0, "unavailable", `The API could not be reached (${String(e)}).`, undefined);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text === "" ? null : JSON.parse(text);
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = data && typeof data === "object" ? data.error : undefined;
    throw new ApiError(
      res.status,
      err?.code ?? `http_${res.status}`,
      err?.message ?? `The API answered ${res.status}.`,
      err?.field,
    );
  }
  return data;
}
