/**
 * A deliberately small JSON Schema (2020-12 subset) checker, enough to check that the OpenAPI
 * document's generated schemas reject what the API's validator rejects. It knows the keywords
 * z.toJSONSchema emits for our schemas; an unknown keyword fails loudly rather than passing.
 */
type Schema = Record<string, unknown>;

const KNOWN = new Set([
  "$ref",
  "type",
  "enum",
  "const",
  "anyOf",
  "oneOf",
  "properties",
  "required",
  "additionalProperties",
  "propertyNames",
  "maxProperties",
  "minimum",
  "maximum",
  "minLength",
  "maxLength",
  "pattern",
  "items",
  "minItems",
  "maxItems",
  "default",
  "description",
  "examples",
  "title",
  "format",
]);

export function validates(schema: Schema, value: unknown, root: Schema): boolean {
  for (const k of Object.keys(schema))
    if (!KNOWN.has(k)) throw new Error(`json-schema-lite: unsupported keyword ${k}`);
  if (typeof schema["$ref"] === "string") {
    const name = schema["$ref"].replace("#/components/schemas/", "");
    const target = ((root["components"] as Schema)["schemas"] as Record<string, Schema>)[name];
    if (!target) throw new Error(`unresolved ${schema["$ref"]}`);
    return validates(target, value, root);
  }
  if (schema["type"] !== undefined) {
    const types = Array.isArray(schema["type"])
      ? (schema["type"] as string[])
      : [schema["type"] as string];
    if (!types.some((t) => typeOk(t, value))) return false;
  }
  if (Array.isArray(schema["enum"]) && !schema["enum"].includes(value)) return false;
  if ("const" in schema && schema["const"] !== value) return false;
  if (
    Array.isArray(schema["anyOf"]) &&
    !(schema["anyOf"] as Schema[]).some((s) => validates(s, value, root))
  )
    return false;
  if (
    Array.isArray(schema["oneOf"]) &&
    (schema["oneOf"] as Schema[]).filter((s) => validates(s, value, root)).length !== 1
  )
    return false;
  if (typeof value === "number") {
    if (typeof schema["minimum"] === "number" && value < schema["minimum"]) return false;
    if (typeof schema["maximum"] === "number" && value > schema["maximum"]) return false;
  }
  if (typeof value === "string") {
    const len = [...value].length;
    if (typeof schema["minLength"] === "number" && len < schema["minLength"]) return false;
    if (typeof schema["maxLength"] === "number" && len > schema["maxLength"]) return false;
    if (typeof schema["pattern"] === "string" && !new RegExp(schema["pattern"], "u").test(value))
      return false;
  }
  if (Array.isArray(value)) {
    if (typeof schema["minItems"] === "number" && value.length < schema["minItems"]) return false;
    if (typeof schema["maxItems"] === "number" && value.length > schema["maxItems"]) return false;
    if (schema["items"] && !value.every((v) => validates(schema["items"] as Schema, v, root)))
      return false;
  }
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const obj = value as Record<string, unknown>;
    const props = (schema["properties"] ?? {}) as Record<string, Schema>;
    for (const r of (schema["required"] ?? []) as string[]) if (!(r in obj)) return false;
    if (
      typeof schema["maxProperties"] === "number" &&
      Object.keys(obj).length > schema["maxProperties"]
    )
      return false;
    for (const [k, v] of Object.entries(obj)) {
      if (schema["propertyNames"] && !validates(schema["propertyNames"] as Schema, k, root))
        return false;
      const p = props[k];
      if (p) {
        if (!validates(p, v, root)) return false;
      } else if (schema["additionalProperties"] === false) {
        return false;
      } else if (
        typeof schema["additionalProperties"] === "object" &&
        !validates(schema["additionalProperties"] as Schema, v, root)
      ) {
        return false;
      }
    }
  }
  return true;
}

function typeOk(t: string, v: unknown): boolean {
  switch (t) {
    case "null":
      return v === null;
    case "integer":
      return Number.isInteger(v);
    case "number":
      return typeof v === "number";
    case "string":
      return typeof v === "string";
    case "boolean":
      return typeof v === "boolean";
    case "array":
      return Array.isArray(v);
    case "object":
      return typeof v === "object" && v !== null && !Array.isArray(v);
    default:
      throw new Error(`json-schema-lite: unknown type ${t}`);
  }
}
