/** The HTTP API: app factory, socket server, schemas (for the OpenAPI document and tests). */
export { createApp, type AppDeps } from "./app.ts";
export { serveApi, type ApiServer, type ServeOptions } from "./server.ts";
export type { ApiEnv } from "./auth.ts";
export { openApiDocument } from "./openapi.ts";
export {
  CreateJobSchema,
  PatchJobSchema,
  parseCreateBody,
  parsePatchBody,
  LIMITS,
} from "../app/schemas.ts";
export { DEFAULT_MAX_BODY_BYTES } from "./body.ts";
